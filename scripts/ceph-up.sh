#!/usr/bin/env bash
# A one-machine Ceph cluster for walkfs's CephFS tests (issue 50): one
# monitor, one OSD (memstore: its objects live in the OSD's memory), one
# MDS, loopback only, no authentication, one replica. Written from Ceph's
# manual-deployment steps.
#
#   bash scripts/ceph-up.sh [DIR]     bring it up (default DIR:
#                                     /var/tmp/walkfs-ceph), print the
#                                     conf path, exit 0 when the file
#                                     system's MDS is active
#   bash scripts/ceph-up.sh --down [DIR]
#                                     stop every daemon by its pid file
#
# Installs its Debian packages with apt-get when they are missing. Every
# file of the cluster (conf, keyring, data, logs, pid files, admin
# sockets) is under DIR; a second `up` on a running cluster says so and
# exits 0. Clients use `-c DIR/ceph.conf` (libcephfs: `ceph_conf_read_file`).
set -euo pipefail

down=0
if [ "${1:-}" = "--down" ]; then
    down=1
    shift
fi
D=${1:-/var/tmp/walkfs-ceph}
conf=$D/ceph.conf

stop_all() {
    # Clients first would be the caller's job; daemons in reverse order.
    for name in mds.a osd.0 mgr.x mon.a; do
        pidf=$D/run/$name.pid
        [ -f "$pidf" ] || continue
        pid=$(cat "$pidf")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$pidf"
    done
}

if [ "$down" = 1 ]; then
    stop_all
    echo "ceph-up: stopped the cluster in $D"
    exit 0
fi

if [ -f "$conf" ] && [ -f "$D/run/mon.a.pid" ] && kill -0 "$(cat "$D/run/mon.a.pid")" 2>/dev/null \
    && ceph -c "$conf" mds stat 2>/dev/null | grep -q "up:active"; then
    echo "ceph-up: already running: $conf"
    exit 0
fi

need=()
for p in ceph-mon ceph-osd ceph-mds ceph-mgr ceph-common libcephfs2 libcephfs-dev ceph-fuse uuid-runtime; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "ceph-up: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

start=$(date +%s)
stop_all
rm -rf "$D"
mkdir -p "$D"/{run,log,crash,mon.a,osd.0,mds.a,mgr.x}
fsid=$(uuidgen)
# Ports of our own, so that a cluster already on this machine is left be.
p2=${CEPH_UP_PORT:-46300}
p1=$((p2 + 1))

cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
mon data avail warn = 2
mon data avail crit = 1
run dir = $D/run
pid file = $D/run/\$name.pid
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
mon cluster log file = $D/log/cluster.log
crash dir = $D/crash
keyring = $D/keyring
mon data = $D/mon.\$id
osd data = $D/osd.\$id
mds data = $D/mds.\$id
mgr data = $D/mgr.\$id
[osd]
osd objectstore = memstore
memstore device bytes = 2147483648
osd crush initial weight = 1
[mds]
mds cache memory limit = 268435456
[client]
# No pid file: clients come and go (ceph-fuse would find the last one's
# still locked while it exits).
pid file =
log file = $D/log/\$name.\$pid.log
admin socket = $D/run/\$name.\$pid.asok
client mount timeout = 30
EOF

# The monitor's mkfs wants a mon. key even with authentication off.
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$D/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *'
monmaptool -c "$conf" --create --clobber --fsid "$fsid" \
    --addv a "[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]" "$D/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring"
ceph-mon -c "$conf" -i a 2>>"$D/log/start.log"

ceph() { command ceph -c "$conf" --connect-timeout 20 "$@"; }
wait_for() { # what, command...
    local what=$1
    shift
    for _ in $(seq 120); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "ceph-up: $what did not come up; logs in $D/log" >&2
    exit 1
}
wait_for "the monitor" ceph mon stat

uuid=$(uuidgen)
id=$(ceph osd new "$uuid")
ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >/dev/null 2>&1
ceph-osd -c "$conf" -i "$id" 2>>"$D/log/start.log"
wait_for "the OSD" sh -c "ceph -c '$conf' osd stat | grep -q '1 up'"

ceph osd pool create cephfs_metadata 8 >/dev/null 2>&1
ceph osd pool create cephfs_data 8 >/dev/null 2>&1
for p in cephfs_metadata cephfs_data; do
    ceph osd pool set "$p" size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
done
ceph fs new cephfs cephfs_metadata cephfs_data >/dev/null 2>&1
ceph-mds -c "$conf" -i a >>"$D/log/start.log" 2>&1
wait_for "the MDS" sh -c "ceph -c '$conf' mds stat | grep -q 'up:active'"
# A manager: the pools' usage reaches the monitors (and so statfs, df and
# every client's free-space check) only through it.
ceph-mgr -c "$conf" -i x >>"$D/log/start.log" 2>&1
wait_for "the manager" sh -c "ceph -c '$conf' mgr stat | grep -q '\"available\": true'"

rss=0
for name in mon.a osd.0 mds.a mgr.x; do
    pid=$(cat "$D/run/$name.pid")
    kb=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    rss=$((rss + kb))
done
echo "ceph-up: cluster up in $(( $(date +%s) - start )) s, daemons' memory $((rss / 1024)) MiB resident: $conf"
