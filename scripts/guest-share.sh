#!/usr/bin/env bash
# A QEMU guest mounts `walkfs serve` over vsock, and virtiofs of the same directory.
#
#   bash scripts/guest-share.sh [--no-walkfs] [--no-pjdfstest]
#
# Installs qemu-system-x86, debootstrap, e2fsprogs, socat, inotify-tools,
# git, nodejs (apt-get), and with cargo vhost-device-vsock and virtiofsd
# (`cargo install --locked`, niced; virtiofsd needs libseccomp-dev,
# libcap-ng-dev, pkg-config) when missing. Builds once a Debian bookworm
# guest (debootstrap --variant=minbase, Debian's 6.1 kernel, perl, openssl,
# git, inotify-tools, nodejs, socat, fuse3; scripts/guest-lib.sh, shared
# with kernel-9p.sh) into target/guest-share/rootfs.img (reused while it
# exists; delete it to rebuild), and pjdfstest from
# ../shared/tools/pjdfstest-*.tar.gz (skipped, with a message, when absent).
#
# Then one boot (QEMU TCG, 2 vCPUs, 2 GiB of shared memfd memory, no
# network) with two shares of one host directory, target/guest-share/export
# (made afresh):
#   walkfs  `walkfs serve EXPORT --listen unix:run/vm.vsock_5640` on the host;
#           vhost-device-vsock (guest CID 3, uds-path run/vm.vsock) behind
#           QEMU's vhost-user-vsock-pci; the guest runs `walkfs mount
#           vsock:2:5640 /mnt/w -o cache=coherent,allow_other` (the host's
#           binary, RUST_LOG=debug, its log kept; allow_other because
#           pjdfstest acts as other users too, as in scripts/pjdfstest.sh).
#   virtiofs  virtiofsd --shared-dir EXPORT --cache auto behind
#           vhost-user-fs-pci (tag share); `mount -t virtiofs share /mnt/v`.
# A socat echo on run/vm.vsock_5641 proves the vsock path first (`socat -
# VSOCK-CONNECT:2:5641` in the guest). On each mount the guest
# (scripts/guest-share/guest.sh, on a payload disk; its init is
# scripts/kernel-9p/init.sh) runs: git init/add/commit/status/mv/rm/fsck on
# a tree it makes (repo-w, repo-v; the host then reads the repository with
# git log, fsck and status); watchers of host edits: `inotifywait -m -r`
# on watch-TAG, node's fs.watch (scripts/guest-share/watch.js) on watch-TAG
# and watch-TAG/sub, and git's fsmonitor hook (`walkfs fsmonitor`) on
# repo-TAG. It creates ctl/TAG/ready; the host sees it, runs the same
# inotifywait and watch.js on the export, makes a fixed list of edits
# (create, append, mkdir, create inside it, rename, chmod, create in sub,
# delete, delete + rmdir; in repo-TAG an append and a new file), one every
# GUESTSHARE_EDIT_GAP s, then creates ctl/TAG/done; the guest sees it by
# polling stat, waits 3 s, stops its watchers and prints their events,
# then `git status` with the hook and without. Finally pjdfstest's folders
# (prove -rv as root from a fresh directory) on the walkfs mount (and on
# virtiofs with GUESTSHARE_PJD_VIRTIOFS=1).
#
# Prints a table (transport, mount, host events, guest events, equal?,
# pjdfstest, git, fsmonitor, node fs.watch), the event lists side by side
# (inotify events compared: CREATE DELETE MODIFY ATTRIB MOVED_FROM MOVED_TO,
# with ISDIR and the path relative to watch-TAG, the events walkfs says it
# replays; CLOSE_WRITE DELETE_SELF MOVE_SELF are shown and counted but not
# compared; OPEN ACCESS CLOSE_NOWRITE IGNORED are left out: see
# scripts/guest-share/report.pl), and pjdfstest's counts; writes
# target/guest-share/report.md. Exits non-zero when the
# walkfs side fails: no mount, the vsock probe, git, an event list or the
# fsmonitor answer differing from the host's, a pjdfstest failure (more
# than GUESTSHARE_PJD_ALLOWED, default 0), or the boot not finishing.
# virtiofs showing no events is the expected, recorded result. With
# --no-walkfs (for a walkfs without vsock) only the probe and virtiofs run.
# Consoles and logs stay in target/guest-share/: console.log, serve.log,
# virtiofsd.log, vhost-device-vsock.log, host/ (the host's event lists),
# results/ (the guest's results disk: walkfs-mount.log, prove outputs,
# event lists, dmesg).
#
# Environment: WALKFS (the walkfs binary; default target/release/walkfs,
# built if missing), GUESTSHARE_TIMEOUT (seconds for the boot, default
# 7200), GUESTSHARE_PJD_FOLDERS (comma-separated; default open, mkdir,
# rmdir, unlink, symlink, link, chmod, chown, truncate, rename; "none"
# skips; rename last, the longest), GUESTSHARE_PJD_BUDGET (seconds: no
# folder is started after that long on one mount, the rest are reported as
# not run; default 0 = no limit), GUESTSHARE_PJD_VIRTIOFS (1: pjdfstest on virtiofs too; default
# 0), GUESTSHARE_PJD_ALLOWED (default 0), GUESTSHARE_RUST_LOG (the guest
# mount's RUST_LOG, default debug), GUESTSHARE_EDIT_GAP (seconds between
# host edits, default 1), GUESTSHARE_PORT (default 5640), GUESTSHARE_MIRROR
# (Debian mirror URI; default: the host's apt sources).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
here=$repo/scripts/guest-share
work=$repo/target/guest-share
# shellcheck source=scripts/guest-lib.sh
. "$repo/scripts/guest-lib.sh"

usage() {
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}
use_walkfs=1
use_pjd=1
while [ $# -gt 0 ]; do
    case $1 in
    --no-walkfs) use_walkfs=0 && shift ;;
    --no-pjdfstest) use_pjd=0 && shift ;;
    -h | --help) usage 0 ;;
    *) usage ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "guest-share: run as root (debootstrap, mke2fs -d with owners)" >&2; exit 2; }
timeout_s=${GUESTSHARE_TIMEOUT:-7200}
pjd_folders=${GUESTSHARE_PJD_FOLDERS:-open,mkdir,rmdir,unlink,symlink,link,chmod,chown,truncate,rename}
pjd_budget=${GUESTSHARE_PJD_BUDGET:-0}
pjd_virtiofs=${GUESTSHARE_PJD_VIRTIOFS:-0}
pjd_allowed=${GUESTSHARE_PJD_ALLOWED:-0}
rust_log=${GUESTSHARE_RUST_LOG:-debug}
edit_gap=${GUESTSHARE_EDIT_GAP:-1}
port=${GUESTSHARE_PORT:-5640}
probe_port=$((port + 1))
[ "$use_pjd" = 1 ] || pjd_folders=none
t_start=$(date +%s)
mkdir -p "$work"

# ------------------------------------------------------------------ packages
mapfile -t need < <(guest_image_tools)
command -v socat >/dev/null || need+=(socat)
command -v inotifywait >/dev/null || need+=(inotify-tools)
command -v git >/dev/null || need+=(git)
command -v node >/dev/null || need+=(nodejs)
pjd_tar=
if [ "$pjd_folders" != none ]; then
    guest_pjd_tar guest-share "the other tests only"
    [ -z "$pjd_tar" ] || mapfile -t -O ${#need[@]} need < <(guest_pjd_tools)
fi
# vhost-device-vsock and virtiofsd come from crates.io.
export PATH=$PATH:${CARGO_HOME:-$HOME/.cargo}/bin
if ! command -v virtiofsd >/dev/null; then
    for p in libseccomp-dev libcap-ng-dev pkg-config; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
fi
guest_apt_install "${need[@]}"
for tool in vhost-device-vsock virtiofsd; do
    command -v "$tool" >/dev/null && continue
    command -v cargo >/dev/null || { echo "guest-share: $tool missing and no cargo to install it with" >&2; exit 2; }
    echo "== cargo install --locked $tool (log: $work/cargo-install-$tool.log)"
    nice -n 19 cargo install --locked "$tool" >"$work/cargo-install-$tool.log" 2>&1 || {
        tail -n 30 "$work/cargo-install-$tool.log" >&2
        exit 1
    }
done

# -------------------------------------------------------------------- walkfs
guest_walkfs "$work"
if [ "$use_walkfs" = 1 ] && ! { "$work/walkfs" mount --help 2>&1; "$work/walkfs" --help 2>&1; } | grep -qi vsock; then
    echo "guest-share: $walkfs knows no vsock (walkfs mount --help); --no-walkfs runs the probe and virtiofs only" >&2
    exit 2
fi

# --------------------------------------------------------------- guest image
img=$work/rootfs.img
guest_pkgs=linux-image-amd64,initramfs-tools,perl,openssl,kmod,util-linux,mount,procps,e2fsprogs,git,inotify-tools,nodejs,socat,fuse3
guest_build_image guest-share "$work" "$guest_pkgs" "$repo/scripts/kernel-9p/init.sh" GUESTSHARE_MIRROR /mnt/w /mnt/v /results
guest_refresh_init "$img" "$repo/scripts/kernel-9p/init.sh"

# ------------------------------------------------ pjdfstest and payload disk
# The payload disk (/dev/vdc in the guest): guest.sh, watch.js,
# pjd-summary.pl, the walkfs binary (the host is bookworm too: glibc as the
# guest's) and pjdfstest. /dev/vdb is the results disk, an empty ext4.
payload=$work/payload
rm -rf "$payload" && mkdir -p "$payload"
cp "$here/guest.sh" "$here/watch.js" "$here/pjd-summary.pl" "$payload/"
[ "$use_walkfs" = 0 ] || cp "$work/walkfs" "$payload/walkfs"
[ -z "$pjd_tar" ] || guest_pjdfstest "$pjd_tar" "$work/pjdfstest-build" "$payload/pjdfstest"
guest_payload_tar "$payload" "$work/payload.tar"
rm -f "$work/results.img"
truncate -s 4G "$work/results.img"
mke2fs -q -t ext4 -L results "$work/results.img"

# ------------------------------------------------------------------- the run
run=$work/run
export_dir=$work/export
hostout=$work/host
results=$work/results
rm -rf "$run" "$export_dir" "$hostout" "$results" "$work/state"
mkdir -p "$run" "$hostout" "$results"
for tag in w v; do
    mkdir -p "$export_dir/watch-$tag/sub" "$export_dir/ctl/$tag"
    printf 'kept\n' >"$export_dir/watch-$tag/sub/kept.txt"
done
rm -f "$work"/*.log.old
for f in console serve virtiofsd vhost-device-vsock socat; do
    [ -f "$work/$f.log" ] && mv "$work/$f.log" "$work/$f.log.old"
done
: >"$work/console.log"

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
wait_for() { # WHAT PID TEST...: up to 15 s for TEST to hold while PID lives
    local what=$1 pid=$2
    shift 2
    for _ in $(seq 1 150); do
        "$@" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "guest-share: $what did not start:" >&2
    tail -n 20 "$work/$what.log" >&2
    exit 1
}

# virtiofsd as a VM manager runs it: one socket, the shared directory,
# cache=auto, and otherwise its defaults (announce-submounts, the
# namespace sandbox where the kernel allows it, else chroot). No --tag:
# QEMU 7.1-8.0 crash on the config feature it turns on.
vfs_sandbox=namespace
if ! unshare --mount --pid --net --fork true 2>/dev/null; then vfs_sandbox=chroot; fi
virtiofsd --socket-path="$run/vfs.sock" --shared-dir="$export_dir" --cache=auto \
    --sandbox="$vfs_sandbox" >"$work/virtiofsd.log" 2>&1 &
pids+=($!)
wait_for virtiofsd "${pids[-1]}" test -S "$run/vfs.sock"

vhost-device-vsock --vm "guest-cid=3,socket=$run/vhost-vsock.sock,uds-path=$run/vm.vsock" \
    >"$work/vhost-device-vsock.log" 2>&1 &
pids+=($!)
wait_for vhost-device-vsock "${pids[-1]}" test -S "$run/vhost-vsock.sock"

# The probe: a guest connecting to (CID 2, port P) reaches run/vm.vsock_P.
# shellcheck disable=SC2016 # the shell socat starts expands $l
socat "UNIX-LISTEN:$run/vm.vsock_$probe_port,fork" SYSTEM:'read l; echo "pong $l"' >"$work/socat.log" 2>&1 &
pids+=($!)
wait_for socat "${pids[-1]}" test -S "$run/vm.vsock_$probe_port"

if [ "$use_walkfs" = 1 ]; then
    NO_COLOR=1 RUST_LOG=info "$work/walkfs" serve "$export_dir" --listen "unix:$run/vm.vsock_$port" \
        --state-dir "$work/state" >"$work/serve.log" 2>&1 &
    pids+=($!)
    wait_for serve "${pids[-1]}" test -S "$run/vm.vsock_$port"
fi

# The host's side of the watch step, for TAG (w: walkfs, v: virtiofs): on
# ctl/TAG/ready, watch the export as the guest does, make the edits, then
# ctl/TAG/done.
host_edits() { # TAG
    local tag=$1 W=$export_dir/watch-$1 C=$export_dir/ctl/$1 R=$export_dir/repo-$1 ip np
    local out=$hostout/$tag
    inotifywait -m -r --format '%e %w%f' "$W" >"$out-inotify.raw" 2>"$out-inotifywait.err" &
    ip=$!
    node "$here/watch.js" "$W" "$W/sub" >"$out-node.txt" 2>"$out-node.err" &
    np=$!
    for _ in $(seq 1 100); do
        grep -q 'Watches established' "$out-inotifywait.err" && grep -q ready "$out-node.err" && break
        sleep 0.1
    done
    edit() { # DESCRIPTION COMMAND...
        echo "$(date +%T.%N | cut -c1-12) $1" >>"$out-edits.txt"
        "${@:2}"
        sleep "$edit_gap"
    }
    edit "create new.txt" sh -c "echo one >'$W/new.txt'"
    edit "append to new.txt" sh -c "echo two >>'$W/new.txt'"
    edit "mkdir newdir" mkdir "$W/newdir"
    edit "create newdir/inner.txt" sh -c "echo inner >'$W/newdir/inner.txt'"
    edit "rename new.txt renamed.txt" mv "$W/new.txt" "$W/renamed.txt"
    edit "chmod 600 renamed.txt" chmod 600 "$W/renamed.txt"
    edit "create sub/subfile.txt" sh -c "echo sub >'$W/sub/subfile.txt'"
    edit "delete renamed.txt" rm "$W/renamed.txt"
    edit "delete newdir/inner.txt, rmdir newdir" sh -c "rm '$W/newdir/inner.txt' && rmdir '$W/newdir'"
    if [ -d "$R" ]; then
        edit "repo-$tag: append to README.md" sh -c "echo 'host edit' >>'$R/README.md'"
        edit "repo-$tag: create from-host.txt" sh -c "echo 'from the host' >'$R/from-host.txt'"
    fi
    sleep 1
    kill "$ip" "$np" 2>/dev/null || true
    wait "$ip" "$np" 2>/dev/null || true
    sed "s|$W/||; s|$W\$|.|" "$out-inotify.raw" >"$out-inotify.txt"
    : >"$C/done"
}
host_driver() { # until the guest is gone: each round when its ready appears
    local tag
    for tag in w v; do
        [ "$tag" = w ] && [ "$use_walkfs" = 0 ] && continue
        until [ -e "$export_dir/ctl/$tag/ready" ]; do sleep 0.2; done
        echo "== host: ctl/$tag/ready seen; editing watch-$tag"
        host_edits "$tag"
        echo "== host: ctl/$tag/done"
    done
}
host_driver &
driver_pid=$!
pids+=("$driver_pid")

t0=$(date +%s)
echo "== booting the guest (TCG, limit ${timeout_s}s): walkfs serve $([ "$use_walkfs" = 1 ] && echo "on vm.vsock_$port" || echo "not run"), virtiofsd (sandbox $vfs_sandbox), vhost-device-vsock (CID 3)"
set +e
timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
    -accel tcg -m 2G -smp 2 -nographic -no-reboot \
    -object memory-backend-memfd,id=mem,size=2G,share=on -numa node,memdev=mem \
    -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 init=/walkfs-test.sh panic=-1 walkfs.walkfs=$use_walkfs walkfs.port=$port walkfs.probe=$probe_port walkfs.pjd=$pjd_folders walkfs.pjdv=$pjd_virtiofs walkfs.pjdbudget=$pjd_budget walkfs.rustlog=$rust_log" \
    -drive "file=$img,format=raw,if=virtio,snapshot=on" \
    -drive "file=$work/results.img,format=raw,if=virtio" \
    -drive "file=$work/payload.tar,format=raw,if=virtio,readonly=on" \
    -chardev "socket,id=vv,path=$run/vhost-vsock.sock" -device vhost-user-vsock-pci,chardev=vv \
    -chardev "socket,id=vfs,path=$run/vfs.sock" -device vhost-user-fs-pci,chardev=vfs,tag=share \
    -nic none </dev/null 2>&1 | sed -u 's/\r$//' | tee "$work/console.log" |
    grep --line-buffered -a -E '^@@WALKFS-(BEGIN|MODULES|PROBE|MOUNT|STEP|RESULT|SKIP|FATAL|DETAIL|PJD|FSMONITOR|EVENTS-END|END)|Kernel panic|qemu-system'
boot_rc=${PIPESTATUS[0]}
set -e
secs=$(($(date +%s) - t0))
echo "== guest done in $secs s (qemu exit $boot_rc$([ "$boot_rc" = 124 ] && echo ': TIMED OUT'))"
kill "$driver_pid" 2>/dev/null || true
cleanup
pids=()

# The guest's results disk.
debugfs -R "rdump / $results" "$work/results.img" >/dev/null 2>&1 || true

# The host's view of the repositories the guest made.
for tag in w v; do
    r=$export_dir/repo-$tag
    [ -d "$r/.git" ] || continue
    {
        echo "log=$(git -C "$r" log --format=%s 2>&1 | tr '\n' '|')"
        echo "fsck=$(git -C "$r" fsck --no-progress >/dev/null 2>&1 && echo ok || echo fail)"
        echo "status=$(git -C "$r" -c core.fsmonitor=false status --porcelain 2>&1 | tr '\n' '|')"
    } >"$hostout/git-$tag.txt"
done

set +e
perl "$here/report.pl" --console "$work/console.log" --host "$hostout" --walkfs "$walkfs_ver" \
    --use-walkfs "$use_walkfs" --pjd-allowed "$pjd_allowed" --secs "$secs" --qemu-rc "$boot_rc" \
    --out "$work/report.md"
status=$?
set -e
if [ $status != 0 ] && [ "$use_walkfs" = 1 ]; then
    for f in "$results/walkfs-mount.log" "$work/serve.log"; do
        [ -s "$f" ] || continue
        echo "== $(basename "$f") (last 40 lines of $f)"
        tail -n 40 "$f"
    done
fi
echo "== report: $work/report.md; console: $work/console.log; guest logs: $results/; total $(($(date +%s) - t_start)) s"
exit $status
