"""HTTP/2 towards servers: HTTP/1.1 clients (wrk -t2 -c64, keep-alive, a 13-byte file) through
sluice and HAProxy, one worker each, to one nginx origin that speaks only HTTP/2 in clear
(`listen ... http2`, prior knowledge), both proxies with `server ... proto h2`: every request
becomes a stream on the proxy's HTTP/2 connection to the origin. An HTTP/1.1 request to that
origin fails, so a run without errors is a run in HTTP/2. Medians of RUNS interleaved runs;
prints requests/s and requests per proxy CPU-second.
A second load has HTTP/2 clients end to end (h2 -> h2, the gRPC-style path): h2load -c8
-m100 -t1 in clear with prior knowledge to a `bind ... proto h2`, same origin.
Usage: python3 bench/h2server.py [seconds] [runs]  (bench/run.sh installs the tools).
SLUICE_BASELINE=/path/to/sluice adds an earlier build; BENCH_ONLY=h1|h2 runs one load."""
import os, re, statistics, subprocess, time

import core
from core import PROXY, SECS, RUNS, work, start, stop, wait_closed, group_cpu

H2_ORIGIN = 18082


def h2_origin():
    root = os.path.join(work, "www-h2")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "hello.txt"), "w") as f:
        f.write("Hello, world\n")
    conf = os.path.join(work, "h2-origin.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/h2-origin.pid;
error_log {work}/h2-origin.err; events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s; http2_max_requests 1000000;
  server {{ listen 127.0.0.1:{H2_ORIGIN} http2 backlog=4096; root {root}; }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], H2_ORIGIN)


def wrk(secs):
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{secs}s", f"http://127.0.0.1:{PROXY}/hello.txt"],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"errors through the proxy\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))


def h2load(secs):
    return core.h2load(f"http://127.0.0.1:{PROXY}/hello.txt", secs, "h2c")


LOADS = {
    "h1": ("HTTP/1.1 clients (wrk -t2 -c64 keep-alive)", wrk),
    "h2": ("HTTP/2 clients (h2load -c8 -m100, h2c prior knowledge)", h2load),
}


def main():
    o = h2_origin()
    only = os.environ.get("BENCH_ONLY")
    print(f"# HTTP/2 towards servers, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians, "
          "interleaved), 1 proxy worker, nginx h2c origin, 13 B\n")
    print("| clients | proxy | req/s | req per CPU-s |")
    print("| --- | --- | ---: | ---: |")
    for load, (what, run) in LOADS.items():
        if only and load != only:
            continue
        cfg = core.write_config(f"h2server-{load}", glob="    nbthread 1\n",
                                backend=f"    server s1 127.0.0.1:{H2_ORIGIN} proto h2\n")
        if load == "h2":
            text = open(cfg).read().replace(f"bind 127.0.0.1:{PROXY}", f"bind 127.0.0.1:{PROXY} proto h2")
            with open(cfg, "w") as f:
                f.write(text)
        cmds = {"sluice": [core.SLUICE, "-f", cfg], "haproxy": ["haproxy", "-db", "-f", cfg]}
        if core.BASELINE:
            cmds["sluice before"] = [core.BASELINE, "-f", cfg]
        rows = {k: [] for k in cmds}
        for i in range(RUNS):
            order = list(cmds)[i % len(cmds):] + list(cmds)[:i % len(cmds)]
            for k in order:
                p = start(cmds[k], PROXY)
                run(1)
                c0, t0 = group_cpu(p.pid), time.time()
                n = run(SECS)
                c1, t1 = group_cpu(p.pid), time.time()
                stop(p)
                wait_closed(PROXY)
                rows[k].append((n / (t1 - t0), n / max(c1 - c0, 1e-9)))
        for k, r in rows.items():
            print(f"| {what} | {k} | {statistics.median(x[0] for x in r):.0f} | "
                  f"{statistics.median(x[1] for x in r):.0f} |", flush=True)
    stop(o)


if __name__ == "__main__":
    core.run(main)
