"""Per-request kernel and allocator cost (issue 15, section 2): system calls and heap
allocations per keep-alive request, 1 worker, counted with `perf stat` on tracepoints and
libc uprobes while one client sends N sequential `GET /hello.txt` (13 B) on one connection,
and again with C clients at once (where event-loop waits are shared). Same nginx origin and
configuration for sluice and HAProxy.

Usage: python3 bench/syscalls.py [requests] [clients]   (needs root for the uprobes;
bench/run.sh installs perf, nginx and HAProxy)
"""
import os, re, subprocess, sys, threading, time

import core
from core import PROXY, work, start, stop
from instructions import requests as client

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
CLIENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
ALLOC = ["malloc", "calloc", "realloc"]
SYSCALLS = ["recvfrom", "read", "sendto", "write", "sendmsg", "writev", "epoll_wait",
            "epoll_ctl", "clock_gettime", "futex", "getsockopt", "setsockopt"]


def probes():
    have = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    for f in ALLOC:
        if f"probe_libc:{f} " not in have:
            subprocess.run(["perf", "probe", "-q", "-x", LIBC, f], check=True)


def count(cmd, clients):
    p = start(cmd, PROXY)
    try:
        client(50)  # warm: server connection in the pool, buffers allocated
        events = [f"syscalls:sys_enter_{s}" for s in SYSCALLS] + [f"probe_libc:{f}" for f in ALLOC]
        out = os.path.join(work, "perf.txt")
        perf = subprocess.Popen(["perf", "stat", "-x,", "-o", out, "-e", ",".join(events),
                                 "-p", str(p.pid)])
        time.sleep(0.5)
        per = N // clients
        ts = [threading.Thread(target=client, args=(per,)) for _ in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        perf.send_signal(2)
        perf.wait()
        counts = {}
        for line in open(out):
            m = re.match(r"^\s*(\d+),[^,]*,(syscalls:sys_enter_|probe_libc:)(\w+)", line)
            if m:
                counts[m.group(3)] = int(m.group(1)) / (per * clients)
        return counts
    finally:
        stop(p)


def main():
    probes()
    o = core.nginx_origin()
    try:
        rows = []
        for clients in (1, CLIENTS):
            for name, cmd in (("sluice", core.sluice_cmd(1)), ("haproxy", core.haproxy_cmd(1))):
                rows.append((name, clients, count(cmd, clients)))
    finally:
        stop(o)
    names = [s for s in SYSCALLS if any(r[2].get(s, 0) >= 0.005 for r in rows)]
    print(f"# System calls and allocations per keep-alive request, {N} requests of 13 B, 1 worker\n")
    print("| proxy | clients | " + " | ".join(names) + " | **syscalls** | allocations |")
    print("| --- | ---: | " + " | ".join("---:" for _ in names) + " | ---: | ---: |")
    for name, clients, c in rows:
        total = sum(c.get(s, 0) for s in SYSCALLS)
        allocs = sum(c.get(f, 0) for f in ALLOC)
        print(f"| {name} | {clients} | " + " | ".join(f"{c.get(s, 0):.2f}" for s in names)
              + f" | **{total:.2f}** | {allocs:.2f} |")


if __name__ == "__main__":
    main()
