"""Time to render the statistics of 1,000 servers: `show stat` on the stats socket, the stats
page (HTML) and its CSV form, and the Prometheus exporter, for sluice and HAProxy 2.6 on the
same configuration (one frontend, one backend of SERVERS servers, no checks, no traffic).
Each figure is the median wall time of ROUNDS fetches, one connection per fetch, measured by
this client from sending the request to the last byte; the size of the answer is reported too.

Usage: python3 bench/statsrender.py [rounds]   (bench/run.sh installs HAProxy)
STATS_SERVERS changes the number of servers.
"""
import os, socket, statistics, sys, time

import core
from core import PROXY, work, start, stop, wait_closed

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 20
SERVERS = int(os.environ.get("STATS_SERVERS", "1000"))
SOCK = os.path.join(work, "statsrender.sock")


def cfg(kind):
    path = core.write_config(
        f"statsrender-{kind}",
        glob=f"    stats socket {SOCK} level admin\n",
        frontend="    stats enable\n    stats uri /stats\n"
                 "    http-request use-service prometheus-exporter if { path /metrics }\n",
        backend="".join(f"    server s{i} 127.0.0.1:{20000 + i % 1000}\n" for i in range(SERVERS)))
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def fetch_unix(cmd):
    s = socket.socket(socket.AF_UNIX)
    s.connect(SOCK)
    t = time.perf_counter()
    s.sendall(cmd.encode() + b"\n")
    n = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        n += len(b)
    s.close()
    return time.perf_counter() - t, n


def fetch_http(path):
    s = socket.create_connection(("127.0.0.1", PROXY))
    t = time.perf_counter()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n".encode())
    n = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        n += len(b)
    s.close()
    return time.perf_counter() - t, n


def main():
    what = [("show stat", lambda: fetch_unix("show stat")),
            ("stats page (HTML)", lambda: fetch_http("/stats")),
            ("stats page ;csv", lambda: fetch_http("/stats;csv")),
            ("Prometheus /metrics", lambda: fetch_http("/metrics"))]
    print(f"# Statistics render time, {SERVERS} servers, median of {ROUNDS} fetches (ms) and answer size\n")
    print("| what | sluice ms | sluice bytes | haproxy ms | haproxy bytes | sluice / haproxy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    results = {}
    for kind in ("sluice", "haproxy"):
        p = start(cfg(kind), PROXY)
        time.sleep(1)
        for name, f in what:
            f()  # warm-up
            runs = [f() for _ in range(ROUNDS)]
            results[(kind, name)] = (statistics.median(r[0] for r in runs) * 1000, runs[-1][1])
        stop(p)
        wait_closed(PROXY)
    for name, _ in what:
        s, h = results[("sluice", name)], results[("haproxy", name)]
        print(f"| {name} | {s[0]:.2f} | {s[1]} | {h[0]:.2f} | {h[1]} | {s[0] / h[0]:.2f}x |")


if __name__ == "__main__":
    main()
