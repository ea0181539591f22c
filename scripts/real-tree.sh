#!/usr/bin/env bash
# A real tree through walkfs mounts, checked against the host: extract a
# tarball (default: the Linux source from Debian's linux-source-6.1, fetched
# once into /var/tmp/walkfs-real-tree), list it with find, git add + commit
# + status of a subtree, rm -rf; natively, through `walkfs mount DIR`,
# through `walkfs mount --via-9p DIR`, through a separate `walkfs serve
# --reply-delay-us D` (a server D µs away; REAL_TREE_DELAY_US, default 200)
# and `walkfs mount unix:SOCK`, and through bindfs (what a user would pick
# instead; skipped when not installed). Mode `serve-restart` (not run by
# default) is `serve` with the server killed with SIGKILL and started again
# (same state directory) at the seconds REAL_TREE_RESTARTS gives (default
# "4 12 25", counted from the untar's start) while the untar and git run;
# its tree on the host is checked against native too. REAL_TREE_MODES
# (space-separated: native mount via-9p serve serve-restart bindfs) picks
# some; native always runs first. Each step is timed
# (`find` alone, then the listing); the listing (names, types, sizes of
# non-directories, modes, link targets), the content checksum and git's answers must equal the native
# run's. REAL_TREE_MOUNT_OPTS gives the walkfs mounts options (e.g.
# cache=coherent). Each mode runs on a new ext4 on a loop device: this machine's
# root is ext4 without a journal, whose inode allocator scans every inode
# freed in the last minutes, so the previous mode's rm -rf would be timed.
#
#   bash scripts/real-tree.sh [TARBALL.tar] [GIT_SUBDIR]
#
# Needs root (FUSE mounts, apt-get download). Exit 0 when every mode
# matched native.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
walkfs=${WALKFS:-$repo/target/release/walkfs}
[ -x "$walkfs" ] || cargo build --release -p walkfs-cli
mopts=${REAL_TREE_MOUNT_OPTS:-}
cache=/var/tmp/walkfs-real-tree
tarball=${1:-}
sub=${2:-fs}
if [ -z "$tarball" ]; then
    tarball=$cache/linux.tar
    if [ ! -f "$tarball" ]; then
        mkdir -p "$cache"
        (cd "$cache" && apt-get download linux-source-6.1 >/dev/null 2>&1) || {
            echo "real-tree: cannot download linux-source-6.1; pass a tarball" >&2
            exit 0
        }
        deb=$(ls "$cache"/linux-source-6.1_*.deb | head -1)
        dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards '*linux-source-6.1.tar.xz' |
            xz -dc >"$tarball.part"
        mv "$tarball.part" "$tarball"
        rm -f "$deb"
    fi
fi
work=$(mktemp -d /var/tmp/walkfs-real-tree.XXXXXX)
server=""
restarter=""
stop_server() {
    if [ -n "$restarter" ]; then
        kill "$restarter" 2>/dev/null || true
        wait "$restarter" 2>/dev/null || true
        restarter=""
    fi
    if [ -f "$work/server.pid" ]; then
        local p
        p=$(cat "$work/server.pid")
        kill "$p" 2>/dev/null || true
        # Not our child (the restarter started it): wait until it is gone,
        # or the file system it holds cannot be unmounted.
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        rm -f "$work/server.pid"
    fi
    if [ -n "$server" ]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        server=""
    fi
}
# walkfs serve of $src on $work/serve.sock, its pid in $work/server.pid,
# returning once it listens.
start_server() {
    "$walkfs" serve "$src" --listen "unix:$work/serve.sock" --reply-delay-us "$delay" \
        --state-dir "$work/state" 2>>"$work/serve.log" &
    echo $! >"$work/server.pid"
    for _ in $(seq 100); do
        python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' \
            "$work/serve.sock" 2>/dev/null && return 0
        sleep 0.05
    done
}
cleanup() {
    local i
    mountpoint -q "$work/mnt" 2>/dev/null && umount "$work/mnt"
    stop_server
    # A daemon that just lost its mount may hold the file system a moment.
    for i in $(seq 50); do
        mountpoint -q "$work/fs" 2>/dev/null || break
        umount "$work/fs" 2>/dev/null || sleep 0.2
    done
    rm -rf "$work"
}
trap cleanup EXIT

# A new, empty ext4 at $work/fs (the previous one unmounted and dropped;
# a daemon that just lost its mount may hold it a moment longer).
fresh_fs() {
    local i
    for i in $(seq 50); do
        mountpoint -q "$work/fs" || break
        umount "$work/fs" 2>/dev/null || sleep 0.2
    done
    rm -f "$work/fs.img"
    mkdir -p "$work/fs"
    truncate -s 8G "$work/fs.img"
    mkfs.ext4 -q -F -E nodiscard "$work/fs.img"
    mount -o loop "$work/fs.img" "$work/fs"
}

t() { # label command...: run the command, print its seconds
    local label=$1 s e
    shift
    s=$(date +%s.%N)
    "$@"
    e=$(date +%s.%N)
    awk -v l="$label" -v s="$s" -v e="$e" 'BEGIN { printf "  %-10s %8.2f s\n", l, e - s }' >&2
}
untar() { tar -xf "$tarball" -C "$1"; }
# The listing's text is kept per mode ($work/listing.MODE) to show a
# difference.
listing() {
    # A directory's size is left out: ext4 seeds its directory hashes per
    # file system, so two fresh ones split large directories differently.
    (cd "$1" && find . \( -type d -printf '%p d - %m\n' \) -o -printf '%p %y %s %m %l\n' |
        LC_ALL=C sort) >"$work/listing.$mode"
    sha256sum <"$work/listing.$mode" | cut -c1-16
}
# Listing and content checksums of a tree, git's directory left out.
tree_sums() {
    (cd "$1" && find . -name .git -prune -o \( -type d -printf '%p d - %m\n' \) -o \
        -printf '%p %y %s %m %l\n' | LC_ALL=C sort | sha256sum | cut -c1-16)
    (cd "$1" && find . -name .git -prune -o -type f -print0 | LC_ALL=C sort -z |
        xargs -0 cat | sha256sum | cut -c1-16)
}
content() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 cat | sha256sum | cut -c1-16); }
gitrun() {
    local d=$1/$(ls "$1" | head -1)/$sub
    git -C "$d" init -q
    git -C "$d" add -A
    git -C "$d" -c user.name=w -c user.email=w@w commit -qm tree
    echo >>"$d/$(git -C "$d" ls-files | head -1)"
    git -C "$d" status --porcelain | sha256sum | cut -c1-16
    git -C "$d" ls-files | wc -l
}

declare -A want
status=0
delay=${REAL_TREE_DELAY_US:-200}
modes=(native mount via-9p serve)
if command -v bindfs >/dev/null; then
    modes+=(bindfs)
else
    echo "real-tree: bindfs not installed (apt-get install bindfs): its row skipped" >&2
fi
if [ -n "${REAL_TREE_MODES:-}" ]; then
    picked=(native)
    for m in $REAL_TREE_MODES; do
        [ "$m" = native ] || picked+=("$m")
    done
    modes=("${picked[@]}")
fi
for mode in "${modes[@]}"; do
    fresh_fs
    src=$work/fs/src
    mkdir -p "$src" "$work/mnt"
    root=$src
    case $mode in
    mount) "$walkfs" mount "$src" "$work/mnt" ${mopts:+-o "$mopts"}; root=$work/mnt ;;
    via-9p) "$walkfs" mount --via-9p "$src" "$work/mnt" ${mopts:+-o "$mopts"}; root=$work/mnt ;;
    serve)
        rm -f "$work/serve.sock"
        "$walkfs" serve "$src" --listen "unix:$work/serve.sock" --reply-delay-us "$delay" \
            2>"$work/serve.log" &
        server=$!
        for _ in $(seq 100); do [ -S "$work/serve.sock" ] && break; sleep 0.1; done
        "$walkfs" mount "unix:$work/serve.sock" "$work/mnt" ${mopts:+-o "$mopts"}
        root=$work/mnt
        echo "real-tree: serve: walkfs serve --reply-delay-us $delay" >&2
        ;;
    serve-restart)
        rm -rf "$work/serve.sock" "$work/state"
        start_server
        "$walkfs" mount "unix:$work/serve.sock" "$work/mnt" ${mopts:+-o "$mopts"}
        root=$work/mnt
        (
            last=0
            for at in ${REAL_TREE_RESTARTS:-4 12 25}; do
                sleep $((at - last))
                last=$at
                kill -9 "$(cat "$work/server.pid")"
                sleep 0.2
                start_server
                echo "real-tree: server killed (SIGKILL) and restarted at ${at}s" >&2
            done
        ) &
        restarter=$!
        echo "real-tree: serve-restart: walkfs serve --reply-delay-us $delay, killed at ${REAL_TREE_RESTARTS:-4 12 25} s" >&2
        ;;
    bindfs) bindfs "$src" "$work/mnt"; root=$work/mnt ;;
    esac
    echo "== $mode" >&2
    t untar untar "$root"
    t find find "$root" >/dev/null
    l=$(t listing listing "$root")
    c=$(content "$root")
    g=$(t git gitrun "$root" | tr '\n' ' ')
    n=$(find "$root" | wc -l)
    if [ "$mode" = serve-restart ]; then
        # Every restart done, everything sent: the host's own tree.
        wait "$restarter" 2>/dev/null || true
        restarter=""
        "$walkfs" sync "$work/mnt" || { echo "real-tree: $mode: walkfs sync failed" >&2; status=1; }
        # The host's tree (git's directory aside) against what the
        # mount shows now: every change the mount acknowledged is there.
        h=$(tree_sums "$src")
        m=$(tree_sums "$root")
        echo "$mode: host $h mount $m" >&2
        if [ "$h" != "$m" ]; then
            echo "real-tree: $mode: the host's tree differs from the mount's" >&2
            status=1
        fi
    fi
    t rm-rf rm -rf "$root"/*
    left=$(find "$root" -mindepth 1 | wc -l)
    if [ "$mode" != native ]; then
        if [ "$mode" != bindfs ]; then
            "$walkfs" sync "$work/mnt" || { echo "real-tree: $mode: walkfs sync failed" >&2; status=1; }
        fi
        umount "$work/mnt"
        stop_server
        host_left=$(find "$src" -mindepth 1 | wc -l)
    else
        host_left=$left
    fi
    echo "$mode: entries $n listing $l content $c git $g left $left host-left $host_left" >&2
    if [ "$mode" = native ]; then
        want=([l]=$l [c]=$c [g]=$g [n]=$n)
    elif [ "$l" != "${want[l]}" ] || [ "$c" != "${want[c]}" ] || [ "$g" != "${want[g]}" ] ||
        [ "$n" != "${want[n]}" ] || [ "$left" != 0 ] || [ "$host_left" != 0 ]; then
        echo "real-tree: $mode differs from native" >&2
        diff "$work/listing.native" "$work/listing.$mode" | head -20 >&2 || true
        status=1
    fi
done
[ $status = 0 ] && echo "real-tree: every mode matched native" >&2
exit $status
