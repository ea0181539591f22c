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

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== unit, semantics, differential and concurrency tests"
cargo test --workspace --release 2>&1 | tee target/test.log

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

if [ "${WALKFS_SKIP_FUZZ:-0}" != 1 ]; then
    echo "== fuzzing, a fixed time each: the 9P codec, the server's sessions"
    bash scripts/fuzz.sh decode "${WALKFS_FUZZ_SECONDS:-45}"
    bash scripts/fuzz.sh session "${WALKFS_FUZZ_SECONDS:-90}"
fi

if [ "${WALKFS_SKIP_LOOM:-0}" != 1 ]; then
    echo "== loom models: the seqlock, the directory locks, the retry driver, the write-back ledger"
    RUSTFLAGS="--cfg loom" cargo test -p walkfs-vfs --lib --release --target-dir target/loom loom 2>&1 | tail -3
fi
