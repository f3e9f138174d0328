"""Cache benchmark (issue 34): hits served from the small object cache per proxy
CPU-second, sluice and HAProxy 2.6 side by side on the same configuration, 2 proxy threads,
wrk -t2 -c64 keep-alive, nginx as the origin (its static files carry ETag and Last-Modified,
so both caches store them for their max-age). Objects: hello.txt (13 B) and page.html
(python-tutorial-errors.html, 76 kB, within max-object-size). The cache is warmed by one
request before each measured run; after it, the backend's `cache_lookups` and `cache_hits`
(`show stat`) must differ by that one miss: every measured request was a hit.
Usage: python3 bench/cache.py [seconds] [runs]  (BENCH=cache bench/run.sh installs the tools).
"""
import os, re, statistics, subprocess, time, urllib.request

import core
from core import PROXY, SECS, RUNS, start, stop, wait_closed, group_cpu

CACHE = ("    http-request cache-use c1\n    http-response cache-store c1\n"
         f"    server s1 127.0.0.1:{core.ORIGIN}\n")
EXTRA = "cache c1\n    total-max-size 64\n    max-object-size 1000000\n    max-age 240\n"
OBJECTS = {"13 B": "/hello.txt", "76 kB": "/page.html"}


def sock(kind):
    return os.path.join(core.work, f"{kind}-cache.sock")


def cmd(kind):
    glob = f"    nbthread 2\n    maxconn 5000\n    stats socket {sock(kind)} level admin\n"
    path = core.write_config(f"{kind}-cache", glob=glob, backend=CACHE, extra=EXTRA)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def all_hits(kind):
    """Whether every request but the first was a hit (the backend's lookups and hits)."""
    lines = core.cli(sock(kind), "show stat").splitlines()
    names = lines[0].lstrip("# ").split(",")
    row = next(l.split(",") for l in lines if l.startswith("be,BACKEND,"))
    lookups, hits = (int(row[names.index(n)]) for n in ("cache_lookups", "cache_hits"))
    return lookups > 1 and lookups - hits == 1


def wrk(path, secs):
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{secs}s", f"http://127.0.0.1:{PROXY}{path}"],
                         capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"error responses\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))


def run_once(kind, path):
    p = start(cmd(kind), PROXY)
    with urllib.request.urlopen(f"http://127.0.0.1:{PROXY}{path}") as r:
        r.read()
    wrk(path, 1)
    c0, t0 = group_cpu(p.pid), time.time()
    reqs = wrk(path, SECS)
    c1, t1 = group_cpu(p.pid), time.time()
    if not all_hits(kind):
        raise SystemExit(f"{kind}: requests that were not cache hits")
    stop(p)
    wait_closed(PROXY)
    return reqs / (t1 - t0), reqs / max(c1 - c0, 1e-9)


def main():
    origin = core.nginx_origin()
    print(f"# Cache benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians, "
          "interleaved), wrk -t2 -c64 keep-alive, 2 proxy threads, every request a hit\n")
    print("| object | proxy | hits/s | hits per proxy CPU-s |")
    print("| --- | --- | ---: | ---: |")
    res = {}
    for name, path in OBJECTS.items():
        rows = {"sluice": [], "haproxy": []}
        for i in range(RUNS):
            order = ["sluice", "haproxy"] if i % 2 == 0 else ["haproxy", "sluice"]
            for kind in order:
                rows[kind].append(run_once(kind, path))
        for kind in ("sluice", "haproxy"):
            m = [statistics.median(r[j] for r in rows[kind]) for j in range(2)]
            res[(name, kind)] = m
            print(f"| {name} | {kind} | {m[0]:.0f} | {m[1]:.0f} |", flush=True)
    print()
    for name in OBJECTS:
        s, h = res[(name, "sluice")], res[(name, "haproxy")]
        print(f"{name}: sluice/haproxy hits/s {s[0]/h[0]:.2f}x, hits per CPU-s {s[1]/h[1]:.2f}x")
    stop(origin)


if __name__ == "__main__":
    core.run(main)
