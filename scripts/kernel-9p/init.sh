#!/bin/sh
# PID 1 of the kernel-9p guest (installed as /walkfs-test.sh in the image by
# scripts/kernel-9p.sh). It only unpacks the payload disk (/dev/vdc: a tar
# of scripts/kernel-9p/ and pjdfstest) and runs its guest.sh, so the image
# does not have to be rebuilt when the tests change.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o size=768m tmpfs /tmp
mkdir -p /tmp/walkfs && tar -xf /dev/vdc -C /tmp/walkfs && exec /bin/bash /tmp/walkfs/guest.sh
echo "@@WALKFS-FATAL bootstrap: cannot unpack the payload disk /dev/vdc"
sync
echo o > /proc/sysrq-trigger
sleep 30
