#!/usr/bin/env bash
# Run every walkfs test on a fresh Debian machine: installs what the tests
# need (Debian packages, the Rust toolchain's components), builds, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(gcc)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v make >/dev/null || need_apt+=(make)
# The 9P peers of the interop tests: Debian's diod server and its clients.
[ -x /usr/sbin/diod ] || need_apt+=(diod)
# FUSE mounts (fusermount3), and the workloads run on them.
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v git >/dev/null || need_apt+=(git)
# SQLite writers on both sides of a share (the lock tests): python3's sqlite3.
command -v python3 >/dev/null || need_apt+=(python3)
# A real watcher for the tests of change events on mounts.
command -v inotifywait >/dev/null || need_apt+=(inotify-tools)
# node and npm: fs.watch and chokidar (installed from npm by the test).
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
# The plot test draws text.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== a one-machine Ceph cluster for the CephFS tests (scripts/ceph-up.sh; stopped at the end if started here)"
ceph_dir=${WALKFS_CEPH_DIR:-/var/tmp/walkfs-ceph}
ceph_started=1
if [ -f "$ceph_dir/run/mon.a.pid" ] && kill -0 "$(cat "$ceph_dir/run/mon.a.pid")" 2>/dev/null; then
    ceph_started=0
fi
bash scripts/ceph-up.sh "$ceph_dir"
export WALKFS_CEPH_CONF=$ceph_dir/ceph.conf
stop_ceph() {
    if [ "$ceph_started" = 1 ]; then bash scripts/ceph-up.sh --down "$ceph_dir" >/dev/null || true; fi
}
trap stop_ceph EXIT

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== unit, semantics, differential and concurrency tests"
# Over /dev/fuse (the kernel's enable_uring as it is, off on a stock
# machine); the io_uring test runs in the io_uring step below.
cargo test --workspace --release -- --skip the_wire_served_over_io_uring 2>&1 | tee target/test.log

if [ -x scripts/test-capi.sh ]; then
    echo "== C ABI: build, install, compile a C program against it"
    bash scripts/test-capi.sh
fi

echo "== pjdfstest through walkfs mounts: special files, renames, modes (default options, cache=none, cache=coherent through 9P)"
# Skips with a message when ../shared/tools has no pjdfstest tarball.
bash scripts/pjdfstest.sh mknod mkfifo rename chmod
bash scripts/pjdfstest.sh -o cache=none mknod mkfifo rename chmod
# cache=coherent through the 9P stack: leases, closes that do not wait.
bash scripts/pjdfstest.sh -o cache=coherent --via-9p mknod mkfifo rename chmod

echo "== xfstests through the default mount: a subset of generic/quick that must not regress"
# Builds fstests from ../shared/tools (its Debian build dependencies
# installed); skips with a message when that is absent (under CI: fails).
bash scripts/xfstests.sh

echo "== CephFS through walkfs mount ceph: pjdfstest (no failure ceph-fuse does not also have) and the xfstests subset"
bash scripts/pjdfstest.sh --ceph="$WALKFS_CEPH_CONF" chmod link mkdir rmdir symlink unlink
bash scripts/xfstests.sh --ceph "$WALKFS_CEPH_CONF"
echo "== CephFS: the MDS restarted in the middle of an untar and a git add through walkfs"
bash scripts/ceph-mds-restart.sh "$WALKFS_CEPH_CONF"

echo "== FUSE over io_uring: the FUSE mount tests and a pjdfstest subset, the kernel's enable_uring on for them"
# Off by default in the kernel, so without this the ring is never used by
# a test. Turned on for this step only and put back as it was, whatever
# happens. WALKFS_FUSE_TRANSPORT=uring makes every mount of the step use
# the ring or fail (none quietly falls back to /dev/fuse).
uring_param=/sys/module/fuse/parameters/enable_uring
modprobe fuse 2>/dev/null || true
if [ -w "$uring_param" ]; then
    uring_was=$(cat "$uring_param")
    trap 'echo "$uring_was" > "$uring_param"; stop_ceph' EXIT
    echo Y >"$uring_param"
    (
        export WALKFS_FUSE_TRANSPORT=uring
        cargo test --release -p walkfs-fusewire --test mount 2>&1 | grep -E '^test |test result|panicked' || exit 1
        cargo test --release -p walkfs-cli --test mount --test coherent --test settle \
            --test generations --test confinement 2>&1 | tee target/test-uring.log |
            grep -E 'test result|panicked|FAILED' || exit 1
        bash scripts/pjdfstest.sh -o transport=uring rename chmod
    )
    echo "$uring_was" >"$uring_param"
    trap stop_ceph EXIT
elif [ -n "${CI:-}${WALKFS_REQUIRE_ALL:-}" ]; then
    echo "test.sh: $uring_param is missing or not writable: this kernel has no FUSE over io_uring (6.14+)" >&2
    exit 1
else
    echo "SKIP: FUSE over io_uring: $uring_param is missing or not writable"
fi

if [ "${WALKFS_SKIP_FUZZ:-0}" != 1 ]; then
    echo "== fuzzing, a fixed time each: the 9P codec, the server's sessions"
    bash scripts/fuzz.sh decode "${WALKFS_FUZZ_SECONDS:-30}"
    bash scripts/fuzz.sh session "${WALKFS_FUZZ_SECONDS:-60}"
fi

if [ "${WALKFS_SKIP_LOOM:-0}" != 1 ]; then
    echo "== loom models: the seqlock, the directory locks, the retry driver, the write-back ledger"
    RUSTFLAGS="--cfg loom" cargo test -p walkfs-vfs --lib --release --target-dir target/loom loom 2>&1 | tail -3
fi
