"""Memory per connection: sluice vs HAProxy vs nginx holding many half-open client
connections (issue 15's measure), see bench/run.sh.

Each proxy (2 workers, the same HAProxy-syntax configuration for sluice and HAProxy) is
started alone; then CONNS client connections each send half a request head and wait.
Reported, from the resident memory (VmRSS) of every process of the proxy's process group:
KiB per connection while they are open, and how far above its start the proxy stays 3 s
after they all closed. Medians of RUNS runs, contenders in turns. With SLUICE_BASELINE, that
build is a fourth contender. CONNS (default 3000) sets the connection count.
Usage: python3 bench/memory.py [runs]  (bench/run.sh installs the tools).
"""
import os, resource, socket, statistics, sys, time

import core
from core import PROXY, BASELINE, start, stop, wait_closed

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3
CONNS = int(os.environ.get("CONNS", "3000"))
HALF_HEAD = b"GET /hello.txt HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: half"


def group_rss_kib(pgid):
    return core.group_status_kib(pgid, "VmRSS")


def settle(pgid, secs):
    """The group's RSS once it has stopped moving (or after `secs`)."""
    end, last = time.time() + secs, None
    while time.time() < end:
        now = group_rss_kib(pgid)
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    return group_rss_kib(pgid)


def once(cmd):
    p = start(cmd, PROXY)
    # Every worker has started and served once before the first reading.
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", PROXY))
        s.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n")
        while s.recv(65536):
            pass
        s.close()
    before = settle(p.pid, 3)
    conns = []
    for _ in range(CONNS):
        s = socket.create_connection(("127.0.0.1", PROXY))
        s.sendall(HALF_HEAD)
        conns.append(s)
    held = settle(p.pid, 5)
    for s in conns:
        s.close()
    time.sleep(3)
    after = group_rss_kib(p.pid)
    stop(p)
    wait_closed(PROXY)
    return (held - before) / CONNS, (after - before) / 1024


def main():
    need = CONNS + 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))
    origin = core.nginx_origin()
    contenders = [("sluice", core.sluice_cmd(2))]
    if BASELINE:
        contenders.append(("sluice-before", core.sluice_cmd(2, BASELINE)))
    contenders += [("haproxy", core.haproxy_cmd(2)), ("nginx", core.nginx_cmd(2))]
    got = {name: [] for name, _ in contenders}
    for _ in range(RUNS):
        for name, cmd in contenders:
            got[name].append(once(cmd))
    print(f"# memory per connection, {time.strftime('%Y-%m-%d')}: {CONNS} half-open HTTP/1.1 "
          f"connections (half a request head each), 2 workers, medians of {RUNS} runs\n")
    print("| proxy | KiB per half-open connection | RSS 3 s after they closed vs start |")
    print("| --- | ---: | ---: |")
    for name, rows in got.items():
        per = statistics.median(r[0] for r in rows)
        after = statistics.median(r[1] for r in rows)
        print(f"| {name} | {per:.1f} | {after:+.1f} MB |")
    h = statistics.median(r[0] for r in got["haproxy"])
    s = statistics.median(r[0] for r in got["sluice"])
    print(f"\nsluice / HAProxy, KiB per connection: {s / h:.2f}x")
    stop(origin)


if __name__ == "__main__":
    core.run(main)
