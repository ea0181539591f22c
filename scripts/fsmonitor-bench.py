#!/usr/bin/env python3
"""`git status` on a large tree on a coherent walkfs mount, with and
without `walkfs fsmonitor` as core.fsmonitor, beside plain `git status`
on the host copy: after each round of host-side edits (a few files
appended to, one new untracked file), the time of each and the FUSE
requests it caused (from `walkfs stats --json`). Each run of git has its
own index, so none disturbs another's. Prints one JSON line per round and
a table of medians; the outputs of the runs must agree (checked).

Usage: fsmonitor-bench.py WALKFS_BINARY [FILES] [ROUNDS]   (needs git, root)
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

def git(tree, *args, index=None, env_extra=None, check=True):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", HOME=tree + "/.bench-home")
    if index:
        env["GIT_INDEX_FILE"] = os.path.join(tree, ".git", index)
    if env_extra:
        env.update(env_extra)
    r = subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@example.com", *args],
                       cwd=tree, env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"git {' '.join(args)}: {r.stderr}")
    return r.stdout

def fuse_total(walkfs, mnt):
    out = subprocess.run([walkfs, "stats", "--json", mnt], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["fuse_total"]

def timed(f):
    t0 = time.monotonic()
    out = f()
    return time.monotonic() - t0, out

def main():
    walkfs = os.path.abspath(sys.argv[1])
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 30000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    tmp = tempfile.mkdtemp()
    src, mnt, run = (os.path.join(tmp, x) for x in ("src", "mnt", "run"))
    for d in (src, mnt, run):
        os.mkdir(d)
    os.environ["XDG_RUNTIME_DIR"] = run
    per_dir = 50
    print(f"making {files} files", file=sys.stderr)
    for i in range(files):
        d = os.path.join(src, f"d{i // per_dir // 20}", f"e{i // per_dir}")
        if i % per_dir == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.c"), "w") as f:
            f.write(f"int f{i};\n")
    git(src, "init", "-q", ".")
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "tree")
    for name in ("index.plain", "index.host"):
        shutil.copy(os.path.join(src, ".git", "index"), os.path.join(src, ".git", name))
    git(src, "config", "core.untrackedCache", "true")
    subprocess.run([walkfs, "mount", src, mnt, "-o", "cache=coherent"], check=True)
    hook = f"{walkfs} fsmonitor"
    results = []
    try:
        # Warm: the first of each fills the kernel's caches and the index
        # extensions (the hook's first answer is "everything").
        git(mnt, "-c", f"core.fsmonitor={hook}", "status", "--porcelain")
        git(mnt, "-c", "core.fsmonitor=false", "status", "--porcelain", index="index.plain")
        git(src, "-c", "core.fsmonitor=false", "status", "--porcelain", index="index.host")
        for r in range(rounds):
            for k in range(3):
                i = (r * 7919 + k * 104729) % files
                p = os.path.join(src, f"d{i // per_dir // 20}", f"e{i // per_dir}", f"f{i}.c")
                with open(p, "a") as f:
                    f.write(f"/* round {r} */\n")
            with open(os.path.join(src, f"new{r}.c"), "w") as f:
                f.write("int x;\n")
            row = {"round": r, "files": files}
            outs = {}
            for name, tree, args, index in (
                ("hook", mnt, ["-c", f"core.fsmonitor={hook}"], None),
                ("plain", mnt, ["-c", "core.fsmonitor=false"], "index.plain"),
                ("host", src, ["-c", "core.fsmonitor=false"], "index.host"),
            ):
                before = fuse_total(walkfs, mnt)
                secs, out = timed(lambda: git(tree, *args, "status", "--porcelain", index=index))
                row[f"{name}_ms"] = round(secs * 1000, 2)
                row[f"{name}_fuse_requests"] = fuse_total(walkfs, mnt) - before
                outs[name] = out
            row["agree"] = outs["hook"] == outs["plain"] == outs["host"]
            if not row["agree"]:
                print(json.dumps({"disagree": outs}), file=sys.stderr)
            print(json.dumps(row), flush=True)
            print(f"  round {r + 1}/{rounds}", file=sys.stderr)
            results.append(row)
    finally:
        subprocess.run([walkfs, "fsmonitor", "--stop"], cwd=mnt)
        subprocess.run(["umount", mnt])
        shutil.rmtree(tmp, ignore_errors=True)
    med = lambda k: statistics.median(r[k] for r in results)
    print(f"\ngit status, {files} files, median of {rounds} rounds (3 appends + 1 new file each)")
    print(f"{'':28}{'ms':>10}{'FUSE requests':>16}")
    for name, label in (("hook", "mount, walkfs fsmonitor"), ("plain", "mount, no fsmonitor"),
                        ("host", "host directory")):
        print(f"{label:28}{med(name + '_ms'):>10.1f}{med(name + '_fuse_requests'):>16.0f}")
    print(f"outputs agree in {sum(r['agree'] for r in results)}/{rounds} rounds")
    print(json.dumps({"summary": True, "files": files, "rounds": rounds,
                      "hook_ms": med("hook_ms"), "plain_ms": med("plain_ms"),
                      "host_ms": med("host_ms"),
                      "hook_fuse_requests": med("hook_fuse_requests"),
                      "plain_fuse_requests": med("plain_fuse_requests"),
                      "agree": all(r["agree"] for r in results)}))
    if not all(r["agree"] for r in results):
        sys.exit(1)

if __name__ == "__main__":
    main()
