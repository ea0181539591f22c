#!/usr/bin/env python3
"""Change reports between clients of one CephFS: latency of inotify events.

    python3 scripts/ceph-events.py [--conf CONF] [--trials N]

Mounts the CephFS of CONF (default /var/tmp/walkfs-ceph/ceph.conf) twice
through `walkfs mount ceph:` (clients A and B, two processes, two
libcephfs sessions) and once through ceph-fuse (C, a writer that is not
walkfs). With inotify watching a directory on B it measures, N times each
(default 200):

  - for each event kind, the time from A's call returning to B's inotify
    event (create, modify, attrib, moved_from/moved_to, delete, and a
    directory's create);
  - for C's creates, the time until B sees the file (a stat that finds
    it): such writers send no report, so B learns of them by the tree's
    rctime poll (crates/backends/cephfs/src/notify.rs) and shows no event.

Prints a JSON line per kind (p50, p99, max in ms, events seen of N) and a
table.
"""
import argparse, ctypes, json, os, select, statistics, struct, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
libc = ctypes.CDLL(None, use_errno=True)
IN = dict(CREATE=0x100, DELETE=0x200, MODIFY=0x2, ATTRIB=0x4, MOVED_FROM=0x40, MOVED_TO=0x80, ISDIR=0x40000000)


class Watch:
    def __init__(self, path):
        self.fd = libc.inotify_init1(os.O_NONBLOCK)
        mask = IN["CREATE"] | IN["DELETE"] | IN["MODIFY"] | IN["ATTRIB"] | IN["MOVED_FROM"] | IN["MOVED_TO"]
        if libc.inotify_add_watch(self.fd, path.encode(), mask) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")

    def wait(self, kind, name, timeout=5.0):
        """Seconds until an event of `kind` for `name` arrives (None: timed out)."""
        t0 = time.perf_counter()
        while True:
            left = timeout - (time.perf_counter() - t0)
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                return None
            buf = os.read(self.fd, 65536)
            now = time.perf_counter()
            i = 0
            hit = False
            while i < len(buf):
                wd, mask, cookie, ln = struct.unpack_from("iIII", buf, i)
                n = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode()
                i += 16 + ln
                if mask & IN[kind] and n == name:
                    hit = True
            if hit:
                return now - t0


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conf", default="/var/tmp/walkfs-ceph/ceph.conf")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--walkfs", default=os.path.join(REPO, "target/release/walkfs"))
    a = ap.parse_args()
    base = "/var/tmp/walkfs-ceph-events"
    mnts = {k: os.path.join(base, k) for k in "ABC"}
    for m in mnts.values():
        os.makedirs(m, exist_ok=True)
    subprocess.run([a.walkfs, "mount", "ceph:", mnts["A"], "-o", "ceph_conf=" + a.conf], check=True)
    subprocess.run([a.walkfs, "mount", "ceph:", mnts["B"], "-o", "ceph_conf=" + a.conf], check=True)
    subprocess.run(["ceph-fuse", "-c", a.conf, mnts["C"]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        d = "events-%d" % os.getpid()
        A, B, C = (os.path.join(mnts[k], d) for k in "ABC")
        os.mkdir(A)
        for _ in range(200):
            if os.path.isdir(B):
                break
            time.sleep(0.01)
        w = Watch(B)
        lat = {k: [] for k in ("create", "modify", "attrib", "moved", "delete", "mkdir", "ceph-fuse create (seen)")}
        for i in range(a.trials):
            f = "f%d" % i
            t = time.perf_counter(); open(os.path.join(A, f), "w").close(); lat["create"].append((time.perf_counter() - t, w.wait("CREATE", f)))
            t = time.perf_counter()
            with open(os.path.join(A, f), "a") as fh:
                fh.write("x")
            lat["modify"].append((time.perf_counter() - t, w.wait("MODIFY", f)))
            t = time.perf_counter(); os.chmod(os.path.join(A, f), 0o600); lat["attrib"].append((time.perf_counter() - t, w.wait("ATTRIB", f)))
            t = time.perf_counter(); os.rename(os.path.join(A, f), os.path.join(A, f + ".m")); lat["moved"].append((time.perf_counter() - t, w.wait("MOVED_TO", f + ".m")))
            t = time.perf_counter(); os.unlink(os.path.join(A, f + ".m")); lat["delete"].append((time.perf_counter() - t, w.wait("DELETE", f + ".m")))
            t = time.perf_counter(); os.mkdir(os.path.join(A, "d%d" % i)); lat["mkdir"].append((time.perf_counter() - t, w.wait("CREATE", "d%d" % i)))
            if i < max(10, a.trials // 10):
                g = os.path.join(C, "c%d" % i)
                open(g, "w").close()
                t0 = time.perf_counter()
                seen = None
                while time.perf_counter() - t0 < 10:
                    if os.path.exists(os.path.join(B, "c%d" % i)):
                        seen = time.perf_counter() - t0
                        break
                    time.sleep(0.005)
                lat["ceph-fuse create (seen)"].append((0, seen))
        print()
        print("%-26s %8s %8s %8s %10s" % ("change on A", "p50 ms", "p99 ms", "max ms", "seen"))
        for k, v in lat.items():
            got = [x for _, x in v if x is not None]
            row = {"bench": "ceph-events", "kind": k, "trials": len(v), "seen": len(got)}
            if got:
                row.update(p50_ms=round(pct(got, 50) * 1000, 2), p99_ms=round(pct(got, 99) * 1000, 2), max_ms=round(max(got) * 1000, 2))
            print(json.dumps(row), file=sys.stderr)
            print("%-26s %8s %8s %8s %10s" % (k, row.get("p50_ms", "-"), row.get("p99_ms", "-"), row.get("max_ms", "-"), "%d/%d" % (len(got), len(v))))
        subprocess.run(["rm", "-rf", A])
    finally:
        for m in mnts.values():
            subprocess.run(["umount", m], stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
