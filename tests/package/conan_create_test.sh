#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `conan create` on this checkout, as a Conan user runs it: Conan 2.8.1 from ../shared/tools
# (beside the project's root), a profile whose [platform_requires] are the system's packages
# (Debian's Boost, hiredis, OpenSSL, prometheus-cpp; no remote is reachable, -nr), the
# recipe's test_package built and run against the package. Skipped (exit 77) where
# ../shared/tools is absent, as in a user's own clone.
#   conan_create_test.sh SOURCE_DIR WORK_DIR [conan create options...]
set -euo pipefail
src=$(cd "$1" && pwd) work=$2
shift 2
tarball="$src/../shared/tools/conan-2.8.1.tar.gz"
if [ ! -f "$tarball" ]; then
  echo "SKIPPED: $tarball is absent (it is beside the project's root on the developers' and CI's machines)"
  exit 77
fi
# Conan runs on Debian's Python and Python packages (scripts/lib/common.sh installs them).
python=/usr/bin/python3
missing=()
for module in yaml requests colorama patch_ng fasteners distro jinja2 dateutil urllib3; do
  "$python" -c "import $module" 2>/dev/null || missing+=("$module")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "FAILED: Conan needs the Python modules ${missing[*]} (Debian: python3-yaml python3-requests python3-colorama python3-patch-ng python3-fasteners python3-distro python3-jinja2 python3-dateutil python3-urllib3; ./scripts/test installs them)"
  exit 1
fi

mkdir -p "$work"
work=$(cd "$work" && pwd)
if [ ! -d "$work/conan-2.8.1/conans" ]; then
  tar -xzf "$tarball" -C "$work"
fi
conan() { PYTHONPATH="$work/conan-2.8.1" "$python" -m conans.conan "$@"; }
export CONAN_HOME="$work/home"
rm -rf "$CONAN_HOME"  # a package built by an earlier run must not pass for this one
conan --version

# The versions the system has (Debian package versions, e.g. 0.14.1-3 -> 0.14.1).
# (Each may find nothing: the check below says which, instead of set -e ending in silence.)
deb_version() { { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; } | sed 's/^[0-9]*://; s/[-+~].*//'; }
boost=$({ dpkg-query -W -f='${Package} ${Status}\n' 'libboost[0-9]*-dev' 2>/dev/null || true; } |
        sed -n 's/^libboost\([0-9.]*\)-dev .* installed$/\1/p' | sort -V | tail -n1)
boost_version=$(deb_version "libboost$boost-dev")
hiredis_version=$(deb_version libhiredis-dev)
openssl_version=$(deb_version libssl-dev)
prometheus_version=$(deb_version prometheus-cpp-dev)
for v in boost_version hiredis_version openssl_version prometheus_version; do
  [ -n "${!v}" ] || { echo "FAILED: no version found for ${v%_version} (is its -dev package installed?)"; exit 1; }
done

conan profile detect --force >/dev/null
cat >"$CONAN_HOME/profiles/system" <<PROFILE
include(default)

[settings]
compiler.cppstd=20
build_type=Release

[platform_requires]
boost/$boost_version
hiredis/$hiredis_version
openssl/$openssl_version
prometheus-cpp/$prometheus_version

[conf]
tools.cmake.cmaketoolchain:generator=Ninja
PROFILE
echo "== profile:"
cat "$CONAN_HOME/profiles/system"

# ccache through CMake's launcher variable, when there is one (the build's own compiler
# launcher does not reach Conan's build folder).
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache; fi

# A copy of the checkout (its files under version control, and new ones not ignored): Conan
# writes test_package/build and CMakeUserPresets.json beside the recipe.
copy="$work/source"
rm -rf "$copy" && mkdir -p "$copy"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" ls-files -z --cached --others --exclude-standard |
    (cd "$src" && xargs -0 cp --parents -t "$copy" 2>/dev/null || true)
else
  (cd "$src" && tar -cf - --exclude=./build --exclude=./out .) | tar -xf - -C "$copy"
fi
[ -f "$copy/conanfile.py" ] || { echo "FAILED: could not copy $src"; exit 1; }

echo "== conan create (a copy of $src) $*"
conan create "$copy" -pr:a system --build=missing -nr "$@" 2>&1 | tee "$work/create.log"
grep -q "consumer: ok" "$work/create.log" || { echo "FAILED: the test_package consumer did not say ok"; exit 1; }
# The package has what its options say: the CLI or not, a static or a shared library.
package=$(conan cache path "$(sed -n 's/^redis_lock\/[^:]*: Full package reference: //p' "$work/create.log" | tail -n1)")
case " $* " in
  *"cli=False"*) [ ! -e "$package/bin/redis-lock" ] || { echo "FAILED: cli=False packaged the CLI"; exit 1; } ;;
  *) grep -q "^redis-lock [0-9]" "$work/create.log" || { echo "FAILED: the packaged CLI did not run"; exit 1; } ;;
esac
case " $* " in
  *"shared=True"*) library="$package/lib/libredis_lock.so" ;;
  *) library="$package/lib/libredis_lock.a" ;;
esac
[ -e "$library" ] || { echo "FAILED: $library is not in the package"; ls -R "$package"; exit 1; }
echo "OK: conan create built, packaged and consumed redis_lock $*"
