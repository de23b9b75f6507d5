#!/bin/sh
# SPDX-License-Identifier: MIT
# The shared-library build: builds and installs redis_lock as a .so (with the CLI), checks its
# SONAME and that it exports only redis_lock's own symbols, then builds and runs the consumer
# against it through find_package and through pkg-config.
#   shared_build_test.sh SOURCE_DIR WORK_DIR CXX VERSION
set -eu
src=$1 work=$2 cxx=$3 version=$4
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"

cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DBUILD_SHARED_LIBS=ON -DREDIS_LOCK_INSTALL=ON -DREDIS_LOCK_BUILD_CLI=ON \
  -DREDIS_LOCK_BUILD_TESTS=OFF -DREDIS_LOCK_BUILD_EXAMPLES=OFF -DREDIS_LOCK_BUILD_BENCH=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" >/dev/null
cmake --build "$work/build" -j2 >/dev/null
cmake --install "$work/build" --prefix "$prefix" >/dev/null

major_minor=${version%.*}
lib=$(find "$prefix" -name "libredis_lock.so.$version" | head -n1)
[ -n "$lib" ] || { echo "libredis_lock.so.$version not installed"; exit 1; }
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libredis_lock.so.$major_minor" ] || { echo "SONAME is '$soname'"; exit 1; }
echo "SONAME $soname"

# Exported: redis_lock's symbols, plus what templates instantiated in our headers emit
# (Boost/std inline functions). Nothing of hiredis, fmt or OpenSSL may leak out.
leaked=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -E '^(redis|fmt|_ZN3fmt|SSL_|OPENSSL_)' |
  grep -v '^redis_lock' || true)
[ -z "$leaked" ] || { echo "exports private dependencies:"; echo "$leaked" | head; exit 1; }
echo "exports $(nm -D --defined-only "$lib" | grep -c ' T ') functions, none of hiredis/fmt/OpenSSL"

cmake -S "$src/tests/package/find_package" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
ldd "$work/consumer/consumer" | grep -q "libredis_lock.so.$major_minor" ||
  { echo "the consumer is not linked to the shared library"; exit 1; }

PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
export PKG_CONFIG_PATH
"$cxx" -std=c++20 $(pkg-config --cflags redis_lock) "$src/tests/package/consumer/main.cpp" \
  -o "$work/pc_consumer" $(pkg-config --libs redis_lock) -Wl,-rpath,"$(pkg-config --variable=libdir redis_lock)"
"$work/pc_consumer"
"$prefix/bin/redis-lock" --help >/dev/null
echo "shared build: ok"
