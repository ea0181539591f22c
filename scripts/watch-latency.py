#!/usr/bin/env python3
"""Latency from a change on the host to its inotify event on a walkfs
mount (cache=coherent), beside the same measured on the host directory
itself: p50/p99 over N changes (creates, appends, chmods, deletes in
turn), as a JSON line and a table.

Usage: watch-latency.py WALKFS_BINARY [N]   (needs inotifywait, root)
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, threading, time

def measure(watched, changed, n):
    p = subprocess.Popen(
        ["inotifywait", "-m", "-q", "-e", "create,delete,modify,attrib",
         "--format", "%f|%e", watched],
        stdout=subprocess.PIPE, text=True)
    seen = {}
    cv = threading.Condition()
    def reader():
        for line in p.stdout:
            t = time.monotonic()
            with cv:
                seen.setdefault(line.strip(), t)
                cv.notify_all()
    threading.Thread(target=reader, daemon=True).start()
    time.sleep(0.5)
    lat = []
    for i in range(n):
        f = os.path.join(changed, f"f{i // 4}")
        kind = i % 4
        t0 = time.monotonic()
        if kind == 0:
            open(f, "w").close(); key = f"f{i // 4}|CREATE"
        elif kind == 1:
            with open(f, "a") as h: h.write("x")
            key = f"f{i // 4}|MODIFY"
        elif kind == 2:
            os.chmod(f, 0o600); key = f"f{i // 4}|ATTRIB"
        else:
            os.unlink(f); key = f"f{i // 4}|DELETE"
        with cv:
            ok = cv.wait_for(lambda: key in seen, timeout=5)
        lat.append((seen[key] - t0) if ok else 5.0)
        if i % 200 == 0:
            print(f"  {i}/{n}", file=sys.stderr)
    p.kill()
    lat.sort()
    q = lambda x: lat[min(len(lat) - 1, int(round((len(lat) - 1) * x)))] * 1000
    return {"p50_ms": round(q(0.5), 3), "p99_ms": round(q(0.99), 3),
            "max_ms": round(lat[-1] * 1000, 3), "lost": sum(1 for l in lat if l >= 5.0)}

def main():
    walkfs = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    tmp = tempfile.mkdtemp()
    try:
        host, src, mnt = (os.path.join(tmp, x) for x in ("host", "src", "mnt"))
        for d in (host, src, mnt):
            os.mkdir(d)
        native = measure(host, host, n)
        subprocess.run([walkfs, "mount", src, mnt, "-o", "cache=coherent,negtimeout=-1"], check=True)
        try:
            mounted = measure(mnt, src, n)
        finally:
            subprocess.run(["umount", mnt])
        row = {"bench": "watch-latency", "changes": n, "native": native, "mount": mounted}
        print(json.dumps(row))
        print(f"{'':10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'lost':>5}", file=sys.stderr)
        for k, v in (("host", native), ("mount", mounted)):
            print(f"{k:10} {v['p50_ms']:8.3f} {v['p99_ms']:8.3f} {v['max_ms']:8.3f} {v['lost']:5}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

main()
