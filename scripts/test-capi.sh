#!/usr/bin/env bash
# Build libwalkfs.so, install it with its header and pkg-config file into
# PREFIX (default: target/prefix), and compile and run the C test program
# against the installed copy.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-$PWD/target/prefix}
bash scripts/install-capi.sh "$PREFIX"
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
out=target/c-tests
mkdir -p "$out"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o "$out/test_walkfs" crates/capi/tests/c/test_walkfs.c $(pkg-config --cflags --libs walkfs)
"$out/test_walkfs"
