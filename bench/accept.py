"""Accept benchmark (issue 15, balanced accept): the latency tail when every request opens a
new connection. 4 proxy threads, wrk -t2 -c200 with `Connection: close`, gzip compression of
the 76 kB corpus page as the per-request work, nginx origin (keep-alive towards it). sluice,
HAProxy 2.6 and, with SLUICE_BASELINE=/path/to/sluice, an earlier sluice build take turns run
by run (same configuration file for every proxy).

Prints per proxy the medians over RUNS runs of: requests/s, requests per proxy CPU-second,
latency p50, p99, max, and the spread (sd/mean, p99/p50) from wrk's --latency output.
Usage: python3 bench/accept.py [seconds] [runs]  (bench/run.sh installs the tools).
"""
import os, re, statistics, subprocess, time

import core
from core import PROXY, SECS, RUNS, BASELINE, start, stop, wait_closed, group_cpu

THREADS = int(os.environ.get("ACCEPT_THREADS", "4"))
FRONTEND = "    compression algo gzip\n    compression type text/html\n"
LAT = re.compile(r"^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)
SUMMARY = re.compile(r"Latency\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)")


def config(name):
    return core.write_config(f"accept-{name}", glob=f"    nbthread {THREADS}\n    maxconn 5000\n",
                             frontend=FRONTEND)


def cmd(kind):
    if kind == "haproxy":
        return ["haproxy", "-db", "-f", config(kind)]
    binary = BASELINE if kind == "sluice-before" else core.SLUICE
    return [binary, "-f", config(kind)]


def wrk(secs):
    out = subprocess.run(["wrk", "-t2", "-c200", f"-d{secs}s", "--latency",
                          "-H", "Connection: close", "-H", "Accept-Encoding: gzip",
                          f"http://127.0.0.1:{PROXY}/page.html"],
                         capture_output=True, text=True, check=True).stdout
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad and int(bad.group(1)) > 0:
        raise SystemExit(f"error responses; results discarded\n{out}")
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    lat = {m.group(1): core.to_ms(m.group(2), m.group(3)) for m in LAT.finditer(out)}
    s = SUMMARY.search(out)
    mean, sd, mx = (core.to_ms(s.group(i), s.group(i + 1)) for i in (1, 3, 5))
    errors = re.search(r"Socket errors: (.*)", out)
    return reqs, lat["50"], lat["99"], mean, sd, mx, errors.group(1) if errors else ""


def run_once(kind):
    p = start(cmd(kind), PROXY)
    wrk(1)  # warm-up
    c0, t0 = group_cpu(p.pid), time.time()
    reqs, p50, p99, mean, sd, mx, errors = wrk(SECS)
    c1, t1 = group_cpu(p.pid), time.time()
    stop(p)
    wait_closed(PROXY)
    return (reqs / (t1 - t0), reqs / max(c1 - c0, 1e-9), p50, p99, mx, sd / mean, p99 / p50), errors


def main():
    # Connections closed at this rate leave TIME_WAIT sockets behind: let new ones reuse them.
    try:
        with open("/proc/sys/net/ipv4/tcp_tw_reuse", "w") as f:
            f.write("1")
    except OSError:
        pass
    kinds = ["sluice", "haproxy"] + (["sluice-before"] if BASELINE else [])
    core.nginx_origin()
    print(f"# Accept benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians, "
          f"interleaved), {THREADS} proxy threads, wrk -t2 -c200, a new connection per request, "
          "gzip of the 76 kB page\n")
    rows = {k: [] for k in kinds}
    for i in range(RUNS):
        for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
            row, errors = run_once(kind)
            rows[kind].append(row)
            if errors:
                print(f"({kind} run {i + 1}: socket errors {errors})")
    print("| proxy | req/s | req per CPU-s | p50 ms | p99 ms | max ms | sd/mean | p99/p50 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in kinds:
        m = [statistics.median(r[j] for r in rows[kind]) for j in range(7)]
        print(f"| {kind} | {m[0]:.0f} | {m[1]:.0f} | {m[2]:.2f} | {m[3]:.2f} | {m[4]:.1f} | "
              f"{m[5]:.2f} | {m[6]:.2f} |", flush=True)


if __name__ == "__main__":
    core.run(main)
