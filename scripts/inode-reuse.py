#!/usr/bin/env python3
"""A host inode number reused under a mount: the old name must never show
the new file (docs/inode-grants.md, "Generations").

    python3 scripts/inode-reuse.py WALKFS_BINARY RUNS [OPTIONS] [--via-9p]

Each run: a fresh directory with `old` (40 bytes) and four other files is
mounted (`walkfs mount DIR MNT -o OPTIONS,host_fds=1`, default
cache=loose); `old` is read and stat'ed through the mount, deleted on the
host, and files are made on the host until one gets its inode number
(ext4 reuses it at once). The run is WRONG when, through the mount, the
old name shows the new file's size or bytes, or the new file shows other
bytes than its own. Prints one line per outcome count, as JSON.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

OLD, NEW = b"A" * 40, b"B" * 13


def run_once(binary, opts, extra):
    top = tempfile.mkdtemp(prefix="walkfs-reuse-")
    src, mnt = os.path.join(top, "src"), os.path.join(top, "mnt")
    os.mkdir(src)
    os.mkdir(mnt)
    with open(os.path.join(src, "old"), "wb") as f:
        f.write(OLD)
    for i in range(4):
        with open(os.path.join(src, f"other{i}"), "wb") as f:
            f.write(b"x")
    subprocess.run([binary, "mount", src, mnt, "-o", opts + ",host_fds=1"] + extra, check=True)
    try:
        with open(os.path.join(mnt, "old"), "rb") as f:
            f.read()
        ino = os.stat(os.path.join(mnt, "old")).st_ino
        for i in range(4):
            os.stat(os.path.join(mnt, f"other{i}"))
        os.unlink(os.path.join(src, "old"))
        t0, new = time.time(), None
        for i in range(1000):
            p = os.path.join(src, f"new{i}")
            with open(p, "wb") as f:
                f.write(NEW)
            if os.stat(p).st_ino == ino:
                new = os.path.join(mnt, f"new{i}")
                break
            if time.time() - t0 > 5:
                break
            time.sleep(0.02)
        if new is None:
            return "no-reuse"
        deadline = time.time() + 10
        while os.stat(new).st_size != len(NEW) and time.time() < deadline:
            time.sleep(0.02)
        with open(new, "rb") as f:
            wrong = f.read() != NEW
        try:
            wrong |= os.stat(os.path.join(mnt, "old")).st_size == len(NEW)
            with open(os.path.join(mnt, "old"), "rb") as f:
                wrong |= f.read() == NEW
        except OSError:
            pass  # ESTALE, EIO or ENOENT: the old file is gone
        return "WRONG" if wrong else "ok"
    finally:
        subprocess.run(["umount", mnt])
        shutil.rmtree(top, ignore_errors=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, runs = sys.argv[1], int(sys.argv[2])
    opts = next((a for a in sys.argv[3:] if not a.startswith("--")), "cache=loose")
    extra = [a for a in sys.argv[3:] if a == "--via-9p"]
    counts = {}
    for _ in range(runs):
        r = run_once(binary, opts, extra)
        counts[r] = counts.get(r, 0) + 1
    print(json.dumps({"options": opts, "via_9p": bool(extra), "runs": runs, **counts}))


if __name__ == "__main__":
    main()
