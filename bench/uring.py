"""io_uring prototype benchmark (issue 40, part 1): the same keep-alive proxy loop for tiny
responses (bench/uring: read the request, write it to the origin, read the response, write it
back; one thread, a connection to the origin per client connection) on epoll and on io_uring
(one `io_uring_enter` per loop turn, with DEFER_TASKRUN, or with SQPOLL, or with multishot
receives into a provided buffer ring and registered descriptors), beside sluice and
HAProxy 2.6 with one thread, same nginx origin and wrk -t1 -c50 on 13 B. Each round runs the
contenders in turn; medians of RUNS rounds of SECS seconds.

Reported: requests per second, user and system CPU microseconds per request of the proxy
(its process group, /proc), and requests per CPU-second. The question (the issue's): is the
io_uring loop's CPU per request at least 15 % below the epoll loop's?

Usage: python3 bench/uring.py [seconds] [rounds]  (bench/run.sh installs the tools and builds
the prototype with cargo).
"""
import os, statistics, subprocess, sys, time

import core
from core import SECS, RUNS, PROXY, ORIGIN, start, stop, wait_closed

PROTO = os.path.join(core.ROOT, "bench", "uring", "target", "release", "uring-proto")


def contenders():
    cfg = core.proxy_config("p", 1)
    return [
        ("loop on epoll", [PROTO, "epoll", str(PROXY), str(ORIGIN)]),
        ("loop on io_uring", [PROTO, "uring", str(PROXY), str(ORIGIN)]),
        ("loop on io_uring, SQPOLL", [PROTO, "uring-sqpoll", str(PROXY), str(ORIGIN)]),
        ("loop on io_uring, multishot receive, buffer ring, fixed files",
         [PROTO, "uring-multi", str(PROXY), str(ORIGIN)]),
        ("sluice", [core.SLUICE, "-f", cfg]),
        ("haproxy", ["haproxy", "-db", "-f", cfg]),
    ]


def one(cmd):
    p = start(cmd, PROXY)
    core.wrk("/hello.txt", 1)
    u0, s0 = core.group_cpu_split(p.pid)
    t0 = time.time()
    reqs, p50, p99, _, _ = core.wrk("/hello.txt", SECS)
    t1 = time.time()
    u1, s1 = core.group_cpu_split(p.pid)
    stop(p)
    wait_closed(PROXY)
    return {"rps": reqs / (t1 - t0), "user": (u1 - u0) / reqs * 1e6, "sys": (s1 - s0) / reqs * 1e6,
            "per_cpu": reqs / max(u1 - u0 + s1 - s0, 1e-9), "p99": p99}


def main():
    subprocess.run(["cargo", "build", "--release", "--manifest-path",
                    os.path.join(core.ROOT, "bench", "uring", "Cargo.toml")], check=True)
    origin = core.nginx_origin()
    rows = {name: [] for name, _ in contenders()}
    for r in range(RUNS):
        order = contenders()
        order = order[r % len(order):] + order[:r % len(order)]
        for name, cmd in order:
            row = one(cmd)
            rows[name].append(row)
            print(f"round {r + 1}: {name}: {row['rps']:.0f} req/s, user {row['user']:.2f} us, sys {row['sys']:.2f} us per request",
                  file=sys.stderr, flush=True)
    stop(origin)
    med = lambda name, key: statistics.median(x[key] for x in rows[name])
    print(f"# io_uring prototype, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} rounds (medians, in turn), wrk -t1 -c50, 13 B, one thread\n")
    print("| proxy | req/s | user us/req | sys us/req | CPU us/req | req per CPU-s | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, _ in contenders():
        cpu = med(name, "user") + med(name, "sys")
        print(f"| {name} | {med(name, 'rps'):.0f} | {med(name, 'user'):.2f} | {med(name, 'sys'):.2f} | {cpu:.2f} | "
              f"{med(name, 'per_cpu'):.0f} | {med(name, 'p99'):.3f} |")
    e = med("loop on epoll", "user") + med("loop on epoll", "sys")
    u = med("loop on io_uring", "user") + med("loop on io_uring", "sys")
    m = (med("loop on io_uring, multishot receive, buffer ring, fixed files", "user")
         + med("loop on io_uring, multishot receive, buffer ring, fixed files", "sys"))
    print(f"\nio_uring loop / epoll loop, CPU per request: {u / e:.3f}; with multishot receives, "
          f"a buffer ring and fixed files: {m / e:.3f} (the issue's bar for building it: <= 0.85)")


if __name__ == "__main__":
    core.run(main)
