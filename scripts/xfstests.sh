#!/usr/bin/env bash
# xfstests (fstests) through a walkfs mount, as every Linux file system is
# held to it.
#
#   bash scripts/xfstests.sh [-o OPTS] [--serve | --native | --ceph CONF] [TEST...]
#
# TEST: tests or groups as ./check takes them (generic/001, -g quick);
# default: the short subset CI runs (XFSTESTS_SUBSET below). -o: the
# mount's options (default: none, the default mount). --serve: mount a
# separate `walkfs serve` of the directories rather than the directories
# themselves. --native: no walkfs at all, the same tests on ext4 itself
# (two loop devices), the anchor a walkfs run is read beside. --ceph CONF:
# the test and scratch file systems are two directories of the CephFS of
# the cluster CONF describes (scripts/ceph-up.sh), mounted `ceph:/DIR`.
#
# Builds xfstests from ../shared/tools/xfstests-*.tar.gz into
# target/xfstests (installing its Debian build dependencies) and says it
# skipped when that tarball is absent (under CI: fails). The suite mounts
# with `mount -t fuse.walkfs SRC DIR -o OPTS`, which runs
# /sbin/mount.fuse.walkfs: a link to target/release/walkfs made here.
# TEST_DEV and SCRATCH_DEV are directories on a fresh ext4 image of its
# own. Results: target/xfstests/results/, the summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

opts=""
serve=0
native=0
ceph=""
tests=()
while [ $# -gt 0 ]; do
    case "$1" in
    -o) opts="$2"; shift 2 ;;
    --serve) serve=1; shift ;;
    --native) native=1; shift ;;
    --ceph) ceph="$2"; shift 2 ;;
    *) tests+=("$1"); shift ;;
    esac
done
# What CI runs: quick tests of names, data, modes, links, times,
# renames, extended attributes, ACLs, fallocate, seeks, mount options and
# file handles (also across a remount: 477, 777), O_TMPFILE (004, 389)
# that pass through walkfs
# today and must not regress. (Issue 49's list: 020 needs more
# attributes than the backing ext4 keeps.)
XFSTESTS_SUBSET=(generic/001 generic/002 generic/005 generic/006 generic/007 generic/008
    generic/011 generic/013 generic/023 generic/024 generic/025 generic/028 generic/033
    generic/035 generic/037 generic/053 generic/062 generic/070 generic/071 generic/080
    generic/086 generic/097 generic/099 generic/103 generic/105 generic/117 generic/120
    generic/126 generic/184 generic/215 generic/236 generic/237 generic/245 generic/306
    generic/307 generic/309 generic/313 generic/318 generic/319 generic/337 generic/375
    generic/377 generic/403 generic/444 generic/529 generic/597 generic/633 generic/676
    generic/688 generic/426 generic/467 generic/477 generic/756 generic/777 generic/004
    generic/389)
# What CI runs over CephFS (--ceph): the subset's tests that pass there
# and take seconds (007, 013, 120, 676 take 16-25 s each on the
# one-machine cluster). Left out: 477 and 777 (handles across a remount)
# and 467 fail in a run of the whole subset and pass alone (not found
# yet); 004 and 389 need O_TMPFILE, 024/025 renameat2 flags, 008/033
# zero-range fallocate, which libcephfs 16.2 lacks.
# (Every one of these passed in a run of the whole subset; CI runs 24 to
# stay short: the rest pass too, run them by name.)
XFSTESTS_CEPH_SUBSET=(generic/001 generic/002 generic/005 generic/023 generic/028 generic/035
    generic/053 generic/062 generic/071 generic/080 generic/086 generic/097 generic/099
    generic/103 generic/184 generic/215 generic/236 generic/245 generic/306 generic/309
    generic/375 generic/426 generic/633 generic/756)
if [ ${#tests[@]} -eq 0 ]; then
    if [ -n "$ceph" ]; then tests=("${XFSTESTS_CEPH_SUBSET[@]}"); else tests=("${XFSTESTS_SUBSET[@]}"); fi
fi

tarball=$(ls ../shared/tools/xfstests-*.tar.gz 2>/dev/null | head -1 || true)
if [ -z "$tarball" ]; then
    if [ -n "${CI:-}${WALKFS_REQUIRE_ALL:-}" ]; then
        echo "xfstests.sh: no ../shared/tools/xfstests-*.tar.gz" >&2
        exit 1
    fi
    echo "SKIP: xfstests: no ../shared/tools/xfstests-*.tar.gz"
    exit 0
fi

build=$root/target/xfstests
src=$build/xfstests
if [ ! -x "$src/check" ] || [ ! -e "$src/ltp/fsx" ]; then
    deps=(xfslibs-dev uuid-dev libtool-bin e2fsprogs automake autoconf gcc make quota attr acl
        libacl1-dev libaio-dev xfsprogs libgdbm-dev gawk uuid-runtime python3 sqlite3 libcap-dev
        liburing-dev bc psmisc)
    missing=()
    for p in "${deps[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    rm -rf "$build" && mkdir -p "$src"
    # A git archive: its files at the top, or under one folder.
    tar xzf "$tarball" -C "$src"
    if [ ! -e "$src/check" ]; then
        top=$(ls "$src")
        mv "$src/$top"/* "$src/" && rmdir "$src/$top"
    fi
    echo "== building xfstests"
    (cd "$src" && make -j"$(nproc)" >"$build/build.log" 2>&1) || {
        tail -30 "$build/build.log"
        exit 1
    }
fi
# The users the suite's tests switch to.
getent passwd fsgqa >/dev/null || useradd -m fsgqa
getent passwd fsgqa2 >/dev/null || useradd -m fsgqa2
getent passwd 123456-fsgqa >/dev/null || useradd -m 123456-fsgqa 2>/dev/null || true
getent group fsgqa >/dev/null || groupadd fsgqa

cargo build --release -q -p walkfs-cli
walkfs=$root/target/release/walkfs
ln -sf "$walkfs" /sbin/mount.fuse.walkfs

# A fresh ext4 for the exported directories (ext4 remembers deleted
# inodes; a file system of its own keeps runs comparable).
work=$build/run
for m in "$work/test" "$work/scratch" "$work/disk"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m"
done
rm -rf "$work" && mkdir -p "$work/disk" "$work/test" "$work/scratch"
truncate -s 4G "$build/disk.img"
# ea_inode: values and counts of extended attributes past one block, as
# the suite expects of a file system with no limit of its own to declare.
mkfs.ext4 -q -F -O ea_inode "$build/disk.img"
mount -o loop "$build/disk.img" "$work/disk"
mkdir -p "$work/disk/test" "$work/disk/scratch"
server_pids=()
loops=()
if [ "$native" = 1 ]; then
    for d in test scratch; do
        truncate -s 4G "$build/$d.img"
        mkfs.ext4 -q -F "$build/$d.img"
        loops+=("$(losetup -f --show "$build/$d.img")")
    done
fi
cleanup() {
    for m in "$work/test" "$work/scratch"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    for p in "${server_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    sleep 1
    umount "$work/disk" 2>/dev/null || umount -l "$work/disk" 2>/dev/null || true
}
trap cleanup EXIT

# As libfuse's file systems are tested (README.fuse): the devices are
# names the mount table shows (and the suite unmounts by), the
# directories come as source=.
test_src=$work/disk/test
scratch_src=$work/disk/scratch
if [ "$serve" = 1 ]; then
    for d in test scratch; do
        "$walkfs" serve "$work/disk/$d" --listen "unix:$work/$d.sock" \
            --state-dir "$work/$d.state" 2>"$work/$d.serve.log" &
        server_pids+=($!)
    done
    for d in test scratch; do
        for _ in $(seq 100); do [ -S "$work/$d.sock" ] && break; sleep 0.1; done
    done
    test_src=unix:$work/test.sock
    scratch_src=unix:$work/scratch.sock
fi
if [ -n "$ceph" ]; then
    # Two fresh directories of the CephFS, made through a mount of its root.
    mkdir -p "$work/cephroot"
    "$walkfs" mount ceph: "$work/cephroot" -o "ceph_conf=$ceph"
    rm -rf "$work/cephroot/xfstests-test" "$work/cephroot/xfstests-scratch"
    mkdir "$work/cephroot/xfstests-test" "$work/cephroot/xfstests-scratch"
    umount "$work/cephroot"
    test_src=ceph:/xfstests-test
    scratch_src=ceph:/xfstests-scratch
    opts=ceph_conf=$ceph${opts:+,$opts}
fi

if [ "$native" = 1 ]; then
    cat >"$src/local.config" <<EOF
export FSTYP=ext4
export TEST_DEV=${loops[0]}
export TEST_DIR=$work/test
export SCRATCH_DEV=${loops[1]}
export SCRATCH_MNT=$work/scratch
export RESULT_BASE=$build/results
EOF
else
cat >"$src/local.config" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.walkfs
export TEST_DEV=walkfs-test
export TEST_DIR=$work/test
export SCRATCH_DEV=walkfs-scratch
export SCRATCH_MNT=$work/scratch
# dev,suid: what a root mount of ext4 has by default, so that the suite
# sees the same kernel rules (walkfs mounts nodev,nosuid unless asked).
export MOUNT_OPTIONS="-o source=$scratch_src,dev,suid,allow_other${opts:+,$opts}"
export TEST_FS_MOUNT_OPTS="-o source=$test_src,dev,suid,allow_other${opts:+,$opts}"
export RESULT_BASE=$build/results
EOF
fi

# The suite checks that TEST_DEV is mounted as type "$FSTYP" by the
# second column of `df -T`, where the kernel shows the subtype too
# (fuse.walkfs): a df in front of the real one shows it as fuse.
mkdir -p "$build/bin"
printf '#!/bin/sh\n/usr/bin/df "$@" | sed "s/ fuse\\.walkfs / fuse /"\n' >"$build/bin/df"
chmod +x "$build/bin/df"
export PATH="$build/bin:$PATH"

if [ "$native" = 1 ]; then
    echo "== xfstests on ext4 itself (loop devices), the anchor: ${tests[*]}"
else
    echo "== xfstests through walkfs (${opts:-default options}$([ "$serve" = 1 ] && echo ', a separate walkfs serve')$([ -n "$ceph" ] && echo ', over CephFS')): ${tests[*]}"
fi
cd "$src"
set +e
./check "${tests[@]}" 2>&1 | tee "$build/check.log"
rc=${PIPESTATUS[0]}
set -e
# ./check's own summary: "Ran:", "Not run:", "Failures:", "Failed N of M tests".
grep -E '^(Ran|Not run|Failures|Failed|Passed)' "$build/check.log" || true
failed=$(sed -n 's/^Failures: //p' "$build/check.log" | tail -1 | wc -w)
ran=$(sed -n 's/^Ran: //p' "$build/check.log" | tail -1 | wc -w)
notrun=$(sed -n 's/^Not run: //p' "$build/check.log" | tail -1 | wc -w)
echo "xfstests: $((ran - failed - notrun)) passed, $failed failed, $notrun skipped"
exit "$rc"
