#!/usr/bin/env bash
# The main job on a fresh Debian machine: build walkfs, mount a local
# directory (FUSE -> vfs -> the directory), build and run a small C
# program on the mount, drain it (walkfs sync), show its counters,
# unmount; the same again through the whole 9P stack (--via-9p: FUSE ->
# vfs -> 9P client -> walkfs server in the same process -> the
# directory). Then the quick lookup micro-benchmark (kernel vs walkfs)
# with its plot.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
command -v cc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi
cargo build --release -p walkfs-cli --quiet
walkfs=$PWD/target/release/walkfs

demo=$PWD/target/demo
src=$demo/src mnt=$demo/mnt
mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
rm -rf "$demo" && mkdir -p "$src/include" "$mnt"
cat > "$src/include/lookup.h" <<'C'
#define WHAT "a build on a walkfs mount"
C
cat > "$src/main.c" <<'C'
#include <stdio.h>
#include "lookup.h"
int main(void) { printf("hello from %s\n", WHAT); return 0; }
C
printf 'demo: main.c include/lookup.h\n\tcc -Iinclude -o demo main.c\n' > "$src/Makefile"
ln -s include/lookup.h "$src/lookup-link.h"

for how in "" --via-9p; do
    echo "== walkfs mount $src $mnt -o cache=loose,negtimeout=-1 $how"
    "$walkfs" mount "$src" "$mnt" -o cache=loose,negtimeout=-1 $how
    trap 'umount "$mnt" 2>/dev/null || true' EXIT
    grep " $mnt " /proc/mounts
    ls -l "$mnt"
    make -s -B -C "$mnt"
    "$mnt/demo"
    echo "== walkfs sync $mnt"
    "$walkfs" sync "$mnt"
    echo "== walkfs stats $mnt"
    "$walkfs" stats "$mnt"
    fusermount3 -u "$mnt"
    trap - EXIT
    echo "== unmounted; the build output is on the host:"
    ls -l "$src/demo"
done

echo "== walkfs bench micro --quick"
"$walkfs" bench micro --quick --plot target/micro.png "$@"
