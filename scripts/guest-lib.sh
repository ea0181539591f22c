# shellcheck shell=bash
# What the QEMU guest tests share (sourced by scripts/kernel-9p.sh and
# scripts/guest-share.sh): the host's packages, the Debian bookworm guest
# image, pjdfstest built on the host, and the payload disk. Each caller
# keeps its own work directory (target/kernel-9p, target/guest-share) and
# its own image in it; PREFIX below is the caller's name in messages, and
# the caller sets repo (the repository's root).

# guest_apt_install PACKAGE...: apt-get install what is missing (nothing
# when no package is given).
guest_apt_install() {
    [ $# -gt 0 ] || return 0
    echo "== apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
}

# guest_image_tools: the packages that building and booting an image needs,
# of those not installed, one a line.
guest_image_tools() {
    command -v qemu-system-x86_64 >/dev/null || echo qemu-system-x86
    command -v debootstrap >/dev/null || echo debootstrap
    command -v mke2fs >/dev/null && command -v debugfs >/dev/null || echo e2fsprogs
    command -v perl >/dev/null || echo perl
    command -v timeout >/dev/null || echo coreutils
    [ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || echo debian-archive-keyring
}

# guest_pjd_tar PREFIX WHAT-RUNS-INSTEAD: pjd_tar = the pjdfstest tarball
# in ../shared/tools, or empty after a message that pjdfstest is skipped.
guest_pjd_tar() {
    # shellcheck disable=SC2154 # repo: the caller's
    pjd_tar=$(ls "$repo"/../shared/tools/pjdfstest-*.tar.gz 2>/dev/null | head -n 1 || true)
    [ -n "$pjd_tar" ] || echo "$1: no ../shared/tools/pjdfstest-*.tar.gz: pjdfstest SKIPPED ($2)"
}

# guest_pjd_tools: the packages building pjdfstest needs, of those not
# installed, one a line.
guest_pjd_tools() {
    local c
    for c in autoreconf:autoconf automake:automake gcc:gcc make:make; do
        command -v "${c%%:*}" >/dev/null || echo "${c#*:}"
    done
}

# The bookworm mirror the host's apt uses (deb822 .sources or one-line .list).
guest_host_mirror() {
    local f
    {
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -f "$f" ] || continue
            awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
                               if ($(i + 1) == "bookworm") print $i }' "$f"
        done
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            awk -v RS= '{
                n = split($0, L, "\n"); types = uris = suites = ""; enabled = "yes"
                for (j = 1; j <= n; j++) {
                    if (L[j] ~ /^Types:/) types = L[j]
                    else if (L[j] ~ /^URIs:/) uris = L[j]
                    else if (L[j] ~ /^Suites:/) suites = L[j]
                    else if (L[j] ~ /^Enabled:/) enabled = L[j]
                }
                if (types ~ /[: ]deb( |$)/ && suites ~ /[: ]bookworm( |$)/ && enabled !~ /no/) {
                    sub(/^URIs:[ \t]*/, "", uris); split(uris, U, /[ \t]+/); print U[1]
                }
            }' "$f"
        done
    } | head -n 1
}

# guest_build_image PREFIX WORK PACKAGES INIT MIRROR-VARIABLE DIR...: once,
# a Debian bookworm guest (debootstrap --variant=minbase with PACKAGES,
# comma-separated) in WORK/rootfs.img (3 GiB ext4), its kernel and initrd
# in WORK/vmlinuz and WORK/initrd.img, INIT installed as /walkfs-test.sh
# and the directories DIR... made. Kept while all three exist; the mirror
# is $MIRROR-VARIABLE or the host's.
guest_build_image() {
    local name=$1 work=$2 pkgs=$3 init=$4 mvar=$5
    shift 5
    local img=$work/rootfs.img rootfs=$work/rootfs mirror t0 d
    if [ -s "$img" ] && [ -s "$work/vmlinuz" ] && [ -s "$work/initrd.img" ]; then
        return 0
    fi
    mirror=${!mvar:-$(guest_host_mirror)}
    [ -n "$mirror" ] || { echo "$name: no bookworm mirror in /etc/apt/sources.list{,.d/*}; set $mvar" >&2; exit 2; }
    rm -rf "$rootfs" "$img" "$work/vmlinuz" "$work/initrd.img"
    echo "== debootstrap --variant=minbase bookworm (the host's mirror) -> $rootfs"
    t0=$(date +%s)
    debootstrap --variant=minbase --include="$pkgs" bookworm "$rootfs" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || {
        tail -n 30 "$work/debootstrap.log" >&2
        exit 1
    }
    cp "$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -n 1)" "$work/vmlinuz"
    cp "$(ls "$rootfs"/boot/initrd.img-* | sort -V | tail -n 1)" "$work/initrd.img"
    install -m 0755 "$init" "$rootfs/walkfs-test.sh"
    for d in "$@"; do mkdir -p "$rootfs$d"; done
    echo walkfs-guest >"$rootfs/etc/hostname"
    rm -f "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages
    echo "== mke2fs -t ext4 -d rootfs $img 3G"
    mke2fs -q -t ext4 -L walkfs-root -d "$rootfs" "$img.tmp" 3G
    mv "$img.tmp" "$img"
    rm -rf "$rootfs"
    echo "== guest image built in $(($(date +%s) - t0)) s: $img, kernel $(debugfs -R 'ls /boot' "$img" 2>/dev/null | grep -o 'vmlinuz-[^ ]*' | head -n 1)"
}

# guest_refresh_init IMG INIT: the image's /walkfs-test.sh is the
# bootstrap INIT; refresh it in place if that file changed (no loop
# mount: debugfs).
guest_refresh_init() {
    local img=$1 init=$2
    if ! cmp -s <(debugfs -R 'cat /walkfs-test.sh' "$img" 2>/dev/null) "$init"; then
        debugfs -w -R 'rm /walkfs-test.sh' "$img" >/dev/null 2>&1 || true
        debugfs -w -R "write $init /walkfs-test.sh" "$img" >/dev/null 2>&1
        debugfs -w -R 'sif /walkfs-test.sh mode 0100755' "$img" >/dev/null 2>&1
    fi
}

# guest_pjdfstest TARBALL BUILD-DIR DEST: pjdfstest built from TARBALL in
# BUILD-DIR (again only when the tarball changed; the host is bookworm
# too: same glibc as the guest), its program and tests copied to DEST.
guest_pjdfstest() {
    local pjd_tar=$1 pjd_build=$2 dest=$3 stamp
    stamp="$(basename "$pjd_tar") $(stat -c %s "$pjd_tar")"
    if [ ! -x "$pjd_build/pjdfstest/pjdfstest" ] || [ "$(cat "$pjd_build/stamp" 2>/dev/null)" != "$stamp" ]; then
        echo "== building pjdfstest ($(basename "$pjd_tar"))"
        rm -rf "$pjd_build" && mkdir -p "$pjd_build"
        tar xzf "$pjd_tar" -C "$pjd_build"
        (cd "$pjd_build/pjdfstest" && autoreconf -ifs && ./configure && make pjdfstest) >"$pjd_build/build.log" 2>&1 || {
            tail -n 30 "$pjd_build/build.log" >&2
            exit 1
        }
        echo "$stamp" >"$pjd_build/stamp"
    fi
    mkdir -p "$dest"
    cp -a "$pjd_build/pjdfstest/pjdfstest" "$pjd_build/pjdfstest/tests" "$dest/"
}

# guest_payload_tar DIR TAR: the payload disk, a plain tar of DIR's
# contents (the guest's init unpacks it). A raw disk is read in 512-byte
# sectors: the tar is padded to a whole MiB.
guest_payload_tar() {
    tar -cf "$2" -C "$1" .
    truncate -s %1M "$2"
}

# guest_walkfs WORK: the walkfs binary the guest gets (WALKFS, default
# target/release/walkfs, built when missing), copied to WORK/walkfs (a
# rebuild may replace the original while the guest runs); sets walkfs and
# walkfs_ver (its build time and the copy's sha256).
guest_walkfs() {
    walkfs=${WALKFS:-$repo/target/release/walkfs}
    if [ ! -x "$walkfs" ]; then
        echo "== cargo build --release -p walkfs-cli"
        (cd "$repo" && cargo build --release -p walkfs-cli --quiet)
    fi
    cp "$walkfs" "$1/walkfs.tmp" && mv -f "$1/walkfs.tmp" "$1/walkfs"
    walkfs_ver="$(stat -c '%y' "$walkfs" | cut -d. -f1) sha256:$(sha256sum "$1/walkfs" | cut -c1-12)"
}
