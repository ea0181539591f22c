#!/usr/bin/env bash
# The main job on a fresh Debian machine: build walkfs and run the micro
# benchmark (kernel vs walkfs, each optimization on and off) in its quick
# form, then the cache memory benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
command -v cc >/dev/null || need_apt+=(gcc)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi
cargo build --release -p walkfs-cli --quiet
if ./target/release/walkfs bench --help | grep -q micro; then
    ./target/release/walkfs bench micro --quick --plot target/micro.png "$@"
fi
./target/release/walkfs bench memory --entries 1000000
