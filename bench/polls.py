"""Wake-ups per HTTP/2 request, counted rather than timed (issue 36): the worker's task polls
(uprobes on tokio's `current_thread::Context::run_task`), its checks of the HTTP/2 send
budget (`h2_stream::queued::Queued::poll_room`) and its system calls
(`raw_syscalls:sys_enter`), per request of h2load over TLS (-c8 -m100, a fixed number of
requests), with the proxy's requests per CPU-second beside them. The counts do not move
with the machine's speed, which the CPU figures of this 2-core machine do by 10-25 %
between runs: what a change does to the work per request shows in them at once.

Same setup as `bench/tls.py`'s "h2" loads: 1 worker, ECDSA P-256, TLS 1.3, nginx origin.
Usage: python3 bench/polls.py [requests] [rounds]   (default 30000 and 2; POLLS_PATH picks
the page, /page.html by default, /hello.txt for 13 B). SLUICE_BASELINE adds an earlier
build; SLUICE_GLOBAL applies to the current build only, so that one binary can be compared
with a setting and without (`SLUICE_BASELINE=target/release/sluice`).
Needs perf with uprobes (root) and a build with symbols (the release profile keeps them).
"""
import os, re, subprocess, sys, time

import core
import tls
from core import PROXY, start, stop, wait_closed, group_cpu

REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
PATH = os.environ.get("POLLS_PATH", "/page.html")
PROBES = {"polls": "Context8run_task", "room": "Queued9poll_room"}


def add_probes(binaries):
    """One uprobe per function and binary, named after the binary's place in `binaries`."""
    subprocess.run(["perf", "probe", "-q", "-d", "probe_*:*"], capture_output=True)
    for i, binary in enumerate(binaries):
        symbols = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
        for name, needle in PROBES.items():
            sym = next(l.split()[2] for l in symbols.splitlines() if needle in l)
            subprocess.run(["perf", "probe", "-q", "-x", binary, "--add", f"{name}{i}={sym}"],
                           check=True, capture_output=True)
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout.split()
    return lambda i: [e for e in listed if re.search(rf":({'|'.join(PROBES)}){i}$", e)]


def run_once(cmd, events):
    p = start(cmd, PROXY)
    url = f"https://127.0.0.1:{PROXY}{PATH}"
    core.h2load(url, 1)
    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(events + ["raw_syscalls:sys_enter"]),
                             "-p", str(p.pid)], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    c0 = group_cpu(p.pid)
    out = subprocess.run(["h2load", "-n", str(REQUESTS), "-c8", "-m100", "-t1", url],
                         capture_output=True, text=True).stdout
    c1 = group_cpu(p.pid)
    perf.send_signal(2)
    err = perf.communicate()[1]
    stop(p)
    wait_closed(PROXY)
    done = int(re.search(r"(\d+) succeeded", out).group(1))
    counts = {}
    for line in err.splitlines():
        f = line.split(",")
        if f[0].isdigit():
            counts[f[2].split(":")[-1].rstrip("0123456789").replace("sys_enter", "syscalls")] = int(f[0]) / done
    return counts, done / max(c1 - c0, 1e-9)


def main():
    o = core.nginx_origin()
    _, _, pem = tls.cert()
    cmds = {"sluice": tls.hap_sluice("sluice", pem, "h2")}
    if core.BASELINE:
        cmds["sluice before"] = [core.BASELINE] + tls.hap_sluice("before", pem, "h2")[1:]
    events = add_probes([c[0] for c in cmds.values()])
    print(f"# Wake-ups per HTTP/2 request, {time.strftime('%Y-%m-%d')}, h2load -n {REQUESTS} -c8 -m100 "
          f"over TLS, {PATH}, 1 worker; {ROUNDS} rounds\n")
    print("| round | proxy | task polls/req | budget checks/req | syscalls/req | req per CPU-s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for r in range(ROUNDS):
        for i, (name, cmd) in enumerate(cmds.items()):
            c, rate = run_once(cmd, events(i))
            print(f"| {r + 1} | {name} | {c.get('polls', 0):.2f} | {c.get('room', 0):.2f} | "
                  f"{c.get('syscalls', 0):.2f} | {rate:.0f} |", flush=True)
    subprocess.run(["perf", "probe", "-q", "-d", "probe_*:*"], capture_output=True)
    stop(o)


if __name__ == "__main__":
    core.run(main)
