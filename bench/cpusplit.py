"""Where a keep-alive request's CPU goes: user and system time per request for sluice,
HAProxy and nginx as proxies (13-byte responses, 1 worker, bench/core.py's load: wrk -t1
-c50, nginx origin), medians of RUNS interleaved runs of SECS seconds, from the process
group's utime and stime in /proc.
Usage: python3 bench/cpusplit.py [seconds] [runs]  (bench/run.sh installs the tools)."""
import statistics

import core


def main():
    origin = core.nginx_origin()
    cmds = {"sluice": core.sluice_cmd(1), "haproxy": core.haproxy_cmd(1), "nginx": core.nginx_cmd(1)}
    rows = {k: [] for k in cmds}
    for _ in range(core.RUNS):
        for name, cmd in cmds.items():
            p = core.start(cmd, core.PROXY)
            core.wrk("/hello.txt", 1)
            u0, s0 = core.group_cpu_split(p.pid)
            reqs = core.wrk("/hello.txt", core.SECS)[0]
            u1, s1 = core.group_cpu_split(p.pid)
            core.stop(p)
            core.wait_closed(core.PROXY)
            rows[name].append((1e6 * (u1 - u0) / reqs, 1e6 * (s1 - s0) / reqs, reqs / core.SECS))
    print(f"# CPU per keep-alive request (13 B, 1 worker, wrk -t1 -c50), {core.SECS}s x {core.RUNS} runs, medians\n")
    print("| proxy | user µs/req | system µs/req | total µs/req | req/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in rows.items():
        user = statistics.median(x[0] for x in r)
        system = statistics.median(x[1] for x in r)
        rate = statistics.median(x[2] for x in r)
        print(f"| {name} | {user:.2f} | {system:.2f} | {user + system:.2f} | {rate:.0f} |")
    core.stop(origin)


if __name__ == "__main__":
    core.run(main)
