#!/usr/bin/env bash
# Install the C ABI: PREFIX/lib/libwalkfs.so, PREFIX/include/walkfs.h,
# PREFIX/lib/pkgconfig/walkfs.pc. PREFIX defaults to /usr/local.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-/usr/local}
cargo build --release -p walkfs-capi --quiet
install -d "$PREFIX/lib/pkgconfig" "$PREFIX/include"
install -m 0755 target/release/libwalkfs.so "$PREFIX/lib/libwalkfs.so"
install -m 0644 crates/capi/include/walkfs.h "$PREFIX/include/walkfs.h"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
sed -e "s|@PREFIX@|$PREFIX|" -e "s|@VERSION@|$version|" crates/capi/walkfs.pc.in > "$PREFIX/lib/pkgconfig/walkfs.pc"
echo "installed libwalkfs into $PREFIX"
