"""Service-discovery benchmark (issue 38): a backend of 1,000 template servers fed by SRV
records of which 10 % change every second, beside a steady open-loop load through it, against
the same load through a backend of 1,000 static servers; sluice and HAProxy 2.6 on the same
configuration files, nbthread 8 by default.

The DNS server is this script's own (a thread, UDP on a loopback port): it answers the SRV name
`_http._tcp.bench.test` with SERVERS records (target `h<i>g<gen>.bench.test`, the origin's port,
weight 10) and each target's A record (127.0.0.1) in the additional section, about 50 kB per
answer (both proxies announce `accepted_payload_size 65535`); every second it renames a tenth of
the targets (`gen` moves), so each proxy moves those servers to their new records. Every other
query gets an empty NOERROR.

Reported, medians of R rounds (each round runs the four cases once, in a rotating order):
requests per proxy CPU-second and p50/p99/p99.9 latency of the open-loop load (`checks.openloop`:
request i due at t0 + i/rate, latency from its due time), the proxy's CPU-s per wall second, and
for the DNS-fed case the answers taken per second (`show resolvers`' `valid`) and the CPU per
answer (the difference with the static case over the answers: each answer renames 100 records).
Targets (the issue's): within 3 % of the static list and no worse tail; CPU per update against
HAProxy's.

Usage: python3 bench/resolvers.py [seconds] [rounds]  (bench/run.sh installs the tools).
RESOLVERS_RATE, RESOLVERS_SERVERS and RESOLVERS_NBTHREAD change the load, the servers, nbthread.
"""
import os, socket, statistics, struct, subprocess, sys, time

import core
import checks
from core import ORIGIN, PROXY, work, start, stop, wait_closed, group_cpu

SECS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
RATE = int(os.environ.get("RESOLVERS_RATE", "3000"))
SERVERS = int(os.environ.get("RESOLVERS_SERVERS", "1000"))
THREADS = int(os.environ.get("RESOLVERS_NBTHREAD", "8"))
SETTLE = 4.0   # seconds after start: the servers take their records
WARMUP = 2
SOCK = os.path.join(work, "resolvers.sock")
SRV_NAME = b"_http._tcp.bench.test"


class Dns:
    """The SRV name's records, a tenth of them renamed every second (run in a process of
    its own: `resolvers.py --dns`, so that building answers never holds up the load
    generator)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.gen = [0] * SERVERS
        self.moved = 0

    def run(self):
        last = time.time()
        while True:
            if time.time() - last >= 1.0:
                last += 1.0
                for _ in range(SERVERS // 10):
                    i = self.moved % SERVERS
                    self.gen[i] += 1
                    self.moved += 1
            try:
                q, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            if len(q) >= 12:
                self.sock.sendto(self.answer(q), peer)

    def answer(self, q):
        qid = q[:2]
        # The question as asked: name labels up to the zero byte, then type and class.
        end = q.index(b"\x00", 12) + 5
        question = q[12:end]
        qtype = struct.unpack(">H", q[end - 4:end - 2])[0]
        asked = self.labels(q[12:end - 4])
        if qtype != 33 or asked.lower() != SRV_NAME:
            return qid + b"\x84\x00\x00\x01\x00\x00\x00\x00\x00\x00" + question
        # "bench.test" inside the question: offset of its first label (after _http and _tcp).
        bench = 12 + 1 + 5 + 1 + 4
        ptr = struct.pack(">H", 0xC000 | bench)
        answers, extra = [], []
        for i in range(SERVERS):
            label = f"h{i}g{self.gen[i]}".encode()
            target = bytes([len(label)]) + label + ptr
            rdata = struct.pack(">HHH", 0, 10, ORIGIN) + target
            answers.append(b"\xc0\x0c" + struct.pack(">HHIH", 33, 1, 0, len(rdata)) + rdata)
            extra.append(target + struct.pack(">HHIH", 1, 1, 0, 4) + bytes([127, 0, 0, 1]))
        head = qid + struct.pack(">HHHHH", 0x8400, 1, SERVERS, 0, SERVERS)
        return head + question + b"".join(answers) + b"".join(extra)

    @staticmethod
    def labels(wire):
        out, i = [], 0
        while i < len(wire) and wire[i]:
            n = wire[i]
            out.append(wire[i + 1:i + 1 + n])
            i += 1 + n
        return b".".join(out)


def cfg(kind, dns_port, dynamic):
    """One HAProxy-syntax file for both proxies: the traffic backend is the template fed by
    the SRV records, or 1,000 static servers."""
    if dynamic:
        backend = f"    server-template s {SERVERS} _http._tcp.bench.test resolvers dns init-addr none\n"
    else:
        backend = "".join(f"    server s{i} 127.0.0.1:{ORIGIN}\n" for i in range(SERVERS))
    extra = (f"resolvers dns\n    nameserver ns1 127.0.0.1:{dns_port}\n    accepted_payload_size 65535\n"
             "    hold valid 1s\n    timeout resolve 1s\n    timeout retry 1s\n")
    path = core.write_config(
        f"{kind}-{'srv' if dynamic else 'static'}",
        glob=f"    nbthread {THREADS}\n    maxconn 5000\n    stats socket {SOCK} level admin\n",
        backend=backend,
        extra=extra)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def answers():
    """Valid answers taken (`valid`, summed over the section's nameservers, `show resolvers`):
    each one renames a tenth of the servers' records."""
    out = core.cli(SOCK, "show resolvers")
    return sum(int(l.split(":")[1]) for l in out.splitlines() if l.strip().startswith("valid:"))


def up_servers():
    csv = core.cli(SOCK, "show stat")
    header = csv.splitlines()[0].lstrip("# ").split(",")
    col = header.index("status")
    return sum(1 for l in csv.splitlines()[1:]
               if l.startswith("be,s") and l.split(",")[col] in ("UP", "no check"))


def measure(kind, dns, dynamic):
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    p = start(cfg(kind, dns.port, dynamic), PROXY)
    time.sleep(SETTLE)
    servers = up_servers()
    checks.openloop(RATE, WARMUP)
    u0, c0, t0 = (answers() if dynamic else 0), group_cpu(p.pid), time.time()
    lat, late, achieved = checks.openloop(RATE, SECS)
    c1, t1 = group_cpu(p.pid), time.time()
    u1 = answers() if dynamic else 0
    stop(p)
    wait_closed(PROXY)
    wall = t1 - t0
    lat.sort()
    return {"cpu_rate": (c1 - c0) / wall, "achieved": achieved, "per_cpu": achieved * wall / max(c1 - c0, 1e-9),
            "p50": checks.pct(lat, 50), "p99": checks.pct(lat, 99), "p999": checks.pct(lat, 99.9),
            "answers": (u1 - u0) / wall, "servers": servers}


def main():
    if not os.path.exists(core.SLUICE):
        raise SystemExit("build sluice first: cargo build --release -p sluice")
    o = checks.origin()
    dns = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--dns"], stdout=subprocess.PIPE, text=True)
    dns.port = int(dns.stdout.readline())
    cases = [("sluice", True), ("sluice", False), ("haproxy", True), ("haproxy", False)]
    rows = {c: [] for c in cases}
    for r in range(RUNS):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        for kind, dynamic in order:
            row = measure(kind, dns, dynamic)
            rows[(kind, dynamic)].append(row)
            print(f"round {r + 1}: {kind:7} {'srv   ' if dynamic else 'static'} {row['servers']} servers up, "
                  f"{row['achieved']:.0f} req/s, {row['per_cpu']:.0f} req/CPU-s, cpu {row['cpu_rate']:.3f} s/s, "
                  f"answers {row['answers']:.2f}/s, p99.9 {row['p999']:.3f} ms", file=sys.stderr, flush=True)
    dns.kill()
    dns.wait()
    stop(o)
    med = lambda case, key: statistics.median(r[key] for r in rows[case])
    print(f"# Service-discovery benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} rounds (medians), "
          f"{SERVERS} template servers fed by SRV records, 10 % renamed every second, nbthread {THREADS}, "
          f"open-loop load {RATE} req/s, nginx origin\n")
    print("| proxy | servers | servers up | req per CPU-s | CPU-s/s | p50 ms | p99 ms | p99.9 ms | answers/s | CPU ms per answer |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in ("sluice", "haproxy"):
        for dynamic in (True, False):
            c = (kind, dynamic)
            per_update = ""
            if dynamic:
                extra = [(a["cpu_rate"] - b["cpu_rate"]) / a["answers"] * 1e3
                         for a, b in zip(rows[c], rows[(kind, False)]) if a["answers"] > 0]
                per_update = f"{statistics.median(extra):.1f}" if extra else "-"
            print(f"| {kind} | {'SRV template' if dynamic else 'static'} | {med(c, 'servers'):.0f} | "
                  f"{med(c, 'per_cpu'):.0f} | {med(c, 'cpu_rate'):.3f} | {med(c, 'p50'):.3f} | {med(c, 'p99'):.3f} | "
                  f"{med(c, 'p999'):.3f} | {med(c, 'answers'):.2f} | {per_update} |")
    s = med(("sluice", True), "per_cpu") / med(("sluice", False), "per_cpu")
    print(f"\nsluice, SRV-fed / static list, req per CPU-s: {s:.3f}x (target >= 0.97x)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--dns"]:
        os.rmdir(work)  # (core's, made at import: this process has no use for it)
        server = Dns()
        print(server.port, flush=True)
        server.run()
    try:
        main()
    finally:
        core.cleanup()
