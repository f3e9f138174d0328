"""Idle-pool benchmark (issue 4): four fast servers (one nginx answering `return 200` on four
ports), 400 keep-alive clients through wrk, sluice and HAProxy 2.6 at nbthread 2, 4 and 8 (more
workers than this machine's 2 cores reproduces the scheduling jitter of capabilities.md §1),
pool-low-conn 0, 2 x nbthread and 32. Reports requests/s, requests per proxy CPU-second,
takeovers per request and new server connections per second (from each proxy's stats socket),
and server connections open at the end. Usage: python3 bench/pools.py [seconds] [runs]
"""
import os, re, socket, statistics, subprocess, time

import core
from core import PROXY, SECS, RUNS, work, start, stop, wait_closed, group_cpu

PORTS = [19001, 19002, 19003, 19004]
SOCK = os.path.join(work, "stats.sock")


# POOLS_DELAY_MS=1: the servers answer after ~1 ms (nginx echo module) instead of at once.
DELAY_MS = float(os.environ.get("POOLS_DELAY_MS", "0"))


def origin():
    conf = os.path.join(work, "servers.conf")
    answer = f'echo_sleep {DELAY_MS / 1000}; echo "ok";' if DELAY_MS else 'return 200 "ok\\n";'
    listens = "\n".join(f"  server {{ listen 127.0.0.1:{p} backlog=4096; location / {{ {answer} }} }}" for p in PORTS)
    module = "load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;" if DELAY_MS else ""
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/servers.pid; {module}
error_log {work}/servers.err; events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
{listens}
}}
""")
    return start(["nginx", "-c", conf, "-p", work], PORTS[0])


def cfg(kind, threads, low):
    servers = "".join(f"    server s{i} 127.0.0.1:{p} pool-low-conn {low}\n" for i, p in enumerate(PORTS))
    path = core.write_config(
        kind,
        glob=f"    nbthread {threads}\n    maxconn 4000\n    stats socket {SOCK} level admin\n",
        backend="    balance roundrobin\n" + servers)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def cli(cmd):
    return core.cli(SOCK, cmd)


def takeovers():
    m = re.search(r"^fd_takeover:\s*(\d+)", cli("show activity"), re.M)
    return int(m.group(1)) if m else 0


def connects():
    lines = cli("show stat").splitlines()
    header = lines[0].lstrip("# ").split(",")
    col = header.index("connect")
    total = 0
    for l in lines[1:]:
        f = l.split(",")
        if len(f) > col and f[1] not in ("FRONTEND", "BACKEND") and f[col].isdigit():
            total += int(f[col])
    return total


def server_conns():
    out = subprocess.run(["ss", "-Htn", "state", "established"], capture_output=True, text=True).stdout
    return sum(1 for l in out.splitlines() if any(f"127.0.0.1:{p} " in l.split()[-1] + " " for p in PORTS))


def wrk(secs):
    out = subprocess.run(["wrk", "-t1", "-c400", f"-d{secs}s", f"http://127.0.0.1:{PROXY}/"],
                         capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"error responses\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))


def measure(kind, threads, low):
    p = start(cfg(kind, threads, low), PROXY)
    wrk(1)
    rows = []
    for _ in range(RUNS):
        t0, c0, k0, n0 = time.time(), group_cpu(p.pid), takeovers(), connects()
        reqs = wrk(SECS)
        t1, c1, k1, n1 = time.time(), group_cpu(p.pid), takeovers(), connects()
        el = t1 - t0
        rows.append((reqs / el, reqs / max(c1 - c0, 1e-9), 100.0 * (k1 - k0) / max(reqs, 1), (n1 - n0) / el))
    open_end = server_conns()
    stop(p)
    wait_closed(PROXY)
    return [statistics.median(r[i] for r in rows) for i in range(4)] + [open_end]


def main():
    o = origin()
    when = f"after ~{DELAY_MS:g} ms" if DELAY_MS else "at once"
    print(f"# Idle-pool benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians), wrk -t1 -c400, 4 servers answering {when}\n")
    print("| nbthread | pool-low-conn | proxy | req/s | req per CPU-s | takeovers % of requests | new server conn/s | server conns open at end |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for threads in (2, 4, 8):
        for low in (0, 2 * threads, 32):
            for kind in ("sluice", "haproxy"):
                rps, rpc, tk, nc, open_end = measure(kind, threads, low)
                print(f"| {threads} | {low} | {kind} | {rps:.0f} | {rpc:.0f} | {tk:.2f} | {nc:.1f} | {open_end} |", flush=True)
    stop(o)


if __name__ == "__main__":
    core.run(main)
