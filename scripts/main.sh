#!/usr/bin/env bash
# The main job on a fresh Debian machine: build walkfs and run the micro
# benchmark (kernel vs walkfs, each optimization on and off) in its quick
# form, then the cache memory benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cc >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq gcc
fi
cargo build --release -p walkfs-cli --quiet
if ./target/release/walkfs bench --help | grep -q micro; then
    ./target/release/walkfs bench micro --quick "$@"
fi
./target/release/walkfs bench memory --entries 1000000
