#!/usr/bin/env bash
# Fuzz one target for a fixed time: scripts/fuzz.sh TARGET SECONDS
#   decode   the 9P codec (crates/p9/fuzz)
#   session  the server's message handling over a memfs export
#            (crates/server/fuzz)
# Installs cargo-fuzz if missing. libFuzzer needs unstable compiler flags;
# on a stable toolchain they are allowed with RUSTC_BOOTSTRAP=1 (no
# nightly toolchain is downloaded). New inputs go to a scratch directory;
# the checked-in corpus seeds the run and stays as it is. A crash leaves
# its input under the target's fuzz/artifacts/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh decode|session SECONDS}
secs=${2:-60}
case "$target" in
    decode) dir=crates/p9/fuzz ;;
    session) dir=crates/server/fuzz ;;
    *) echo "unknown fuzz target $target" >&2; exit 2 ;;
esac
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$dir/.."
set +e
RUSTC_BOOTSTRAP=1 cargo fuzz run --release "$target" "$scratch" "fuzz/corpus/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
    >"$scratch.log" 2>&1
status=$?
set -e
grep -E "^(Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)" "$scratch.log" || true
if [ "$status" -ne 0 ]; then
    echo "fuzz target $target failed (exit $status):" >&2
    tail -60 "$scratch.log" >&2
fi
rm -f "$scratch.log"
exit "$status"
