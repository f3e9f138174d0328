"""Rules benchmark (issue 13): what the rules engine and a shared stick table cost per
request, sluice and HAProxy side by side, 2 proxy threads, wrk -t2 -c64 keep-alive, all from
one client address (one table key: every worker updates the same entry, the worst case for
a shared table). Configurations, identical for both proxies:
  plain   - `http-request return` (no origin: the proxy's own cost only)
  rules   - six header/variable rules with ACL conditions, then the return
  track   - `http-request track-sc0 src` on a table storing http_req_rate(10s),
            http_req_cnt and gpc0, a deny on the rate (never reached), then the return
Prints requests/s and requests per proxy CPU-second (medians of RUNS runs each).
Usage: python3 bench/rules.py [seconds] [runs]  (bench/run.sh installs the tools).
"""
import re, statistics, subprocess, time

import core
from core import PROXY, SECS, RUNS, start, stop, wait_closed, group_cpu

RETURN = "    http-request return status 200 content-type text/plain string ok\n"
CONFIGS = {
    "plain": RETURN,
    "rules": ("    acl api path_beg /api\n    acl local src 127.0.0.0/8\n"
              "    http-request set-header X-A %[src] if local\n"
              "    http-request set-header X-B %[req.hdr(host),lower] if !api\n"
              "    http-request set-var(txn.p) path\n"
              "    http-request del-header X-C\n"
              "    http-request set-header X-D %[var(txn.p)] if { var(txn.p) -m beg / }\n"
              "    http-request add-header X-E 1 if local !api\n" + RETURN),
    "track": ("    stick-table type ip size 100k expire 30s store http_req_rate(10s),http_req_cnt,gpc0\n"
              "    http-request track-sc0 src\n"
              "    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }\n" + RETURN),
}


def cmd(kind, name):
    path = core.write_config(f"{kind}-rules-{name}", glob="    nbthread 2\n    maxconn 5000\n",
                             frontend=CONFIGS[name])
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def wrk(secs):
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{secs}s", f"http://127.0.0.1:{PROXY}/x"],
                         capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"error responses\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))


def run_once(c):
    p = start(c, PROXY)
    wrk(1)
    c0, t0 = group_cpu(p.pid), time.time()
    reqs = wrk(SECS)
    c1, t1 = group_cpu(p.pid), time.time()
    stop(p)
    wait_closed(PROXY)
    return reqs / (t1 - t0), reqs / max(c1 - c0, 1e-9)


def main():
    print(f"# Rules benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians, interleaved), "
          "wrk -t2 -c64 keep-alive, 2 proxy threads, one client address\n")
    print("| config | proxy | req/s | req per CPU-s |")
    print("| --- | --- | ---: | ---: |")
    res = {}
    for name in CONFIGS:
        rows = {"sluice": [], "haproxy": []}
        for i in range(RUNS):
            order = ["sluice", "haproxy"] if i % 2 == 0 else ["haproxy", "sluice"]
            for kind in order:
                rows[kind].append(run_once(cmd(kind, name)))
        for kind in ("sluice", "haproxy"):
            m = [statistics.median(r[j] for r in rows[kind]) for j in range(2)]
            res[(name, kind)] = m
            print(f"| {name} | {kind} | {m[0]:.0f} | {m[1]:.0f} |", flush=True)
    print()
    for name in CONFIGS:
        s, h = res[(name, "sluice")], res[(name, "haproxy")]
        print(f"{name}: sluice/haproxy req per CPU-s {s[1]/h[1]:.2f}x; cost vs plain: "
              f"sluice {s[1]/res[('plain','sluice')][1]:.2f}, haproxy {h[1]/res[('plain','haproxy')][1]:.2f}")


if __name__ == "__main__":
    core.run(main)
