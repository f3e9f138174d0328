"""Memory held for HTTP/2 clients that do not read (issue 36): sluice vs HAProxy 2.6.

CONNS cleartext HTTP/2 connections (`bind ... proto h2`, prior knowledge; 1 proxy worker)
each open STREAMS streams for the 76 kB page of the nginx origin, with their flow-control
windows opened to 2 GB, then never read their sockets: whatever the proxy takes from the
origin for them, it has to hold. Reported: the proxy group's resident memory above its
start once it stops moving, per connection, medians of RUNS runs with the contenders in
turns; for sluice also `show activity`'s `h2_queued` (what its send budget counts).
With SLUICE_BASELINE, that build is a contender too.
Usage: python3 bench/h2memory.py [runs]  (CONNS, STREAMS change the load).
"""
import os, socket, statistics, struct, sys, time

import core
from core import PROXY, ORIGIN, BASELINE, SLUICE, start, stop, wait_closed, work

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3
CONNS = int(os.environ.get("CONNS", "20"))
STREAMS = int(os.environ.get("STREAMS", "100"))


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack(fields):
    """Literal fields without indexing, no Huffman coding (every length under 127)."""
    out = b""
    for n, v in fields:
        out += b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v
    return out


def opening():
    """Preface, SETTINGS with the largest stream window, the connection's window as wide,
    then STREAMS requests."""
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    out += frame(4, 0, 0, struct.pack(">HI", 4, 0x7FFFFFFF))
    out += frame(8, 0, 0, struct.pack(">I", 0x7FFFFFFF - 65535))
    head = hpack([(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/page.html"),
                  (b":authority", b"bench.test")])
    for i in range(STREAMS):
        out += frame(1, 0x5, 1 + 2 * i, head)  # END_HEADERS | END_STREAM
    return out


def config(name):
    path = os.path.join(work, f"{name}-h2mem.cfg")
    sock = os.path.join(work, f"{name}-h2mem.sock")
    with open(path, "w") as f:
        f.write(f"""global
    nbthread 1
    maxconn 5000
    stats socket {sock}
{core.sluice_global() if name == "sluice" else ""}defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend fe
    bind 127.0.0.1:{PROXY} proto h2
    default_backend be
backend be
    server s1 127.0.0.1:{ORIGIN}
""")
    return path, sock


def settle(pgid, secs):
    """The group's RSS once it has stopped moving for a second (or after `secs`)."""
    end, last, since = time.time() + secs, None, time.time()
    while time.time() < end:
        now = core.group_status_kib(pgid, "VmRSS")
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= 1.0:
            return now
        time.sleep(0.2)
    return core.group_status_kib(pgid, "VmRSS")


def queued(sock):
    for line in core.cli(sock, "show activity").splitlines():
        if line.startswith("h2_queued: "):
            return int(line.split()[1])
    return None


def once(name, binary):
    path, sock = config(name)
    cmd = ["haproxy", "-db", "-f", path] if binary == "haproxy" else [binary, "-f", path]
    p = start(cmd, PROXY)
    before = settle(p.pid, 3)
    conns = []
    for _ in range(CONNS):
        s = socket.socket()
        # A small receive buffer: what the client does not read stays with the proxy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", PROXY))
        s.sendall(opening())
        conns.append(s)
    held = settle(p.pid, 20)
    q = queued(sock) if binary != "haproxy" else None
    for s in conns:
        s.close()
    stop(p)
    wait_closed(PROXY)
    return (held - before) / CONNS, q


def main():
    origin = core.nginx_origin()
    contenders = [("sluice", SLUICE)]
    if BASELINE:
        contenders.append(("sluice before", BASELINE))
    contenders.append(("haproxy", "haproxy"))
    got = {name: [] for name, _ in contenders}
    for i in range(RUNS):
        order = contenders[i % len(contenders):] + contenders[:i % len(contenders)]
        for name, binary in order:
            got[name].append(once(name.replace(" ", "-"), binary))
    print(f"# memory held for HTTP/2 clients that do not read, {time.strftime('%Y-%m-%d')}: "
          f"{CONNS} connections x {STREAMS} streams of the 76 kB page, windows opened to 2 GB, "
          f"nothing read; 1 worker, medians of {RUNS} runs\n")
    print("| proxy | KiB held per connection | h2_queued (bytes, all connections) |")
    print("| --- | ---: | ---: |")
    for name, rows in got.items():
        per = statistics.median(r[0] for r in rows)
        qs = [r[1] for r in rows if r[1] is not None]
        q = f"{statistics.median(qs):.0f}" if qs else "-"
        print(f"| {name} | {per:.0f} | {q} |")
    s = statistics.median(r[0] for r in got["sluice"])
    h = statistics.median(r[0] for r in got["haproxy"])
    print(f"\nsluice / HAProxy, KiB held per connection: {s / h:.2f}x")
    stop(origin)


if __name__ == "__main__":
    core.run(main)
