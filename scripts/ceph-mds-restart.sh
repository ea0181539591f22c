#!/usr/bin/env bash
# The MDS restarted in the middle of an untar and a git add through a
# walkfs mount of a CephFS: both finish without an error, and the tree on
# the CephFS equals the source.
#
#   bash scripts/ceph-mds-restart.sh [CONF]
#
# CONF: the cluster's conf (default /var/tmp/walkfs-ceph/ceph.conf, what
# scripts/ceph-up.sh starts; its MDS is restarted through its pid file).
# The tree is this repository's own source (`git archive HEAD`), copied
# ten times over so that the untar outlasts the restart. Exit 0 when the
# tree matches.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
conf=${1:-/var/tmp/walkfs-ceph/ceph.conf}
D=$(dirname "$conf")
walkfs=${WALKFS:-$repo/target/release/walkfs}
[ -x "$walkfs" ] || cargo build --release -q -p walkfs-cli

work=$(mktemp -d /var/tmp/walkfs-mds-restart.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt" "$work/src"
cleanup() {
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

for i in $(seq 3); do
    git -C "$repo" archive --prefix="copy$i/" HEAD | tar x -C "$work/src"
done
tar cf "$work/tree.tar" -C "$work/src" .
files=$(find "$work/src" -type f | wc -l)

"$walkfs" mount ceph: "$mnt" -o "ceph_conf=$conf"
top=$mnt/mds-restart-$$
mkdir "$top"

restart_mds() {
    sleep "$1"
    local pid
    pid=$(cat "$D/run/mds.a.pid")
    echo "ceph-mds-restart: MDS (pid $pid) stopped at ${1}s into the $2"
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    ceph-mds -c "$conf" -i a
    for _ in $(seq 240); do
        ceph -c "$conf" mds stat 2>/dev/null | grep -q up:active && break
        sleep 0.5
    done
    echo "ceph-mds-restart: MDS active again: $(ceph -c "$conf" mds stat 2>/dev/null)"
}

t0=$(date +%s.%N)
restart_mds 1 untar &
rpid=$!
tar xf "$work/tree.tar" -C "$top"
wait $rpid
t1=$(date +%s.%N)
echo "ceph-mds-restart: untar of $files files: $(echo "$t1 - $t0" | bc) s"

t0=$(date +%s.%N)
restart_mds 1 "git add" &
rpid=$!
git -C "$top" init -q
git -C "$top" add .
GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t \
    git -C "$top" commit -q -m tree
wait $rpid
t1=$(date +%s.%N)
echo "ceph-mds-restart: git add + commit: $(echo "$t1 - $t0" | bc) s"

# Compared through a fresh mount, so that nothing cached answers.
umount "$mnt"
"$walkfs" mount ceph: "$mnt" -o "ceph_conf=$conf"
if diff -r --exclude=.git "$work/src" "$top" >"$work/diff" 2>&1; then
    echo "ceph-mds-restart: the tree equals the source ($files files)"
else
    head -20 "$work/diff"
    echo "ceph-mds-restart: the tree differs from the source" >&2
    exit 1
fi
n=$(git -C "$top" ls-files | wc -l)
[ "$n" = "$files" ] || { echo "ceph-mds-restart: git has $n files of $files" >&2; exit 1; }
git -C "$top" fsck >/dev/null 2>&1 || { echo "ceph-mds-restart: git fsck failed" >&2; exit 1; }
echo "ceph-mds-restart: git has all $n files, fsck clean"
rm -rf "$top"
