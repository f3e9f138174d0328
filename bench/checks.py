"""Health-check benchmark: 1,000 servers checked every second (`option httpchk GET /health`,
`check inter 1s rise 2 fall 3`, `timeout check 1s`, nbthread 8) beside a frontend loaded at a
steady open-loop rate (~3,000 requests/s of a 13-byte file through a separate backend); sluice
and HAProxy 2.6 on the same configuration file, each also without the checking backend under the
same load. Reported, medians of R rounds (each round runs the four cases once, in a rotating
order): proxy CPU seconds per check performed, p50/p99/p99.9 latency with and without checks,
the achieved request rate, and sluice's per-worker checks_run / checks_moved / checks_queued.

CPU per check = (proxy CPU-s per wall second with checks - without) / checks per wall second,
per round, from utime+stime of the proxy's processes (/proc). Checks performed are counted at
the origin (nginx logs every /health request it answers) for both proxies, and for sluice also
from `show activity` (`checks_run`) on its stats socket. Each start also has an unloaded window
(IDLE seconds, checks alone) from which the same figure is computed without any traffic: the
loaded figure is the difference of two larger numbers, the unloaded one a cross-check of it.

The load generator is open-loop (nginx's wrk is closed-loop): request i is due at t0 + i/rate,
is sent on any idle keep-alive connection (CONNS of them) as soon as it is due, and its latency
runs from its due time to its response, so a stall of the proxy counts for every request it
delays (no coordinated omission). How late the generator itself sent (its own floor) is
reported too (this machine's scheduling alone reaches ~1-4 ms at p99.9): it runs at nice -10 while
it sends, when allowed, the proxies and the origin at 0.
Usage: python3 bench/checks.py [seconds] [rounds]  (bench/run.sh installs the tools).
CHECKS_RATE, CHECKS_SERVERS and CHECKS_NBTHREAD change the load, the checked servers, nbthread.
"""
import gc, os, re, select, socket, statistics, subprocess, sys, time
from collections import deque

import core
from core import ORIGIN, PROXY, work, start, stop, wait_closed, group_cpu

SECS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 20
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
RATE = int(os.environ.get("CHECKS_RATE", "3000"))       # offered requests/s
SERVERS = int(os.environ.get("CHECKS_SERVERS", "1000"))  # checked servers
THREADS = int(os.environ.get("CHECKS_NBTHREAD", "8"))
CONNS = 32          # keep-alive connections of the load generator
SETTLE = 3.0        # seconds after start before the warm-up load: the first checks spread over 1 s
IDLE = 5            # seconds measured with no load (checks alone), after SETTLE
WARMUP = 2          # seconds of load before the measured window
SOCK = os.path.join(work, "stats.sock")
CHECKLOG = os.path.join(work, "checks.log")


def origin():
    """nginx answering the small file to the traffic backend and 200 to /health, the latter
    logged (one line per check it answered) so that checks can be counted for either proxy."""
    root = os.path.join(work, "www")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(core.CORPUS, "hello.txt"), "rb") as src, open(os.path.join(root, "hello.txt"), "wb") as dst:
        dst.write(src.read())
    conf = os.path.join(work, "checks-origin.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/checks-origin.pid;
error_log {work}/checks-origin.err; events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  log_format chk '$status "$request"';
  server {{ listen 127.0.0.1:{ORIGIN} backlog=8192; root {root};
    location = /health {{ access_log {CHECKLOG} chk; return 200 "ok\\n"; }} }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], ORIGIN)


def cfg(kind, checks):
    """One HAProxy-syntax file for both proxies; `checks` adds the 1,000-server checked backend."""
    extra = ""
    if checks:
        extra = "backend checked\n    option httpchk GET /health\n" + "".join(
            f"    server c{i} 127.0.0.1:{ORIGIN} check inter 1s rise 2 fall 3\n" for i in range(SERVERS))
    path = core.write_config(
        f"{kind}-{'checks' if checks else 'nochecks'}",
        glob=f"    nbthread {THREADS}\n    maxconn 5000\n    stats socket {SOCK} level admin\n",
        defaults="    timeout check 1s\n",
        extra=extra)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def cli(cmd):
    return core.cli(SOCK, cmd)


ACTIVITY = ("checks_run", "checks_moved", "checks_queued", "accepted", "accq_pushed", "adopted", "requests")


def activity():
    """sluice's per-worker counters from `show activity`: name -> [per worker]."""
    out, rows = cli("show activity"), {}
    for name in ACTIVITY:
        m = re.search(rf"^{name}:\s*(\d+)\s*\[([\d ]*)\]", out, re.M)
        if not m:
            raise SystemExit(f"no {name} in show activity:\n{out}")
        rows[name] = [int(x) for x in m.group(2).split()]
    return rows


def check_failures():
    """Sum of `chkfail` over the checked servers, from `show stat` (both proxies have it)."""
    lines = cli("show stat").splitlines()
    header = lines[0].lstrip("# ").split(",")
    col = header.index("chkfail")
    total = 0
    for l in lines[1:]:
        f = l.split(",")
        if len(f) > col and f[0] == "checked" and f[1] not in ("FRONTEND", "BACKEND") and f[col].isdigit():
            total += int(f[col])
    return total


def origin_checks():
    """(checks answered so far, of which not 200, distinct request lines) from nginx's log."""
    try:
        with open(CHECKLOG) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0, 0, set()
    return len(lines), sum(1 for l in lines if not l.startswith("200 ")), {l.split(" ", 1)[1] for l in lines[-50:]}


CL = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)


def openloop(rate, secs, conns=CONNS, path="/hello.txt"):
    """Sends rate*secs requests, request i due at t0 + i/rate, each on any idle keep-alive
    connection (oldest idle first). Returns (latencies from due time, send lateness) in ms and
    the achieved rate (responses / time from t0 to the last response). One thread, select()
    for its microsecond timeout (epoll's is in milliseconds)."""
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", PROXY), 2)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks.append(s)
    idx = {s: i for i, s in enumerate(socks)}
    idle = deque(range(conns))
    due_at = [0.0] * conns           # due time of the request in flight on each connection
    bufs = [bytearray() for _ in range(conns)]
    busy = []                        # sockets with a request in flight
    total = int(rate * secs)
    lat, late = [], []
    try:  # the generator's own timing is the reference: let it preempt the proxies' threads
        prio = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        prio = None
    queued = deque()                 # due times of requests due but not yet sent
    nxt, done, bad = 0, 0, 0
    gc.disable()                     # no collector pause inside the measured window
    try:
        t0 = time.perf_counter() + 0.02
        stop_at = t0 + secs + 10     # at most 10 s of draining past the schedule
        while done < total:
            now = time.perf_counter()
            if now > stop_at:
                raise SystemExit(f"load generator: {total - done} of {total} requests unanswered 10 s after the schedule")
            while nxt < total and t0 + nxt / rate <= now:
                queued.append(t0 + nxt / rate)
                nxt += 1
            while queued and idle:
                c = idle.popleft()
                due = queued.popleft()
                socks[c].send(req)  # a few dozen bytes into an empty socket buffer: never short
                late.append(time.perf_counter() - due)
                due_at[c] = due
                busy.append(socks[c])
            wait = max(0.0, t0 + nxt / rate - time.perf_counter()) if nxt < total else 0.5
            ready = select.select(busy, [], [], wait)[0] if busy else (time.sleep(wait) or [])
            if not ready:
                continue
            arrived = time.perf_counter()
            for s in ready:
                c = idx[s]
                data = s.recv(65536)
                if not data:
                    raise SystemExit("load generator: the proxy closed a keep-alive connection")
                b = bufs[c]
                b += data
                h = b.find(b"\r\n\r\n")
                if h < 0:
                    continue
                m = CL.search(b, 0, h + 2)
                if not m:
                    raise SystemExit(f"load generator: response without content-length: {bytes(b[:h])!r}")
                end = h + 4 + int(m.group(1))
                if len(b) < end:
                    continue
                if b[9:12] != b"200":
                    bad += 1
                del b[:end]
                lat.append(arrived - due_at[c])
                done += 1
                busy.remove(s)
                idle.append(c)
        elapsed = arrived - t0
    finally:
        gc.enable()
        if prio is not None:  # proxies started later must not inherit it
            os.setpriority(os.PRIO_PROCESS, 0, prio)
        for s in socks:
            s.close()
    if bad:
        raise SystemExit(f"load generator: {bad} non-200 responses; results discarded")
    return [x * 1000 for x in lat], [x * 1000 for x in late], done / elapsed


def pct(sorted_ms, q):
    """Nearest-rank percentile of a sorted list."""
    return sorted_ms[min(len(sorted_ms) - 1, max(0, int(q / 100 * len(sorted_ms) + 0.999999) - 1))]


def measure(kind, checks):
    """One fresh start of a proxy, settle, warm-up, then one measured window of SECS."""
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    p = start(cfg(kind, checks), PROXY)
    time.sleep(SETTLE)
    n0, c0, t0 = origin_checks()[0], group_cpu(p.pid), time.time()
    time.sleep(IDLE)
    n1, c1, t1 = origin_checks()[0], group_cpu(p.pid), time.time()
    idle = {"cpu_rate": (c1 - c0) / (t1 - t0), "checks_rate": (n1 - n0) / (t1 - t0)}
    openloop(RATE, WARMUP)
    act0 = activity() if kind == "sluice" else None
    fail0 = check_failures() if checks else 0
    n0, bad0, _ = origin_checks()
    c0, t0 = group_cpu(p.pid), time.time()
    lat, late, achieved = openloop(RATE, SECS)
    c1, t1 = group_cpu(p.pid), time.time()
    n1, bad1, forms = origin_checks()
    fail1 = check_failures() if checks else 0
    act1 = activity() if kind == "sluice" else None
    stop(p)
    wait_closed(PROXY)
    wall = t1 - t0
    lat.sort()
    late.sort()
    row = {"cpu_rate": (c1 - c0) / wall, "checks_rate": (n1 - n0) / wall, "achieved": achieved,
           "p50": pct(lat, 50), "p99": pct(lat, 99), "p999": pct(lat, 99.9), "max": lat[-1],
           "late_p99": pct(late, 99), "late_p999": pct(late, 99.9), "late_max": late[-1],
           "origin_checks": n1 - n0, "origin_non200": bad1 - bad0, "chkfail": fail1 - fail0,
           "forms": forms, "wall": wall, "idle": idle}
    if act0:
        row["act"] = {k: [b - a for a, b in zip(act0[k], act1[k])] for k in act0}
    return row


def fmt_list(v):
    return " ".join(str(x) for x in v)


def main():
    if not os.path.exists(core.SLUICE):
        raise SystemExit("build sluice first: cargo build --release -p sluice")
    o = origin()
    cases = [("sluice", True), ("sluice", False), ("haproxy", True), ("haproxy", False)]
    rows = {c: [] for c in cases}
    for r in range(RUNS):
        order = cases[r % len(cases):] + cases[:r % len(cases)]  # rotate: no case always follows another
        for kind, checks in order:
            row = measure(kind, checks)
            rows[(kind, checks)].append(row)
            print(f"round {r + 1}: {kind:7} checks={'yes' if checks else 'no '} cpu {row['cpu_rate']:.3f} s/s, "
                  f"checks {row['checks_rate']:.0f}/s (chkfail {row['chkfail']}, non-200 {row['origin_non200']}), "
                  f"{row['achieved']:.0f} req/s, p50 {row['p50']:.3f} p99 {row['p99']:.3f} p99.9 {row['p999']:.3f} "
                  f"max {row['max']:.1f} ms, generator late p99.9 {row['late_p999']:.3f} ms"
                  + (f", checks_run/worker {fmt_list(row['act']['checks_run'])}" if 'act' in row else ""),
                  file=sys.stderr, flush=True)
    stop(o)

    med = lambda case, key: statistics.median(r[key] for r in rows[case])
    per_check = {}
    for kind in ("sluice", "haproxy"):
        w, wo = rows[(kind, True)], rows[(kind, False)]
        # per round: the extra CPU per wall second over the checks per wall second of that round
        per_check[kind] = [(a["cpu_rate"] - b["cpu_rate"]) / a["checks_rate"] * 1e6 for a, b in zip(w, wo)]
        # the same with no load at all (IDLE seconds before the warm-up): checks alone
        per_check[kind + " idle"] = [(a["idle"]["cpu_rate"] - b["idle"]["cpu_rate"]) / a["idle"]["checks_rate"] * 1e6
                                     for a, b in zip(w, wo)]
    print(f"# Health-check benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} rounds (medians), "
          f"{SERVERS} servers checked every 1 s (option httpchk GET /health), nbthread {THREADS}, "
          f"open-loop load {RATE} req/s on {CONNS} keep-alive connections, nginx origin\n")
    hv = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{hv}; sluice {core.SLUICE}\n")
    print("| proxy | CPU µs per check | per round | checks/s (origin) | chkfail | CPU-s/s with checks | CPU-s/s without |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for kind in ("sluice", "haproxy"):
        print(f"| {kind} | {statistics.median(per_check[kind]):.1f} | {', '.join(f'{x:.1f}' for x in per_check[kind])} | "
              f"{med((kind, True), 'checks_rate'):.0f} | {sum(r['chkfail'] for r in rows[(kind, True)])} | "
              f"{med((kind, True), 'cpu_rate'):.3f} | {med((kind, False), 'cpu_rate'):.3f} |")
    ratio = statistics.median(per_check["sluice"]) / statistics.median(per_check["haproxy"])
    print(f"\nsluice / HAProxy CPU per check under load: {ratio:.2f}x (target <= 0.5x)\n")
    print(f"With no load ({IDLE}s windows before the warm-up, checks alone): CPU µs per check sluice "
          f"{statistics.median(per_check['sluice idle']):.1f} ({', '.join(f'{x:.1f}' for x in per_check['sluice idle'])}), "
          f"HAProxy {statistics.median(per_check['haproxy idle']):.1f} ({', '.join(f'{x:.1f}' for x in per_check['haproxy idle'])}), "
          f"ratio {statistics.median(per_check['sluice idle']) / statistics.median(per_check['haproxy idle']):.2f}x\n")
    print("| proxy | checks | achieved req/s | p50 ms | p99 ms | p99.9 ms | max ms | generator late p99.9 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, checks in cases:
        c = (kind, checks)
        print(f"| {kind} | {'1,000/s' if checks else 'none'} | {med(c, 'achieved'):.0f} | {med(c, 'p50'):.3f} | "
              f"{med(c, 'p99'):.3f} | {med(c, 'p999'):.3f} | {med(c, 'max'):.1f} | {med(c, 'late_p999'):.3f} |")
    s_w, s_wo = med(("sluice", True), "p999"), med(("sluice", False), "p999")
    rounds = lambda checks: ", ".join("%.3f" % r["p999"] for r in rows[("sluice", checks)])
    print(f"\nsluice p99.9 with / without checks: {s_w / s_wo:.2f}x; per round with: {rounds(True)}, "
          f"without: {rounds(False)} ms\n")
    print(f"sluice checks per worker over each {SECS}s window (show activity deltas; checks_run total vs origin count):\n")
    print("| round | checks_run total | origin count | checks_run per worker | checks_moved per worker | checks_queued per worker "
          "| client conns per worker | requests per worker |")
    print("| ---: | ---: | ---: | --- | --- | --- | --- | --- |")
    for i, r in enumerate(rows[("sluice", True)]):
        a = r["act"]
        conns = [x - y + z for x, y, z in zip(a["accepted"], a["accq_pushed"], a["adopted"])]
        print(f"| {i + 1} | {sum(a['checks_run'])} | {r['origin_checks']} | {fmt_list(a['checks_run'])} | "
              f"{fmt_list(a['checks_moved'])} | {fmt_list(a['checks_queued'])} | {fmt_list(conns)} | {fmt_list(a['requests'])} |")
    forms = set().union(*(r["forms"] for k in ("sluice", "haproxy") for r in rows[(k, True)]))
    print(f"\ncheck requests seen at the origin: {', '.join(sorted(forms))}")


if __name__ == "__main__":
    core.run(main)
