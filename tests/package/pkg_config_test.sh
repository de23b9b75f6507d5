#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the consumer with nothing but `pkg-config redis_lock` against an installed prefix.
set -eu
prefix=$1 source=$2 out=$3
PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags redis_lock)
libs=$(pkg-config --libs --static redis_lock)
c++ -std=c++20 $flags "$source" -o "$out" $libs
"$out"
