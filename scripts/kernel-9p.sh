#!/usr/bin/env bash
# Linux's own 9p client against `walkfs serve`, in a QEMU guest.
#
#   bash scripts/kernel-9p.sh [--cache none|loose|both] [--pjdfstest] [--restart]
#
# Installs qemu-system-x86, debootstrap, e2fsprogs (apt-get); builds once a
# Debian bookworm guest (debootstrap --variant=minbase, Debian's 6.1 kernel,
# gcc, make, perl, openssl) into target/kernel-9p/rootfs.img (reused while
# it exists; delete it to rebuild); then, for each cache mode, starts
# `walkfs serve target/kernel-9p/export-MODE --listen unix:SOCK` and boots
# the guest under QEMU (TCG, no network). The guest reaches the server
# through a virtio-serial port (chardev = SOCK), mounts it with
# `mount -t 9p -o trans=fd,...,version=9p2000.L,cache=MODE` (a relay turns
# the port into the socket trans=fd needs: scripts/kernel-9p/relay.pl),
# formats a second disk as ext4, and runs the same tests on both: ls,
# stat, readlink, create, write, rename, unlink, link, symlink, chmod,
# truncate, utimes, a gcc-built program run from the mount, make and a
# rebuild; with --pjdfstest also pjdfstest's open mkdir rmdir unlink rename
# symlink link chmod truncate mknod mkfifo folders (`prove -rv`, as root,
# from a fresh directory), when ../shared/tools/pjdfstest-*.tar.gz exists.
#
# With --restart, instead of those tests (and without ext4): do the inode
# numbers of files Linux's 9p client made survive restarts of the server?
# Per cache mode, four boots against one export (export-restart-MODE) and
# one state directory (`walkfs serve --state-dir
# target/kernel-9p/state-MODE`). Boot 1 makes a tree (6 directories, some
# 50 files, a hard link, a symlink, a file and a directory renamed, a file
# deleted and others created right after it until the host's ext4 gives
# one of them the freed number, or 32 of them) and prints `stat -c '%n %i
# %h %s %Y'` of every path in it (find | sort) and the md5sum of every
# file; between boots the host stops the server and starts
# it again on the same export, socket and state directory, by SIGKILL,
# SIGTERM, SIGKILL (three restarts); boots 2-4 only mount and print the
# same. Each boot's listing and sums must equal boot 1's (diff), and boot
# 1's listing must match the host's `stat` of the export: the same links,
# size and mtime, and the host's inode number plus one offset for every
# path (Linux's v9fs shows a qid path + 2: fs/9p qid2ino; 0 and 2 are
# accepted, the offset is printed). Consoles in
# target/kernel-9p/console-restart-MODE-N.log, server logs in
# serve-restart-MODE-N.log, listings and diffs in restart-MODE/.
#
# Prints a table (fs x mode x test), writes target/kernel-9p/results.jsonl,
# and exits non-zero when a 9p result differs from ext4's in the same mode
# (or a boot did not finish); with --restart prints a line per boot and
# one for the host's view, and exits non-zero on any difference. The
# serial console of each boot is kept in target/kernel-9p/console-MODE.log,
# walkfs serve's log (RUST_LOG=warn) in target/kernel-9p/serve-MODE.log.
#
# Environment: WALKFS (the walkfs binary; default target/release/walkfs,
# built if missing), KERNEL9P_TIMEOUT (seconds per boot, default 5400),
# KERNEL9P_PJD_FOLDERS (comma-separated pjdfstest folders; default all
# eleven above),
# KERNEL9P_MIRROR (Debian mirror URI; default: the host's apt sources).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
here=$repo/scripts/kernel-9p
work=$repo/target/kernel-9p
# shellcheck source=scripts/guest-lib.sh
. "$repo/scripts/guest-lib.sh"

usage() {
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}
modes=(none loose)
pjd=0
restart=0
pjd_folders=${KERNEL9P_PJD_FOLDERS:-all}
while [ $# -gt 0 ]; do
    case $1 in
    --cache)
        [ $# -ge 2 ] || usage
        case $2 in
        none | loose) modes=("$2") ;;
        both) modes=(none loose) ;;
        *) usage ;;
        esac
        shift 2
        ;;
    --cache=*)
        case ${1#--cache=} in
        none | loose) modes=("${1#--cache=}") ;;
        both) modes=(none loose) ;;
        *) usage ;;
        esac
        shift
        ;;
    --pjdfstest) pjd=1 && shift ;;
    --restart) restart=1 && shift ;;
    -h | --help) usage 0 ;;
    *) usage ;;
    esac
done
if [ "$restart" = 1 ] && [ "$pjd" = 1 ]; then
    echo "kernel-9p: --restart runs no pjdfstest; give one or the other" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || { echo "kernel-9p: run as root (debootstrap, mke2fs -d with owners)" >&2; exit 2; }
timeout_s=${KERNEL9P_TIMEOUT:-5400}
t_start=$(date +%s)
mkdir -p "$work"

# ------------------------------------------------------------------ packages
mapfile -t need < <(guest_image_tools)
pjd_tar=
if [ "$pjd" = 1 ]; then
    guest_pjd_tar kernel-9p "basic tests only"
    [ -z "$pjd_tar" ] || mapfile -t -O ${#need[@]} need < <(guest_pjd_tools)
fi
guest_apt_install "${need[@]}"

# -------------------------------------------------------------------- walkfs
guest_walkfs "$work"

# --------------------------------------------------------------- guest image
img=$work/rootfs.img
guest_pkgs=linux-image-amd64,initramfs-tools,perl,gcc,make,libc6-dev,openssl,kmod,util-linux,mount,procps,e2fsprogs
guest_build_image kernel-9p "$work" "$guest_pkgs" "$here/init.sh" KERNEL9P_MIRROR /mnt/9p /mnt/ext4
# The image's /walkfs-test.sh is the bootstrap in scripts/kernel-9p/init.sh;
# refresh it in place if that file changed.
guest_refresh_init "$img" "$here/init.sh"

# ------------------------------------------------ pjdfstest and payload disk
# The payload disk (/dev/vdc in the guest) is a plain tar: the guest side
# of this script and, with --pjdfstest, pjdfstest built here.
payload=$work/payload
rm -rf "$payload" && mkdir -p "$payload"
cp "$here/guest.sh" "$here/relay.pl" "$payload/"
[ -z "$pjd_tar" ] || guest_pjdfstest "$pjd_tar" "$work/pjdfstest-build" "$payload/pjdfstest"
guest_payload_tar "$payload" "$work/payload.tar"

# ------------------------------------------------------------------- the runs
serve_pid=
cleanup() {
    if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

# boot_guest CONSOLE-LOG SOCK KERNEL-ARGS: one boot of the guest, its port
# walkfs9p connected to the server on SOCK; boot_rc = qemu's exit status
# (124: timed out).
boot_guest() {
    local log=$1 sock=$2 args=$3
    set +e
    timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
        -accel tcg -m 2048 -smp 2 -nographic -no-reboot \
        -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 init=/walkfs-test.sh panic=-1 $args" \
        -drive "file=$img,format=raw,if=virtio,snapshot=on" \
        -drive "file=$work/scratch.img,format=raw,if=virtio" \
        -drive "file=$work/payload.tar,format=raw,if=virtio,readonly=on" \
        -device virtio-serial -chardev "socket,path=$sock,id=p9" \
        -device virtserialport,chardev=p9,name=walkfs9p \
        -nic none </dev/null 2>&1 | sed -u 's/\r$//' | tee "$log" |
        grep --line-buffered -a -E '^@@WALKFS-(BEGIN|MOUNT|CLOCK|STEP|SKIP|FATAL|PJD|END|REUSE|LS-BEGIN|LS-END)|Kernel panic'
    boot_rc=${PIPESTATUS[0]}
    set -e
}

run_mode() { # MODE
    local mode=$1 export=$work/export-$1 sock=$work/walkfs-$1.sock
    local log=$work/console-$1.log slog=$work/serve-$1.log rc t0
    rm -rf "$export" "$sock" && mkdir -p "$export"
    : >"$log"
    # --trust-client-permissions: the guest mounts with access=client (the
    # 9p2000.L default), so its kernel checks permissions with the
    # caller's supplementary groups, which 9P2000.L never carries.
    RUST_LOG=warn "$work/walkfs" serve "$export" --listen "unix:$sock" --trust-client-permissions >"$slog" 2>&1 &
    serve_pid=$!
    for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
    if [ ! -S "$sock" ]; then
        echo "kernel-9p: walkfs serve did not listen on $sock:" >&2
        cat "$slog" >&2
        return 1
    fi
    rm -f "$work/scratch.img" && truncate -s 4G "$work/scratch.img"
    echo "== cache=$mode: walkfs serve $export --listen unix:$sock (pid $serve_pid); booting the guest (TCG, limit ${timeout_s}s)"
    t0=$(date +%s)
    boot_guest "$log" "$sock" "walkfs.cache=$mode walkfs.pjdfstest=$pjd walkfs.pjdfolders=$pjd_folders"
    rc=$boot_rc
    echo "== cache=$mode: guest done in $(($(date +%s) - t0)) s (qemu exit $rc$([ "$rc" = 124 ] && echo ': TIMED OUT'))"
    echo "$mode $(($(date +%s) - t0)) $rc" >>"$work/boots"
    kill "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
    serve_pid=
    rm -f "$work/scratch.img" "$sock"
}

# ------------------------------------------------------ --restart: the runs
# One server of the restart check: walkfs serve on EXPORT, SOCK and the
# state directory STATE; back once it says it is serving. The socket of a
# killed server is left in place: the new one has to take it over.
start_serve() { # EXPORT SOCK STATE LOG
    local export=$1 sock=$2 state=$3 slog=$4
    NO_COLOR=1 RUST_LOG=info "$work/walkfs" serve "$export" --listen "unix:$sock" --trust-client-permissions \
        --state-dir "$state" >"$slog" 2>&1 &
    serve_pid=$!
    for _ in $(seq 1 150); do
        grep -q "serving .* on unix:$sock" "$slog" && return 0
        kill -0 "$serve_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "kernel-9p: walkfs serve did not start on $sock:" >&2
    cat "$slog" >&2
    return 1
}
# Stop the server with SIGNAL; stop_rc = its wait status (128 + signal when
# the signal ended it), stop_how = what happened.
stop_serve() { # SIGNAL
    if kill -0 "$serve_pid" 2>/dev/null; then
        kill -s "$1" "$serve_pid"
        stop_how="SIG$1"
    else
        stop_how="none: it had exited by itself"
    fi
    stop_rc=0
    wait "$serve_pid" 2>/dev/null || stop_rc=$?
    serve_pid=
}

restart_fail() { # MESSAGE
    echo "FAIL: $*" | tee -a "$out/summary"
    restart_bad=$((restart_bad + 1))
}
restart_note() { # MESSAGE
    echo "$*" | tee -a "$out/summary"
}

# The listing's lines (name ino links size mtime) against the host's stat
# of the same paths: the same links, size and mtime, and one offset from
# the host's inode number to the guest's for every path (0 or 2).
compare_host() { # GUEST-LISTING HOST-LISTING
    perl -e '
        my ($gf, $hf) = @ARGV;
        my (%g, %h, @bad, %off);
        for my $p ([$gf, \%g], [$hf, \%h]) {
            open my $f, "<", $p->[0] or die "$p->[0]: $!\n";
            while (my $l = <$f>) { chomp $l; my @x = split / /, $l; $p->[1]{ $x[0] } = \@x }
        }
        @bad = ("no paths in the guest listing") unless %g;
        for my $n (sort keys %g) {
            my $H = $h{$n} or do { push @bad, "$n: in the guest listing only"; next };
            my $G = $g{$n};
            push @bad, "$n: links size mtime: guest @$G[2..4], host @$H[2..4]" if "@$G[2..4]" ne "@$H[2..4]";
            push @{ $off{ $G->[1] - $H->[1] } }, "$n (guest $G->[1], host $H->[1])";
        }
        $g{$_} or push @bad, "$_: on the host only" for sort keys %h;
        my @o = sort { @{ $off{$b} } <=> @{ $off{$a} } } keys %off;
        if (@o == 1 && ($o[0] == 0 || $o[0] == 2)) {
            printf "inode numbers: guest = host + %d for all %d paths\n", $o[0], scalar @{ $off{ $o[0] } };
        } else {
            for my $d (@o) {
                my @p = @{ $off{$d} };
                push @bad, sprintf("guest - host inode number = %d for %d paths: %s%s", $d, scalar @p,
                    join(", ", @p[0 .. ($#p < 4 ? $#p : 4)]), ($#p > 4 ? ", ..." : ""));
            }
        }
        print "MISMATCH $_\n" for @bad;
        exit(@bad ? 1 : 0);
    ' "$1" "$2"
}

run_restart() { # MODE
    local mode=$1
    local export=$work/export-restart-$1 sock=$work/walkfs-restart-$1.sock state=$work/state-$1
    local n log t0 secs rc hdr l
    local -a stops=(KILL TERM KILL) how=()
    out=$work/restart-$1
    restart_bad=0
    rm -rf "$export" "$sock" "$state" "$out" && mkdir -p "$export" "$out"
    rm -f "$work/console-restart-$mode-"*.log "$work/serve-restart-$mode-"*.log
    : >"$out/summary"
    how[1]="first start"
    for n in 1 2 3 4; do
        log=$work/console-restart-$mode-$n.log
        : >"$log"
        if [ "$n" -gt 1 ]; then
            stop_serve "${stops[n - 2]}"
            how[n]="restart $((n - 1)) of 3: the server before it stopped by $stop_how (wait status $stop_rc)"
            [ "$stop_how" = "SIG${stops[n - 2]}" ] || restart_fail "cache=$mode boot $n: the server of boot $((n - 1)) was gone before the SIG${stops[n - 2]}"
            echo "== cache=$mode: walkfs serve stopped by $stop_how (wait status $stop_rc); starting it again"
        fi
        if ! start_serve "$export" "$sock" "$state" "$work/serve-restart-$mode-$n.log"; then
            restart_fail "cache=$mode boot $n: walkfs serve did not start"
            break
        fi
        rm -f "$work/scratch.img" && truncate -s 1G "$work/scratch.img"
        echo "== cache=$mode restart check, boot $n of 4 (${how[n]}): walkfs serve (pid $serve_pid, --state-dir $state); booting the guest"
        t0=$(date +%s)
        boot_guest "$log" "$sock" "walkfs.cache=$mode walkfs.restart=$n"
        rc=$boot_rc
        secs=$(($(date +%s) - t0))
        echo "== cache=$mode restart check, boot $n: guest done in $secs s (qemu exit $rc$([ "$rc" = 124 ] && echo ': TIMED OUT'))"
        echo "$mode restart-$n $secs $rc" >>"$work/boots"
        sed -n 's/^@@WALKFS-LS //p' "$log" >"$out/ls-$n.txt"
        sed -n 's/^@@WALKFS-SUM //p' "$log" >"$out/sum-$n.txt"
        sed -n 's/^@@WALKFS-REUSE //p' "$log" >>"$out/reuse.txt"

        # This boot's outcome.
        local bad0=$restart_bad kernel end
        kernel=$(sed -n 's/^@@WALKFS-BEGIN .*kernel=\([^ ]*\).*/\1/p' "$log" | head -n 1)
        end=$(grep -a -m 1 "^@@WALKFS-LS-END mode=$mode boot=$n " "$log" || true)
        [ "$rc" = 0 ] && grep -q -a '^@@WALKFS-END' "$log" ||
            restart_fail "cache=$mode boot $n: the guest did not finish (qemu exit $rc)"
        grep -q -a '^@@WALKFS-MOUNT fs=9p .*result=ok' "$log" ||
            restart_fail "cache=$mode boot $n: 9p not mounted"
        while read -r l; do
            restart_fail "cache=$mode boot $n: guest: ${l#@@WALKFS-}"
        done < <(grep -a '^@@WALKFS-\(FATAL\|DETAIL\)' "$log")
        if [ -z "$end" ]; then
            restart_fail "cache=$mode boot $n: no listing"
        elif [ "$(sed 's/.* entries=\([0-9]*\).*/\1/' <<<"$end")" != "$(wc -l <"$out/ls-$n.txt")" ] ||
            [ "$(sed 's/.* files=\([0-9]*\).*/\1/' <<<"$end")" != "$(wc -l <"$out/sum-$n.txt")" ]; then
            restart_fail "cache=$mode boot $n: listing cut short on the console ($end)"
        elif [ ! -s "$out/ls-$n.txt" ]; then
            restart_fail "cache=$mode boot $n: empty listing"
        fi
        if [ "$n" -gt 1 ] && [ -s "$out/ls-1.txt" ]; then
            if ! diff -u "$out/ls-1.txt" "$out/ls-$n.txt" >"$out/diff-ls-1-$n.txt"; then
                restart_fail "cache=$mode boot $n: the listing differs from boot 1's:"
                sed 's/^/    /' "$out/diff-ls-1-$n.txt" | tee -a "$out/summary"
            fi
            if ! diff -u "$out/sum-1.txt" "$out/sum-$n.txt" >"$out/diff-sum-1-$n.txt"; then
                restart_fail "cache=$mode boot $n: the md5sums differ from boot 1's:"
                sed 's/^/    /' "$out/diff-sum-1-$n.txt" | tee -a "$out/summary"
            fi
        fi
        hdr="cache=$mode boot $n (${how[n]}): kernel ${kernel:-?}, ${secs} s, $(wc -l <"$out/ls-$n.txt") paths, $(wc -l <"$out/sum-$n.txt") files"
        if [ "$restart_bad" = "$bad0" ]; then
            restart_note "ok   $hdr$([ "$n" -gt 1 ] && echo ", listing and md5sums equal to boot 1's")"
        else
            restart_note "FAIL $hdr"
        fi
    done
    if [ -n "$serve_pid" ]; then
        stop_serve TERM
        echo "== cache=$mode: walkfs serve stopped by $stop_how (wait status $stop_rc)"
    fi

    # The host's view of the same paths.
    if [ -s "$out/ls-1.txt" ]; then
        (cd "$export/restart-$mode" && find tree -print0 | LC_ALL=C sort -z | xargs -0 -r stat -c '%n %i %h %s %Y') >"$out/ls-host.txt"
        if compare_host "$out/ls-1.txt" "$out/ls-host.txt" >"$out/host-compare.txt"; then
            restart_note "ok   cache=$mode host: boot 1's listing matches the host's stat of the export: $(head -n 1 "$out/host-compare.txt")"
        else
            restart_fail "cache=$mode host: boot 1's listing against the host's stat of the export:"
            sed 's/^/    /' "$out/host-compare.txt" | tee -a "$out/summary"
        fi
        # The two names of the hard link: one number.
        if [ "$(awk '$1 == "tree/d/linked" || $1 == "tree/e/hardlink" { print $2 }' "$out/ls-1.txt" | sort -u | wc -l)" != 1 ]; then
            restart_fail "cache=$mode: tree/d/linked and tree/e/hardlink show different numbers"
        fi
    fi
    [ -s "$out/reuse.txt" ] && restart_note "     cache=$mode boot 1: $(head -n 1 "$out/reuse.txt")"
    rm -f "$work/scratch.img"
    [ "$restart_bad" = 0 ]
}

: >"$work/boots"
if [ "$restart" = 1 ]; then
    status=0
    for m in "${modes[@]}"; do
        run_restart "$m" || status=1
    done
    echo
    echo "restart check (walkfs $walkfs_ver):"
    for m in "${modes[@]}"; do sed 's/^/  /' "$work/restart-$m/summary"; done
    if [ $status != 0 ]; then
        for m in "${modes[@]}"; do
            for f in "$work/serve-restart-$m-"*.log; do
                [ -s "$f" ] || continue
                echo "== $(basename "$f") (RUST_LOG=info; last 20 lines)"
                tail -n 20 "$f"
            done
        done
        echo "RESTART CHECK FAILED"
    else
        echo "inode numbers, links, sizes, mtimes and contents survived every restart."
    fi
    echo "== listings: $work/restart-MODE/; consoles: $work/console-restart-*.log; total $(($(date +%s) - t_start)) s"
    exit $status
fi

for m in "${modes[@]}"; do
    run_mode "$m"
done

set +e
logs=()
for m in "${modes[@]}"; do logs+=("$work/console-$m.log"); done
perl "$here/report.pl" --out "$work/results.jsonl" --walkfs "$walkfs_ver" --boots "$work/boots" "${logs[@]}"
status=$?
set -e
for m in "${modes[@]}"; do
    if [ $status != 0 ] && [ -s "$work/serve-$m.log" ]; then
        echo "== walkfs serve log, cache=$m (RUST_LOG=warn; last 60 lines of $work/serve-$m.log)"
        tail -n 60 "$work/serve-$m.log"
    fi
done
echo "== results: $work/results.jsonl; consoles: $work/console-*.log; total $(($(date +%s) - t_start)) s"
exit $status
