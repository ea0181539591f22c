#!/usr/bin/env bash
# Install the walkfs command and its mount(8) helper:
#   PREFIX/bin/walkfs and /sbin/mount.walkfs (a link to it), so that
#   `mount -t walkfs SOURCE DIR -o OPTIONS` and /etc/fstab lines like
#   `/srv/share  /mnt/share  walkfs  cache=loose,negtimeout=-1,allow_other  0 0`
#   work. Usage: bash scripts/install.sh [PREFIX]   (default /usr/local)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
command -v fusermount3 >/dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq fuse3
}
cargo build --release -p walkfs-cli --quiet
install -D -m 0755 target/release/walkfs "$prefix/bin/walkfs"
ln -sf "$prefix/bin/walkfs" /sbin/mount.walkfs
echo "installed $prefix/bin/walkfs and /sbin/mount.walkfs"
