#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the consumer with nothing but the README's `pkg-config --cflags --libs redis_lock`
# against an installed prefix (static, or shared: then the rpath finds the library).
set -eu
prefix=$1 source=$2 out=$3
PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
c++ -std=c++20 "$source" -o "$out" $(pkg-config --cflags --libs redis_lock) \
  -Wl,-rpath,"$(pkg-config --variable=libdir redis_lock)"
"$out"
