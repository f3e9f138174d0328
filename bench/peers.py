"""Peers benchmark (issue 39): three nodes sharing a rate-limit table over the peers protocol,
sluice against HAProxy 2.6 on the same configuration files, each with and without its `peers`
section.

Each node (nbthread PEERS_NBTHREAD, default 1) tracks `src` in a `stick-table type ip size 1m
expire 60s store http_req_rate(10s)` and answers every request itself (`http-request return`,
no origin). The load is closed-loop keep-alive traffic from 10,000 distinct client addresses
(127.1.0.0 - 127.1.39.15, each connection bound to the next one), CONNS connections spread over
the three nodes, each making REQS requests before the next address takes its place; so every
node keeps changing entries the others must learn.

Reported, medians of R rounds (each round runs the four cases once, in a rotating order):
requests per proxy CPU-second (the three nodes' CPU summed), requests per second, the bytes the
peer connections carried per request (`ss` byte counters of the sessions, both ways), and after
the load the propagation delay p50/p99: a request from a fresh address on node 1, then node 2's
table polled through its CLI (about 0.3 ms a poll) until the entry is there.

Target (the issue's): with peers within 5 % of without, per CPU-second; delay and bytes against
HAProxy's.

Usage: python3 bench/peers.py [seconds] [rounds]  (bench/run.sh installs the tools).
PEERS_CONNS, PEERS_REQS, PEERS_NBTHREAD change the load and the threads.
"""
import os, selectors, socket, statistics, subprocess, sys, time

import core
from core import PROXY, work, start, stop, wait_closed, group_cpu

SECS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
CONNS = int(os.environ.get("PEERS_CONNS", "60"))
REQS = int(os.environ.get("PEERS_REQS", "10"))
THREADS = int(os.environ.get("PEERS_NBTHREAD", "1"))
ADDRS = 10_000
NODES = 3
PEER_BASE = 18100
SAMPLES = 200


def sock_path(i):
    return os.path.join(work, f"peers-{i}.sock")


def cfg(kind, i, peers):
    section = ""
    table_peers = ""
    if peers:
        lines = "".join(f"    peer n{j} 127.0.0.1:{PEER_BASE + j}\n" for j in range(NODES))
        section = f"peers mesh\n{lines}"
        table_peers = " peers mesh"
    text = f"""global
    nbthread {THREADS}
    maxconn 5000
    localpeer n{i}
    stats socket {sock_path(i)} level admin
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
{section}frontend fe
    bind 127.0.0.1:{PROXY + i}
    stick-table type ip size 1m expire 60s store http_req_rate(10s){table_peers}
    http-request track-sc0 src
    http-request return status 200 content-type text/plain string ok
"""
    path = os.path.join(work, f"peers-{kind}-{i}-{int(peers)}.cfg")
    with open(path, "w") as f:
        f.write(text)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def address(n):
    n %= ADDRS
    return f"127.1.{n // 256}.{n % 256}"


def load(secs):
    """Closed-loop keep-alive load over the three nodes; returns requests answered."""
    req = b"GET / HTTP/1.1\r\nHost: b\r\n\r\n"
    sel = selectors.DefaultSelector()
    state = {}
    next_addr = [0]

    def open_one(slot):
        s = socket.socket()
        s.bind((address(next_addr[0]), 0))
        next_addr[0] += 1
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect(("127.0.0.1", PROXY + slot % NODES))
        s.setblocking(False)
        s.send(req)
        state[s] = [slot, 1, b""]
        sel.register(s, selectors.EVENT_READ)

    for slot in range(CONNS):
        open_one(slot)
    done = 0
    end = time.time() + secs
    while time.time() < end:
        for key, _ in sel.select(0.1):
            s = key.fileobj
            st = state[s]
            data = s.recv(65536)
            if not data:
                raise SystemExit("a node closed a connection")
            st[2] += data
            # Each answer is one small head with `content-length: 2` and "ok".
            while b"\r\n\r\nok" in st[2]:
                st[2] = st[2].split(b"\r\n\r\nok", 1)[1]
                done += 1
                if st[1] < REQS:
                    st[1] += 1
                    s.send(req)
                else:
                    sel.unregister(s)
                    del state[s]
                    s.close()
                    open_one(st[0])
                    break
    for s in list(state):
        s.close()
    return done


def peer_bytes():
    """Bytes both ways on the peer sessions (counted at the accepting end of each)."""
    ports = " or ".join(f"sport = :{PEER_BASE + j}" for j in range(NODES))
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( {ports} )"],
                         capture_output=True, text=True).stdout
    total = 0
    for word in out.split():
        if word.startswith(("bytes_acked:", "bytes_received:")):
            total += int(word.split(":")[1])
    return total


def delay_samples(n):
    """Milliseconds from a request on node 0 until node 1's table has its entry."""
    out = []
    for k in range(n):
        ip = f"127.2.{k // 256}.{k % 256}"
        s = socket.socket()
        s.bind((ip, 0))
        s.connect(("127.0.0.1", PROXY))
        t0 = time.perf_counter()
        s.send(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        while s.recv(4096):
            pass
        s.close()
        deadline = t0 + 5
        while time.perf_counter() < deadline:
            if f"key={ip} " in core.cli(sock_path(1), f"show table fe key {ip}"):
                out.append((time.perf_counter() - t0) * 1e3)
                break
    return out


def measure(kind, peers):
    procs = []
    for i in range(NODES):
        if os.path.exists(sock_path(i)):
            os.unlink(sock_path(i))
        procs.append(start(cfg(kind, i, peers), PROXY + i))
    time.sleep(2 if not peers else 6)  # sessions up, the first resync over
    load(1)
    b0, c0, t0 = peer_bytes(), sum(group_cpu(p.pid) for p in procs), time.time()
    done = load(SECS)
    c1, t1, b1 = sum(group_cpu(p.pid) for p in procs), time.time(), peer_bytes()
    delays = sorted(delay_samples(SAMPLES)) if peers else []
    for p in procs:
        stop(p)
    for i in range(NODES):
        wait_closed(PROXY + i)
    wall = t1 - t0
    pct = lambda q: delays[min(len(delays) - 1, int(len(delays) * q / 100))] if delays else float("nan")
    return {"rate": done / wall, "per_cpu": done / max(c1 - c0, 1e-9), "bytes": (b1 - b0) / max(done, 1),
            "p50": pct(50), "p99": pct(99), "seen": len(delays)}


def main():
    if not os.path.exists(core.SLUICE):
        raise SystemExit("build sluice first: cargo build --release -p sluice")
    cases = [("sluice", True), ("sluice", False), ("haproxy", True), ("haproxy", False)]
    rows = {c: [] for c in cases}
    for r in range(RUNS):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        for kind, peers in order:
            row = measure(kind, peers)
            rows[(kind, peers)].append(row)
            print(f"round {r + 1}: {kind:7} {'peers   ' if peers else 'no peers'} {row['rate']:.0f} req/s, "
                  f"{row['per_cpu']:.0f} req/CPU-s, {row['bytes']:.1f} B/req, delay p50 {row['p50']:.2f} ms "
                  f"p99 {row['p99']:.2f} ms ({row['seen']}/{SAMPLES if peers else 0} seen)",
                  file=sys.stderr, flush=True)
    med = lambda case, key: statistics.median(r[key] for r in rows[case])
    print(f"# Peers benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} rounds (medians), three nodes "
          f"(nbthread {THREADS} each), {CONNS} keep-alive connections x {REQS} requests from {ADDRS} client "
          f"addresses, track-sc0 src in a 1m-entry table of http_req_rate(10s)\n")
    print("| proxy | peers | req/s | req per CPU-s | peer bytes per request | delay p50 ms | delay p99 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in ("sluice", "haproxy"):
        for peers in (True, False):
            c = (kind, peers)
            tail = (f"{med(c, 'bytes'):.1f} | {med(c, 'p50'):.2f} | {med(c, 'p99'):.2f}" if peers else "- | - | -")
            print(f"| {kind} | {'yes' if peers else 'no'} | {med(c, 'rate'):.0f} | {med(c, 'per_cpu'):.0f} | {tail} |")
    for kind in ("sluice", "haproxy"):
        ratio = med((kind, True), "per_cpu") / med((kind, False), "per_cpu")
        print(f"\n{kind}, with peers / without, req per CPU-s: {ratio:.3f}x" + (" (target >= 0.95x)" if kind == "sluice" else ""))


if __name__ == "__main__":
    core.run(main)
