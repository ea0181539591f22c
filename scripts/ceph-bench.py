#!/usr/bin/env python3
"""walkfs over CephFS against ceph-fuse, on one cluster, in one run.

    python3 scripts/ceph-bench.py [--conf CONF] [--reps N] [--only W,...] [--fs F,...]

Mounts the CephFS of CONF (default /var/tmp/walkfs-ceph/ceph.conf, what
scripts/ceph-up.sh starts) through `walkfs mount ceph:` (coherent, the
default; and cache=loose) and through ceph-fuse, and times on each, in a
fresh directory of the same file system, interleaved, N repetitions
(default 3, medians reported):

  untar-hostap   the hostap (wpa 2.10) source tree extracted (tar of the
                 orig tarball, decompressed once beforehand)
  git-commit     git init + add + commit of that tree
  git-status-cold  git status on a fresh mount after dropping the caches
  git-status-warm  git status again
  find           find over the tree, on a fresh mount (cold)
  stat-warm-10k  lstat of 10,000 files, the second time (warm)
  rm-rf          the hostap tree removed
  untar-npm      an npm project with its node_modules extracted
                 (`walkfs bench workloads` prepares it once)

For walkfs rows it reads the mount's libcephfs calls (`walkfs stats`) and
reports them per workload and per file. Prints a JSON line per row and a
table of ratios (ceph-fuse seconds / walkfs seconds: above 1, walkfs is
faster). Needs root, the cluster, ceph-fuse and the wpa source
(`apt-get source wpa`, which `walkfs bench workloads` fetches).
"""
import argparse, glob, json, os, shutil, statistics, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = "/var/tmp/walkfs-bench-ceph"
WORKLOADS = ["untar-hostap", "git-commit", "git-status-cold", "git-status-warm",
             "find", "stat-warm-10k", "rm-rf", "untar-npm"]
GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@walkfs",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@walkfs",
               GIT_CONFIG_NOSYSTEM="1", HOME=CACHE)


def sh(*cmd, cwd=None, env=None):
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def hostap_tar():
    os.makedirs(CACHE, exist_ok=True)
    tar = os.path.join(CACHE, "hostap.tar")
    if not os.path.exists(tar):
        src = sorted(glob.glob("/var/tmp/walkfs-bench-build/wpa_*.orig.tar.xz"))
        if not src:
            sys.exit("ceph-bench: no wpa source: run `walkfs bench workloads --only untar-hostap --reps 1` once")
        sh("sh", "-c", f"xz -dc {src[-1]} > {tar}")
    return tar


class Fs:
    def __init__(self, name, conf, walkfs):
        self.name, self.conf, self.walkfs = name, conf, walkfs
        self.mnt = os.path.join(CACHE, "mnt-" + name)

    def mount(self):
        os.makedirs(self.mnt, exist_ok=True)
        if self.name == "ceph-fuse":
            sh("ceph-fuse", "-c", self.conf, self.mnt)
        else:
            opts = "ceph_conf=" + self.conf
            if self.name == "walkfs-loose":
                opts += ",cache=loose"
            sh(self.walkfs, "mount", "ceph:", self.mnt, "-o", opts)

    def umount(self):
        for _ in range(50):
            if subprocess.run(["umount", self.mnt], stderr=subprocess.DEVNULL).returncode == 0:
                return
            time.sleep(0.1)
        subprocess.run(["umount", "-l", self.mnt])

    def calls(self):
        if not self.name.startswith("walkfs"):
            return None
        o = subprocess.run([self.walkfs, "stats", "--json", self.mnt], capture_output=True, text=True)
        if o.returncode != 0:
            return None
        return dict(json.loads(o.stdout).get("rpcs", []))


def diff(a, b):
    if a is None or b is None:
        return None
    return {k: b.get(k, 0) - a.get(k, 0) for k in b if b.get(k, 0) - a.get(k, 0) > 0}


def one_rep(fs, rep, want, tar, npm):
    """Every wanted workload once on `fs`: {workload: (seconds, calls)}."""
    out = {}
    d = f"bench-{fs.name}-{os.getpid()}-{rep}"

    def timed(w, f):
        before = fs.calls()
        t = time.perf_counter()
        f()
        s = time.perf_counter() - t
        out[w] = (s, diff(before, fs.calls()))

    fs.mount()
    top = os.path.join(fs.mnt, d)
    os.mkdir(top)
    if "untar-hostap" in want:
        timed("untar-hostap", lambda: sh("tar", "xf", tar, "-C", top))
    else:
        sh("tar", "xf", tar, "-C", top)
    tree = os.path.join(top, os.listdir(top)[0])
    if "git-commit" in want:
        def commit():
            sh("git", "init", "-q", cwd=tree, env=GIT_ENV)
            sh("git", "add", ".", cwd=tree, env=GIT_ENV)
            sh("git", "commit", "-q", "-m", "tree", cwd=tree, env=GIT_ENV)
        timed("git-commit", commit)
    else:
        sh("git", "init", "-q", cwd=tree, env=GIT_ENV)
        sh("git", "add", ".", cwd=tree, env=GIT_ENV)
        sh("git", "commit", "-q", "-m", "tree", cwd=tree, env=GIT_ENV)
    tree_rel = os.path.relpath(tree, fs.mnt)
    many = os.path.join(top, "many")
    os.mkdir(many)
    for i in range(10000):
        open(os.path.join(many, "f%05d" % i), "w").close()
    fs.umount()
    drop_caches()
    fs.mount()
    tree = os.path.join(fs.mnt, tree_rel)
    for w in ("git-status-cold", "git-status-warm"):
        if w in want:
            timed(w, lambda: sh("git", "status", "--porcelain", cwd=tree, env=GIT_ENV))
    fs.umount()
    drop_caches()
    fs.mount()
    if "find" in want:
        timed("find", lambda: sh("find", ".", cwd=tree))
    names = [os.path.join(many, "f%05d" % i) for i in range(10000)]
    for p in names:
        os.lstat(p)
    if "stat-warm-10k" in want:
        timed("stat-warm-10k", lambda: [os.lstat(p) for p in names])
    if "rm-rf" in want:
        timed("rm-rf", lambda: sh("rm", "-rf", tree))
    if "untar-npm" in want and npm:
        timed("untar-npm", lambda: sh("tar", "xf", npm, "-C", top))
    sh("rm", "-rf", top)
    fs.umount()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conf", default="/var/tmp/walkfs-ceph/ceph.conf")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--fs", default="walkfs-coherent,walkfs-loose,ceph-fuse")
    ap.add_argument("--walkfs", default=os.path.join(REPO, "target/release/walkfs"))
    a = ap.parse_args()
    want = [w for w in a.only.split(",") if w] or WORKLOADS
    tar = hostap_tar()
    npm = "/var/tmp/walkfs-bench-workloads/npm-project.tar"
    if not os.path.exists(npm):
        print("ceph-bench: no npm project (walkfs bench workloads --only untar-npm prepares it): untar-npm skipped", file=sys.stderr)
        npm = None
    files = int(subprocess.run(["sh", "-c", f"tar tf {tar} | grep -vc /$"], capture_output=True, text=True).stdout.strip() or 0)
    fss = [Fs(n, a.conf, a.walkfs) for n in a.fs.split(",")]
    samples = {}
    for rep in range(a.reps):
        for fs in fss:
            print(f"ceph-bench: rep {rep + 1}/{a.reps} {fs.name} ...", file=sys.stderr, flush=True)
            for w, (s, calls) in one_rep(fs, rep, want, tar, npm).items():
                samples.setdefault((w, fs.name), []).append((s, calls))
    rows = []
    for (w, f), v in sorted(samples.items()):
        secs = statistics.median(s for s, _ in v)
        calls = [c for _, c in v if c is not None]
        total = statistics.median(sum(c.values()) for c in calls) if calls else None
        row = {"bench": "ceph", "workload": w, "fs": f, "seconds": round(secs, 4), "reps": len(v)}
        if total is not None:
            row["libcephfs_calls"] = int(total)
            row["libcephfs_by_call"] = calls[len(calls) // 2]
            if w in ("untar-hostap", "git-commit", "git-status-cold", "git-status-warm", "find", "rm-rf"):
                row["calls_per_file"] = round(total / max(files, 1), 2)
            if w == "stat-warm-10k":
                row["calls_per_file"] = round(total / 10000, 2)
        rows.append(row)
        print(json.dumps(row))
    names = [fs.name for fs in fss]
    print()
    print("%-16s" % "workload" + "".join("%18s" % n for n in names) + "%22s" % "ceph-fuse/walkfs")
    for w in want:
        secs = {f: statistics.median(s for s, _ in samples[(w, f)]) for f in names if (w, f) in samples}
        line = "%-16s" % w + "".join("%17.3fs" % secs[f] if f in secs else "%18s" % "-" for f in names)
        if "ceph-fuse" in secs and "walkfs-coherent" in secs:
            line += "%21.2fx" % (secs["ceph-fuse"] / secs["walkfs-coherent"])
        print(line)
    print(f"(medians of {a.reps}; hostap tree: {files} files; libcephfs calls per workload in the JSON lines)")


if __name__ == "__main__":
    main()
