#!/usr/bin/env bash
# The FUSE front end as the kernels of VM guests would drive it.
#
#   bash scripts/fuse-kernels.sh [--kernels 5.15,6.1,6.8] [--no-tests] [--no-pjdfstest] [PJDFSTEST-FOLDER...]
#
# A guest's `walkfs mount` talks to its own kernel: Debian 12 runs 6.1,
# Ubuntu 22.04 5.15, Ubuntu 24.04 6.8, and none of them offers what this
# host's does (passthrough, io_uring, protocol 7.45). This runs the host's
# mounts in the test mode WALKFS_FUSE_AS_KERNEL=K (crates/fusewire,
# abi::KERNELS): every mount answers INIT as kernel K would have asked,
# with only K's flags and in K's minor version of the protocol, and the
# real kernel then holds to what was agreed. For each K:
#
#   1. the FUSE tests: `cargo test --release -p walkfs-fusewire --tests`
#      and `-p walkfs-cli --tests` (every test that mounts) with the
#      variable set;
#   2. pjdfstest (scripts/pjdfstest.sh, all folders unless some are named)
#      through the default local mount, and through cache=coherent over
#      the whole 9P stack (--via-9p).
#
# Prints one line per step and a table (kernel x step: passed or the
# failures), writes target/fuse-kernels/results.jsonl, and exits non-zero
# when anything failed. Logs: target/fuse-kernels/K-STEP.log. pjdfstest
# is skipped with a message when ../shared/tools has no pjdfstest tarball
# (scripts/pjdfstest.sh). Runs as root (FUSE mounts, pjdfstest).
set -uo pipefail
cd "$(dirname "$0")/.."

kernels=5.15,6.1,6.8
tests=1 pjd=1 folders=()
while [ $# -gt 0 ]; do
    case $1 in
    --kernels) kernels=$2 && shift 2 ;;
    --kernels=*) kernels=${1#--kernels=} && shift ;;
    --no-tests) tests=0 && shift ;;
    --no-pjdfstest) pjd=0 && shift ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' && exit 0 ;;
    -*) echo "fuse-kernels: unknown option $1" >&2 && exit 2 ;;
    *) folders+=("$1") && shift ;;
    esac
done
out=target/fuse-kernels
mkdir -p "$out"
: >"$out/results.jsonl"
[ -x target/release/walkfs ] || cargo build --release -p walkfs-cli --quiet
export WALKFS=$PWD/target/release/walkfs

status=0
declare -A cell
# step KERNEL NAME COMMAND...: run it with the mask, record the outcome.
step() {
    local k=$1 name=$2 log="$out/$1-$2.log" t0 rc summary
    shift 2
    t0=$(date +%s)
    WALKFS_FUSE_AS_KERNEL=$k "$@" >"$log" 2>&1
    rc=$?
    case $name in
    pjdfstest*) summary=$(grep -E '^pjdfstest: [0-9]+ files, ' "$log" | tail -n 1 | sed 's/^pjdfstest: //')
        grep -q 'not found, skipped' "$log" && summary="skipped: no pjdfstest tarball" ;;
    *) summary=$(grep -E '^test result:' "$log" | awk '{p += $4; f += $6} END {print p + 0 " passed, " f + 0 " failed"}') ;;
    esac
    [ $rc = 0 ] || status=1
    cell[$k,$name]="$([ $rc = 0 ] && echo ok || echo FAIL): $summary"
    printf '%-5s %-20s %4ss  %s\n' "$k" "$name" "$(($(date +%s) - t0))" "${cell[$k,$name]}"
    printf '{"kernel":"%s","step":"%s","ok":%s,"seconds":%d,"summary":"%s"}\n' "$k" "$name" \
        "$([ $rc = 0 ] && echo true || echo false)" "$(($(date +%s) - t0))" "$summary" >>"$out/results.jsonl"
}

IFS=, read -r -a ks <<<"$kernels"
steps=()
[ $tests = 1 ] && steps+=(fusewire-tests cli-tests)
[ $pjd = 1 ] && steps+=(pjdfstest-loose pjdfstest-coherent-9p)
for k in "${ks[@]}"; do
    if [ $tests = 1 ]; then
        step "$k" fusewire-tests cargo test --release --no-fail-fast -p walkfs-fusewire --tests
        step "$k" cli-tests cargo test --release --no-fail-fast -p walkfs-cli --tests
    fi
    if [ $pjd = 1 ]; then
        step "$k" pjdfstest-loose bash scripts/pjdfstest.sh "${folders[@]}"
        step "$k" pjdfstest-coherent-9p bash scripts/pjdfstest.sh -o cache=coherent --via-9p "${folders[@]}"
    fi
done

echo
printf '%-8s' kernel && printf ' | %-44s' "${steps[@]}" && echo
for k in "${ks[@]}"; do
    printf '%-8s' "$k"
    for s in "${steps[@]}"; do printf ' | %-44s' "${cell[$k,$s]}"; done
    echo
done
exit $status
