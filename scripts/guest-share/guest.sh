#!/bin/bash
# The guest-share guest's test run (PID 1, started by /walkfs-test.sh, the
# bootstrap scripts/kernel-9p/init.sh, from the payload disk /dev/vdc).
# Mounts the host's export twice: `walkfs mount vsock:2:PORT /mnt/w -o
# cache=coherent,allow_other` (allow_other: pjdfstest acts as other users
# too, as scripts/pjdfstest.sh mounts; walkfs serve on the host, reached over virtio-vsock
# through vhost-device-vsock) and `mount -t virtiofs share /mnt/v`
# (virtiofsd), then on each: git, watchers of host edits (inotifywait -r,
# node fs.watch, git's fsmonitor hook), and pjdfstest. Writes its logs to
# the results disk /dev/vdb (ext4, made by the host) and reports on the
# serial console in lines starting with @@WALKFS- (scripts/guest-share.sh
# parses them). Kernel command line: walkfs.walkfs=0|1 (mount walkfs),
# walkfs.port=N (walkfs serve's vsock port on the host), walkfs.probe=N (a
# socat echo on the host), walkfs.pjd=FOLDER,...|none,
# walkfs.pjdv=0|1 (pjdfstest on virtiofs too), walkfs.pjdbudget=S (start
# no further folder after S s on one mount; 0 = no limit),
# walkfs.rustlog=FILTER (the mount's RUST_LOG). Powers the machine off at the end.
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C LC_ALL=C HOME=/root TERM=dumb
umask 022
here=/tmp/walkfs
R=/results
say() { echo "@@WALKFS-$*"; }
ms() { echo $(($(date +%s%N) / 1000000)); }
arg() { sed -n "s/.*\\bwalkfs\\.$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
want_walkfs=$(arg walkfs)
port=$(arg port)
probe=$(arg probe)
pjd=$(arg pjd)
pjdv=$(arg pjdv)
rustlog=$(arg rustlog)
pjd_budget=$(arg pjdbudget)
[ -n "$want_walkfs" ] || want_walkfs=1
[ -n "$port" ] || port=5640
[ -n "$probe" ] || probe=5641
[ -n "$pjd" ] || pjd=none
[ -n "$pjdv" ] || pjdv=0
[ -n "$rustlog" ] || rustlog=debug
[ -n "$pjd_budget" ] || pjd_budget=0
wpid=

finish() {
    cd /
    if mountpoint -q /mnt/w; then
        walkfs stats /mnt/w >"$R/walkfs-stats.txt" 2>&1
        umount /mnt/w 2>/dev/null || umount -l /mnt/w 2>/dev/null
    fi
    if [ -n "$wpid" ]; then
        for _ in $(seq 1 50); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.2; done
        kill "$wpid" 2>/dev/null
    fi
    umount /mnt/v 2>/dev/null
    dmesg >"$R/dmesg.txt" 2>&1
    say "DMESG-BEGIN"
    dmesg | grep -iE 'fuse|vsock|virtio|virtiofs|oops|bug|warn|error|call trace' | tail -n 60 | sed 's/^/@@WALKFS-DMESG /'
    say "DMESG-END"
    sync
    umount "$R" 2>/dev/null
    sync
    say "END"
    sleep 1
    echo o >/proc/sysrq-trigger
    sleep 60
}
trap finish EXIT

dmesg -n 1 # keep printk off the console; the end of dmesg is printed at the end
say "BEGIN kernel=$(uname -r) walkfs=$want_walkfs pjd=$pjd pjdv=$pjdv node=$(node --version 2>/dev/null) git=$(git --version 2>/dev/null | cut -d' ' -f3)"

for m in vmw_vsock_virtio_transport fuse virtiofs; do
    modprobe "$m" 2>/dev/null || say "DETAIL modprobe $m failed"
done
say "MODULES $(lsmod | awk 'NR > 1 && $1 ~ /vsock|fuse|virtio/ { printf "%s ", $1 }')/dev/vsock=$([ -e /dev/vsock ] && echo yes || echo no) /dev/fuse=$([ -e /dev/fuse ] && echo yes || echo no)"

mkdir -p "$R" /mnt/w /mnt/v
mount -t ext4 /dev/vdb "$R" || say "DETAIL results disk /dev/vdb not mounted: logs stay in the guest's tmpfs"
if [ -x "$here/walkfs" ]; then
    install -m 0755 "$here/walkfs" /usr/local/bin/walkfs
fi

# ------------------------------------------------------------ vsock probe
# The host's socat on vm.vsock_PROBE answers "pong LINE" (the same path,
# vhost-device-vsock's uds-path + _PORT, as walkfs serve's socket).
t0=$(ms)
token=ping-$$-$RANDOM
reply=$(echo "$token" | timeout 30 socat -t 10 - "VSOCK-CONNECT:2:$probe" 2>"$R/probe.err")
if [ "$reply" = "pong $token" ]; then
    say "PROBE vsock result=ok port=$probe ms=$(($(ms) - t0)) reply=$reply"
else
    say "PROBE vsock result=fail port=$probe ms=$(($(ms) - t0)) reply=${reply:-none} error=$(tr '\n' ' ' <"$R/probe.err" | cut -c1-200)"
fi

# ----------------------------------------------------------------- mounts
if mount -t virtiofs share /mnt/v 2>"$R/virtiofs-mount.err"; then
    say "MOUNT fs=virtiofs result=ok opts=$(awk '$2=="/mnt/v"{print $4}' /proc/mounts)"
else
    say "MOUNT fs=virtiofs result=fail error=$(tr '\n' ' ' <"$R/virtiofs-mount.err")"
fi

if [ "$want_walkfs" = 1 ]; then
    t0=$(ms)
    RUST_LOG=$rustlog NO_COLOR=1 walkfs mount -f "vsock:2:$port" /mnt/w -o cache=coherent,allow_other >"$R/walkfs-mount.log" 2>&1 &
    wpid=$!
    for _ in $(seq 1 600); do
        mountpoint -q /mnt/w && break
        kill -0 "$wpid" 2>/dev/null || break
        sleep 0.1
    done
    if mountpoint -q /mnt/w; then
        say "MOUNT fs=walkfs result=ok ms=$(($(ms) - t0)) source=vsock:2:$port opts=$(awk '$2=="/mnt/w"{print $4}' /proc/mounts)"
    else
        rc=running
        kill -0 "$wpid" 2>/dev/null || { wait "$wpid"; rc=$?; }
        say "MOUNT fs=walkfs result=fail ms=$(($(ms) - t0)) source=vsock:2:$port exit=$rc"
        tail -n 40 "$R/walkfs-mount.log" | sed 's/^/@@WALKFS-DETAIL walkfs mount: /'
        dmesg | grep -iE 'fuse|vsock' | tail -n 10 | sed 's/^/@@WALKFS-DETAIL dmesg: /'
    fi
fi

# -------------------------------------------- walkfs serve on vsock itself
# The host has no vsock loopback; the guest's kernel has one
# (vsock_loopback): `walkfs serve --listen vsock:1:PORT` and a mount of it
# check the server's own AF_VSOCK listener, and a listener on every CID
# without a secret must be refused (any guest or the host could connect).
if [ "$want_walkfs" = 1 ]; then
    modprobe vsock_loopback 2>/dev/null || say "DETAIL modprobe vsock_loopback failed"
    mkdir -p /tmp/vl-export /mnt/l
    echo "made in the export" >/tmp/vl-export/seed
    walkfs serve /tmp/vl-export --listen vsock:1:5700 >"$R/vsock-serve.log" 2>&1 &
    spid=$!
    for _ in $(seq 1 100); do
        grep -q 'serving .* on vsock:1:5700' "$R/vsock-serve.log" && break
        sleep 0.1
    done
    lres=fail
    if walkfs mount vsock:1:5700 /mnt/l -o cache=coherent 2>"$R/vsock-mount.err" &&
        [ "$(cat /mnt/l/seed 2>/dev/null)" = "made in the export" ] &&
        echo via-vsock >/mnt/l/new && walkfs sync /mnt/l &&
        [ "$(cat /tmp/vl-export/new 2>/dev/null)" = via-vsock ]; then
        lres=ok
    fi
    say "LISTEN vsock-loopback result=$lres listen=vsock:1:5700 $(tr '\n' ' ' <"$R/vsock-mount.err" | cut -c1-200)"
    umount /mnt/l 2>/dev/null
    kill "$spid" 2>/dev/null
    if timeout 10 walkfs serve /tmp/vl-export --listen vsock:5701 2>"$R/vsock-refuse.err"; then
        say "LISTEN vsock-any-cid-without-secret result=fail served"
    elif grep -q 'refusing' "$R/vsock-refuse.err"; then
        say "LISTEN vsock-any-cid-without-secret result=ok refused"
    else
        say "LISTEN vsock-any-cid-without-secret result=fail $(tr '\n' ' ' <"$R/vsock-refuse.err" | cut -c1-200)"
    fi
fi

# ------------------------------------------------------------------- tests
# Each runs with set -e in a subshell; ok = exit status 0. (No `a && b` or
# `! a` for checks: set -e ignores failures there.)
run_test() { # FS TEST FUNCTION ARGS...
    local fs=$1 t=$2 rc t0
    shift 2
    t0=$(ms)
    (
        exec 9>"$R/trace-$fs-$t.txt"
        BASH_XTRACEFD=9
        set -ex
        "$@"
    ) >"$R/out-$fs-$t.txt" 2>&1
    rc=$?
    if [ $rc = 0 ]; then r=ok; else r=fail; fi
    say "RESULT fs=$fs test=$t result=$r ms=$(($(ms) - t0))"
    if [ $rc != 0 ]; then
        tail -n 6 "$R/trace-$fs-$t.txt" | sed "s/^/@@WALKFS-DETAIL fs=$fs test=$t trace: /"
        tail -n 6 "$R/out-$fs-$t.txt" | sed "s/^/@@WALKFS-DETAIL fs=$fs test=$t output: /"
    fi
    return $rc
}

# git on a small tree made here: init, add, commit, status, a second
# commit (edit, git mv, git rm); the host reads the repository afterwards.
t_git() { # DIR FS
    local d=$1 fs=$2
    rm -rf "$d"
    mkdir -p "$d"
    cd "$d"
    git init -q -b main .
    git config user.email guest@walkfs.test
    git config user.name "walkfs guest"
    mkdir -p src/lib doc
    printf '# a test tree\n' >README.md
    for i in 1 2 3 4 5 6 7 8; do printf 'int f%d(void) { return %d; }\n' $i $i >src/lib/f$i.c; done
    printf 'int main(void) { return 0; }\n' >src/main.c
    printf '#!/bin/sh\necho run\n' >run.sh
    chmod +x run.sh
    ln -s src/main.c main-link.c
    printf 'notes\n' >doc/notes.txt
    git add -A
    git commit -q -m "guest commit 1 on $fs"
    [ -z "$(git status --porcelain)" ]
    printf 'more\n' >>doc/notes.txt
    git mv src/lib/f8.c src/lib/f8-renamed.c
    git rm -q src/lib/f7.c
    git commit -q -am "guest commit 2 on $fs"
    [ -z "$(git status --porcelain)" ]
    [ "$(git log --format=%s | tr '\n' '|')" = "guest commit 2 on $fs|guest commit 1 on $fs|" ]
    [ "$(git ls-files | wc -l)" = 12 ]
    git fsck --no-progress
    # git's fsmonitor hook (walkfs fsmonitor) for the watch step: its
    # first answer is "everything"; the second sets the token.
    if command -v walkfs >/dev/null; then
        git config core.fsmonitor "walkfs fsmonitor"
        git status --porcelain >/dev/null
        GIT_TRACE_FSMONITOR="$R/fsmonitor-setup-$fs.txt" git status --porcelain >/dev/null
    fi
}

# Watchers of the host's edits: inotifywait -m -r on DIR, node's fs.watch
# on DIR and DIR/sub; then "ready" in CTL, wait for the host's "done"
# there (stat polling), 3 s more, stop them, print what they saw.
watch_round() { # FS MNT TAG
    local fs=$1 mnt=$2 tag=$3 W=$2/watch-$3 C=$2/ctl/$3 repo=$2/repo-$3 i t0 ip np token
    if [ ! -d "$W/sub" ] || [ ! -d "$C" ]; then
        say "DETAIL fs=$fs watch: no $W/sub or $C (the host makes them)"
        return 1
    fi
    inotifywait -m -r --format '%e %w%f' "$W" >"$R/inotify-$tag.txt" 2>"$R/inotifywait-$tag.err" &
    ip=$!
    node "$here/watch.js" "$W" "$W/sub" >"$R/node-$tag.txt" 2>"$R/node-$tag.err" &
    np=$!
    for _ in $(seq 1 300); do
        grep -q 'Watches established' "$R/inotifywait-$tag.err" && grep -q ready "$R/node-$tag.err" && break
        sleep 0.1
    done
    grep -q 'Watches established' "$R/inotifywait-$tag.err" || say "DETAIL fs=$fs inotifywait not ready: $(tr '\n' ' ' <"$R/inotifywait-$tag.err")"
    grep -q ready "$R/node-$tag.err" || say "DETAIL fs=$fs node not ready: $(tr '\n' ' ' <"$R/node-$tag.err")"
    : >"$C/ready"
    say "STEP fs=$fs watchers ready: waiting for the host's edits"
    t0=$(ms)
    for i in $(seq 1 1200); do
        [ -e "$C/done" ] && break
        sleep 0.25
    done
    if [ -e "$C/done" ]; then
        say "STEP fs=$fs the host's done seen after $(($(ms) - t0)) ms"
    else
        say "DETAIL fs=$fs no $C/done after $(($(ms) - t0)) ms"
    fi
    sleep 3
    kill "$ip" "$np" 2>/dev/null
    wait "$ip" "$np" 2>/dev/null
    say "EVENTS-BEGIN fs=$fs tool=inotify"
    sed "s|$W/||; s|$W\$|.|; s/^/@@WALKFS-EV fs=$fs tool=inotify /" "$R/inotify-$tag.txt"
    say "EVENTS-END fs=$fs tool=inotify lines=$(wc -l <"$R/inotify-$tag.txt")"
    say "EVENTS-BEGIN fs=$fs tool=node"
    sed "s/^/@@WALKFS-EV fs=$fs tool=node /" "$R/node-$tag.txt"
    say "EVENTS-END fs=$fs tool=node lines=$(wc -l <"$R/node-$tag.txt")"

    # git status with the fsmonitor hook against git status without it
    # (the host appended to README.md and made from-host.txt).
    if [ -d "$repo/.git" ] && command -v walkfs >/dev/null; then
        local with without hook
        # What the hook answers to the token git holds (the one its last
        # status read or wrote): NEW-TOKEN NUL PATH NUL ...; "/" = everything.
        # (A status that found nothing to write keeps the token it read.)
        token=$(sed -n "s/.*\(read\|write\) fsmonitor extension successful '\(.*\)'.*/\2/p" "$R/fsmonitor-setup-$fs.txt" 2>/dev/null | tail -n 1)
        hook=$(cd "$repo" && walkfs fsmonitor 2 "$token" 2>>"$R/fsmonitor-$tag.err" | tr '\0' '\n' | tail -n +2 | sort | tr '\n ' '+_' | sed 's/+$//')
        [ -n "$token" ] || hook="no-token"
        with=$(cd "$repo" && GIT_TRACE_FSMONITOR="$R/fsmonitor-trace-$tag.txt" git status --porcelain 2>>"$R/fsmonitor-$tag.err" | tr '\n ' '|_')
        without=$(cd "$repo" && git -c core.fsmonitor=false status --porcelain 2>>"$R/fsmonitor-$tag.err" | tr '\n ' '|_')
        say "FSMONITOR fs=$fs with=${with:-clean} without=${without:-clean} hook=${hook:-none}"
        (cd "$repo" && walkfs fsmonitor --stop) >>"$R/fsmonitor-$tag.err" 2>&1
    fi
}

# pjdfstest: prove -rv of each folder from a fresh directory; the counts
# on the console (pjd-summary.pl), the whole output on the results disk.
run_pjd() { # FS MNT
    local fs=$1 mnt=$2 f P=$here/pjdfstest t0 start
    start=$(date +%s)
    for f in ${pjd//,/ }; do
        [ -d "$P/tests/$f" ] || { say "DETAIL fs=$fs pjdfstest: no folder $f"; continue; }
        if [ "$pjd_budget" -gt 0 ] && [ $(($(date +%s) - start)) -ge "$pjd_budget" ]; then
            say "PJDSKIP fs=$fs folder=$f reason=budget of ${pjd_budget}s spent"
            continue
        fi
        rm -rf "$mnt/pjd-$fs/$f" 2>/dev/null
        mkdir -p "$mnt/pjd-$fs/$f"
        say "STEP fs=$fs pjdfstest $f"
        t0=$(date +%s)
        (cd "$mnt/pjd-$fs/$f" && prove -rv "$P/tests/$f") >"$R/pjd-$fs-$f.txt" 2>&1
        perl "$here/pjd-summary.pl" --fs "$fs" --folder "$f" --secs $(($(date +%s) - t0)) --prefix "$P/tests/" "$R/pjd-$fs-$f.txt"
        rm -rf "$mnt/pjd-$fs/$f" 2>/dev/null
    done
}

for fs in walkfs virtiofs; do
    case $fs in walkfs) mnt=/mnt/w tag=w ;; virtiofs) mnt=/mnt/v tag=v ;; esac
    if ! mountpoint -q "$mnt"; then
        say "SKIP fs=$fs not mounted"
        continue
    fi
    say "STEP fs=$fs git"
    run_test "$fs" git t_git "$mnt/repo-$tag" "$fs"
    say "STEP fs=$fs watchers"
    watch_round "$fs" "$mnt" "$tag"
done
if [ "$pjd" != none ] && [ -x "$here/pjdfstest/pjdfstest" ]; then
    for fs in walkfs virtiofs; do
        case $fs in walkfs) mnt=/mnt/w ;; virtiofs) mnt=/mnt/v ;; esac
        [ "$fs" = virtiofs ] && [ "$pjdv" != 1 ] && continue
        mountpoint -q "$mnt" || continue
        run_pjd "$fs" "$mnt"
    done
elif [ "$pjd" != none ]; then
    say "SKIP pjdfstest not on the payload disk"
fi
