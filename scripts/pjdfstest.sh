#!/usr/bin/env bash
# pjdfstest (POSIX file-system conformance suite) through a walkfs FUSE mount.
#
#   bash scripts/pjdfstest.sh [-o MOUNT_OPTS] [--via-9p | --serve[=DELAY_US] [--restart=S,...]] [--native]
#                             [--ceph=CONF | --ceph-fuse=CONF] [FOLDER...]
#
# Builds pjdfstest from ../shared/tools/pjdfstest-*.tar.gz into
# target/pjdfstest/ (once; skipped with exit 0 when the tarball is absent),
# mounts a fresh directory under target/ with
# `walkfs mount SRC MNT -o allow_other[,MOUNT_OPTS]`, runs `prove -r` on the
# folders (default: all of tests/; a folder is `chmod`, `tests/chmod` or a
# single `chmod/00.t`) from a fresh subdirectory of the mount, unmounts,
# and prints the failed assertions per test file and the totals. --via-9p
# mounts through the whole 9P stack (the in-process server); --serve mounts
# a separate `walkfs serve` process (on a unix socket, replies held
# DELAY_US microseconds when given: a slow link); with --restart=S,... that
# server is killed with SIGKILL and started again (same state directory) S
# seconds after the tests start, for each S: the mount reconnects and the
# tests must not notice. --native
# runs the same on the plain host directory (the reference: ext4 fails 0).
# --ceph=CONF mounts the CephFS of the cluster CONF describes
# (`walkfs mount ceph: MNT -o ceph_conf=CONF`); --ceph-fuse=CONF mounts the
# same file system with ceph-fuse instead (the anchor to compare with).
# Exit status: 0 when no assertion failed, 1 otherwise.
#
# Environment: WALKFS (the binary; default target/release/walkfs, built with
# cargo when missing and WALKFS is unset), PJDFSTEST_TIMEOUT (seconds for the
# whole run, default 7200), PJDFSTEST_FILE_TIMEOUT (seconds per test file,
# default 600), PJDFSTEST_JOBS (prove -j, default 1).
# The TAP output of every test file is kept in target/pjdfstest-run/LABEL.*/tap/.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
opts="" native=0 via9p=() serve="" restarts="" folders=() ceph="" cephfuse=""
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || { usage >&2; exit 2; }; opts=$2; shift 2 ;;
        -o*) opts=${1#-o}; shift ;;
        --native) native=1; shift ;;
        --via-9p) via9p=(--via-9p); shift ;;
        --serve) serve=0; shift ;;
        --serve=*) serve=${1#--serve=}; shift ;;
        --restart=*) restarts=${1#--restart=}; shift ;;
        --ceph=*) ceph=${1#--ceph=}; shift ;;
        --ceph-fuse=*) cephfuse=${1#--ceph-fuse=}; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; folders+=("$@"); break ;;
        -*) echo "pjdfstest.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) folders+=("$1"); shift ;;
    esac
done
[ $native = 1 ] && [ -n "$opts" ] && echo "pjdfstest: --native: -o $opts ignored" >&2

tarball=$(ls ../shared/tools/pjdfstest-*.tar.gz 2>/dev/null | sort | tail -1)
if [ -z "$tarball" ]; then
    echo "pjdfstest: ../shared/tools/pjdfstest-*.tar.gz not found, skipped"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "pjdfstest: must run as root (the suite changes owners and credentials)" >&2
    exit 2
fi

# --- what the build and the run need
need_apt=()
command -v autoreconf >/dev/null || need_apt+=(autoconf)
command -v automake >/dev/null || need_apt+=(automake)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
command -v prove >/dev/null || need_apt+=(perl)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v timeout >/dev/null || need_apt+=(coreutils)
[ $native = 1 ] || command -v fusermount3 >/dev/null || need_apt+=(fuse3)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    echo "pjdfstest: installing ${need_apt[*]}"
    { apt-get -o DPkg::Lock::Timeout=600 update -qq &&
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need_apt[@]}"; } >/dev/null ||
        { echo "pjdfstest: apt-get install ${need_apt[*]} failed" >&2; exit 2; }
fi

# --- pjdfstest, built once into target/pjdfstest/
pjd=$repo/target/pjdfstest
mkdir -p "$repo/target"
exec 9>"$repo/target/pjdfstest.lock"
flock 9
if [ ! -x "$pjd/pjdfstest" ] || [ "$(cat "$pjd/.built-from" 2>/dev/null)" != "$(basename "$tarball")" ]; then
    echo "pjdfstest: building $(basename "$tarball") in target/pjdfstest"
    rm -rf "$pjd" && mkdir -p "$pjd"
    tar xzf "$tarball" -C "$pjd" --strip-components=1 || exit 2
    if ! ( cd "$pjd" && autoreconf -ifs && ./configure && make pjdfstest ) >"$repo/target/pjdfstest-build.log" 2>&1; then
        tail -30 "$repo/target/pjdfstest-build.log" >&2
        echo "pjdfstest: build failed (target/pjdfstest-build.log)" >&2
        exit 2
    fi
    basename "$tarball" >"$pjd/.built-from"
fi
flock -u 9

# --- the test files
[ ${#folders[@]} -gt 0 ] || folders=(tests)
targets=()
for f in "${folders[@]}"; do
    f=${f%/}; f=${f#./}
    case "$f" in tests | tests/*) ;; *) f=tests/$f ;; esac
    if [ ! -e "$pjd/$f" ]; then
        echo "pjdfstest: no $f in pjdfstest (folders: $(cd "$pjd/tests" && ls -d */ | tr -d / | tr '\n' ' '))" >&2
        exit 2
    fi
    targets+=("$pjd/$f")
done
mapfile -t expected < <(find "${targets[@]}" -name '*.t' -type f | sort -u)

# --- the file system under test
if [ $native = 1 ]; then
    label=native
elif [ -n "$cephfuse" ]; then
    label=ceph-fuse
    command -v ceph-fuse >/dev/null || { echo "pjdfstest: ceph-fuse not installed (bash scripts/ceph-up.sh installs it)" >&2; exit 2; }
else
    label=walkfs${ceph:+-ceph}${via9p:+-9p}${serve:+-serve$serve}${restarts:+-restart}${opts:+-$(printf %s "$opts" | tr -c 'A-Za-z0-9=_.\n-' _)}
    if [ -z "${WALKFS:-}" ] && [ ! -x "$repo/target/release/walkfs" ]; then
        cargo build --release -p walkfs-cli --quiet || exit 2
    fi
    walkfs=${WALKFS:-$repo/target/release/walkfs}
    [ -x "$walkfs" ] || { echo "pjdfstest: $walkfs not found" >&2; exit 2; }
fi
mkdir -p "$repo/target/pjdfstest-run"
run=$(mktemp -d "$repo/target/pjdfstest-run/$label.XXXXXX")
chmod 0755 "$run"
src=$run/src mnt=$run/mnt tap=$run/tap
mkdir -p "$src" "$mnt" "$tap"
chmod 0755 "$src" "$mnt"

mounted=0
server=""
restarter=""
cleanup() {
    cd /
    if [ $mounted = 1 ]; then
        fusermount3 -u "$mnt" 2>/dev/null || { sleep 2; fusermount3 -u "$mnt" 2>/dev/null; } ||
            { echo "pjdfstest: $mnt busy, lazy unmount" >&2; fusermount3 -uz "$mnt" 2>/dev/null; } ||
            umount -l "$mnt" 2>/dev/null
        mounted=0
    fi
    if [ -n "$restarter" ]; then
        kill "$restarter" 2>/dev/null
        wait "$restarter" 2>/dev/null
        restarter=""
    fi
    if [ -f "$run/server.pid" ]; then
        kill "$(cat "$run/server.pid")" 2>/dev/null
        rm -f "$run/server.pid"
    fi
    if [ -n "$server" ]; then
        kill "$server" 2>/dev/null
        wait "$server" 2>/dev/null
        server=""
    fi
    rm -rf "$src" 2>/dev/null
    rmdir "$mnt" 2>/dev/null
}
# The run's processes (prove, the tests), ended on interruption so that the
# mount is not busy when it is unmounted.
runner=""
descendants() {
    local c
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$c"; echo "$c"; done
}
interrupted() {
    echo "pjdfstest: interrupted" >&2
    if [ -n "$runner" ]; then
        kill -TERM $(descendants "$runner") "$runner" 2>/dev/null
        sleep 1
        kill -KILL $(descendants "$runner") "$runner" 2>/dev/null
    fi
    exit 130
}
trap cleanup EXIT
trap interrupted INT TERM HUP

if [ $native = 1 ]; then
    top=$src
    echo "pjdfstest: native run on $src ($(df -PT "$src" | awk 'NR==2 {print $2}'))"
elif [ -n "$cephfuse" ]; then
    echo "pjdfstest: ceph-fuse -c $cephfuse $mnt"
    ceph-fuse -c "$cephfuse" "$mnt" >"$run/ceph-fuse.log" 2>&1 || { echo "pjdfstest: ceph-fuse failed ($run/ceph-fuse.log)" >&2; exit 2; }
    mounted=1
    for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
    mountpoint -q "$mnt" || { echo "pjdfstest: $mnt is not a mount point" >&2; exit 2; }
    top=$mnt
else
    mopts=allow_other${opts:+,$opts}
    echo "pjdfstest: $walkfs (built $(date -u -r "$walkfs" '+%F %T UTC'))"
    from=$src
    if [ -n "$serve" ]; then
        sock=$run/serve.sock
        RUST_LOG=warn "$walkfs" serve "$src" --listen "unix:$sock" --reply-delay-us "$serve" \
            --state-dir "$run/state" 2>"$run/serve.log" &
        server=$!
        echo $server >"$run/server.pid"
        for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
        [ -S "$sock" ] || { echo "pjdfstest: walkfs serve did not start ($run/serve.log)" >&2; exit 2; }
        from=unix:$sock
        echo "pjdfstest: walkfs serve $src --listen $from --reply-delay-us $serve"
    fi
    if [ -n "$ceph" ]; then
        from=ceph:
        mopts=$mopts,ceph_conf=$ceph
    fi
    echo "pjdfstest: walkfs mount $from $mnt -o $mopts"
    if ! "$walkfs" mount "${via9p[@]}" "$from" "$mnt" -o "$mopts"; then
        echo "pjdfstest: walkfs mount failed" >&2
        exit 2
    fi
    mounted=1
    for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
    mountpoint -q "$mnt" || { echo "pjdfstest: $mnt is not a mount point" >&2; exit 2; }
    top=$mnt
fi
work=$top/pjdfstest.$$
mkdir "$work" && chmod 0755 "$work" || { echo "pjdfstest: mkdir $work failed" >&2; exit 2; }
cd "$work" || exit 2

# prove runs every test file through this wrapper: a time limit per file, and
# a copy of its TAP output (target/pjdfstest-run/LABEL.*/tap/FOLDER_NN.t).
wrapper=$run/run-one.sh
cat >"$wrapper" <<'SH'
#!/bin/bash
set -o pipefail
t=$1 rel=${1#"$PJD_TESTS"/}
out=$PJD_TAP/${rel//\//_}
timeout -k 10 "$PJD_FILE_TIMEOUT" /bin/sh "$t" 2>"$out.stderr" | tee "$out"
rc=$?
if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "not ok - timed out after ${PJD_FILE_TIMEOUT}s (scripts/pjdfstest.sh)" | tee -a "$out"
fi
[ -s "$out.stderr" ] || rm -f "$out.stderr"
exit $rc
SH
chmod +x "$wrapper"
export PJD_TESTS=$pjd/tests PJD_TAP=$tap PJD_FILE_TIMEOUT=${PJDFSTEST_FILE_TIMEOUT:-600}
total_timeout=${PJDFSTEST_TIMEOUT:-7200}

echo "pjdfstest: prove -r ${targets[*]#"$pjd"/} (${#expected[@]} files) in $work"
start=$(date +%s)
timeout -k 30 "$total_timeout" prove -r -j "${PJDFSTEST_JOBS:-1}" --exec "$wrapper" "${targets[@]}" &
runner=$!
if [ -n "$restarts" ] && [ -n "$serve" ]; then
    (
        last=0
        for at in ${restarts//,/ }; do
            sleep $((at - last))
            last=$at
            kill -9 "$(cat "$run/server.pid")" 2>/dev/null
            sleep 0.2
            RUST_LOG=warn "$walkfs" serve "$src" --listen "unix:$sock" --reply-delay-us "$serve" \
                --state-dir "$run/state" 2>>"$run/serve.log" &
            echo $! >"$run/server.pid"
            echo "pjdfstest: walkfs serve killed (SIGKILL) and restarted at ${at}s" >&2
        done
    ) &
    restarter=$!
fi
wait $runner
prc=$?
runner=""
elapsed=$(( $(date +%s) - start ))
[ $prc = 124 ] || [ $prc = 137 ] && echo "pjdfstest: the run timed out after ${total_timeout}s" >&2

cd /
lost=0
if [ $mounted = 1 ]; then
    if ! stat "$work" >/dev/null 2>&1 && ! stat "$mnt" >/dev/null 2>&1; then
        echo "pjdfstest: the mount is not connected any more (walkfs died during the run?)" >&2
        lost=1
    fi
    rmdir "$work" 2>/dev/null   # left for inspection if the tests left anything in it
    if [[ ",$opts," == *,transport=uring,* ]]; then
        # Asked for the ring: show that the run's requests took it.
        via=$("$walkfs" stats "$mnt" --json 2>/dev/null | grep -o '"fuse_via_uring":[0-9]*' | cut -d: -f2)
        echo "pjdfstest: requests served over io_uring: ${via:-none}"
        [ "${via:-0}" -gt 0 ] || { echo "pjdfstest: transport=uring, but no request came over io_uring" >&2; lost=1; }
    fi
    cleanup
fi

# --- failed assertions per test file, from the TAP copies
files=0 asserts=0 failed=0 notrun=0
report=$run/summary.txt
: >"$report"
for t in "${expected[@]}"; do
    rel=${t#"$pjd"/tests/}
    out=$tap/${rel//\//_}
    if [ ! -f "$out" ]; then
        notrun=$((notrun + 1))
        printf '  %-22s not run\n' "$rel" >>"$report"
        continue
    fi
    read -r plan ran nok < <(awk '
        /^1\.\.[0-9]+/ { split($0, a, /\.\./); p = a[2] + 0 }
        /^ok( |$)/ { r++ }
        /^not ok( |$)/ { r++; if ($0 !~ /# *TODO/) n++ }
        END { print p + 0, r + 0, n + 0 }' "$out")
    if [ "$plan" = 0 ] && [ "$ran" = 0 ]; then
        plan=1 nok=1   # no TAP at all: the file failed before its plan
    fi
    missing=$(( plan > ran ? plan - ran : 0 ))
    n=$(( nok + missing ))
    files=$((files + 1))
    asserts=$(( asserts + (plan > ran ? plan : ran) ))
    failed=$((failed + n))
    if [ $n -gt 0 ]; then
        printf '  %-22s %4d of %4d failed%s\n' "$rel" "$n" "$(( plan > ran ? plan : ran ))" \
            "$([ $missing -gt 0 ] && echo " ($missing not run)")" >>"$report"
    fi
done
echo
echo "pjdfstest: failed assertions per test file ($label):"
if [ -s "$report" ]; then cat "$report"; else echo "  none"; fi
echo "pjdfstest: TAP output in ${tap#"$repo"/}/"
[ $notrun -gt 0 ] && echo "pjdfstest: $notrun files not run"
echo "pjdfstest: $label, ${elapsed}s"
echo "pjdfstest: $files files, $asserts assertions, $failed failed"
echo "$((asserts - failed)) passed, $failed failed"
if [ $failed = 0 ] && [ $notrun = 0 ] && [ $lost = 0 ] && [ $prc != 124 ] && [ $prc != 137 ]; then
    exit 0
fi
exit 1
