"""Who sleeps, per keep-alive TLS request (issue 14): the voluntary context switches of the
load generator (wrk -t2 -c64), of the nginx origin and of the proxy, per request, with the
proxy's requests per CPU-second beside them. Each sleep of wrk or of the origin is a
wake-up that the proxy's write pays for (the loopback delivery runs in the writer's
context, and waking a sleeping thread on the other CPU costs an IPI), so a proxy that
makes its peers sleep less spends less kernel time per request. Also prints the cost of
one system call's entry and exit on this machine (`perf bench syscall basic`, a loop of
`getppid`), the most that batching system calls (io_uring) could take off each one.

Same setup as `bench/tls.py` ("keep-alive 13 B"): 1 worker, ECDSA P-256, TLS 1.3
AES-128-GCM, no resumption, nginx origin. Interleaved runs, one line per run.
Usage: python3 bench/wakeups.py [seconds] [runs]   (bench/run.sh installs the tools)
SLUICE_BASELINE=/path/to/sluice adds an earlier build.
"""
import os, re, subprocess

import core
import tls
from core import PROXY, SECS, RUNS, start, stop, wait_closed, group_cpu

KIND = "keep-alive 13 B"


def voluntary(pid):
    """Voluntary context switches of every thread of `pid`."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            status = open(f"/proc/{pid}/task/{t}/status").read()
        except OSError:
            continue
        total += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
    return total


def group_voluntary(pgid):
    total = 0
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and os.getpgid(int(p)) == pgid:
                total += voluntary(int(p))
        except (OSError, AttributeError):
            continue
    return total


def syscall_ns():
    """`perf bench syscall basic`: a loop of getppid calls, nanoseconds per call."""
    out = subprocess.run(["perf", "bench", "syscall", "basic"], capture_output=True, text=True,
                         check=True).stdout
    return float(re.search(r"([\d.]+) usecs/op", out).group(1)) * 1000


def one(name, cmd, origin):
    p = start(cmd, PROXY)
    tls.load(KIND, 1)
    pv0, ov0, c0 = group_voluntary(p.pid), group_voluntary(origin.pid), group_cpu(p.pid)
    out = subprocess.run(["/usr/bin/time", "-f", "WRK %w", "wrk", "-t2", "-c64", f"-d{SECS}s",
                          f"https://127.0.0.1:{PROXY}/hello.txt"], capture_output=True, text=True)
    pv1, ov1, c1 = group_voluntary(p.pid), group_voluntary(origin.pid), group_cpu(p.pid)
    stop(p)
    wait_closed(PROXY)
    n = int(re.search(r"(\d+) requests in", out.stdout).group(1))
    wrk_sleeps = int(re.search(r"WRK (\d+)", out.stderr).group(1))
    print(f"| {name} | {n / max(c1 - c0, 1e-9):,.0f} | {wrk_sleeps / n:.3f} | {(ov1 - ov0) / n:.3f} "
          f"| {(pv1 - pv0) / n:.3f} |", flush=True)


def main():
    if not os.path.exists("/usr/bin/time"):
        raise SystemExit("needs /usr/bin/time (Debian package `time`)")
    origin = core.nginx_origin()
    key, crt, pem = tls.cert()
    try:
        print(f"one system call's entry and exit: {syscall_ns():.0f} ns (perf bench syscall basic)\n")
        print("| proxy | req per CPU-s | wrk sleeps/req | origin sleeps/req | proxy sleeps/req |")
        print("| --- | ---: | ---: | ---: | ---: |")
        proxies = [("sluice", tls.hap_sluice("sluice", pem, KIND))]
        if base := os.environ.get("SLUICE_BASELINE"):
            proxies.append(("baseline", [base] + proxies[0][1][1:]))
        proxies += [("haproxy", tls.hap_sluice("haproxy", pem, KIND)), ("nginx", tls.nginx_cmd(key, crt))]
        for _ in range(RUNS):
            for name, cmd in proxies:
                one(name, cmd, origin)
    finally:
        stop(origin)
        core.cleanup()


if __name__ == "__main__":
    main()
