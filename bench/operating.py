"""Operating benchmark (issue 3): 1,000 keep-alive clients, an origin that answers after ~1 ms
(nginx with the echo module's echo_sleep), one proxy thread; sluice, HAProxy and nginx in the
same run: requests/s, p50/p99/p99.9 latency, requests per proxy CPU-second. Then the cost of
access logging: `option httplog` to a UDP syslog sink versus no log, for sluice and HAProxy.
Usage: python3 bench/operating.py [seconds] [runs]  (bench/run.sh installs the tools).
"""
import os, re, socket, statistics, subprocess, threading, time

import core
from core import PROXY, ORIGIN, SECS, RUNS, work, start, stop, wait_closed, group_cpu

SINK = 15514


def origin():
    conf = os.path.join(work, "sleepy.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/sleepy.pid;
load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;
error_log {work}/sleepy.err; events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  server {{ listen 127.0.0.1:{ORIGIN} backlog=8192; location / {{ echo_sleep 0.001; echo "ok"; }} }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], ORIGIN)


def sink():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", SINK))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    def drain():
        while True:
            try:
                s.recv(65536)
            except OSError:
                return
    threading.Thread(target=drain, daemon=True).start()
    return s


def hap_sluice(kind, log):
    logging = f"    log 127.0.0.1:{SINK} local0\n" if log else ""
    deflog = "    log global\n    option httplog\n" if log else ""
    path = core.write_config(f"{kind}-op-{'log' if log else 'nolog'}",
                             glob="    nbthread 1\n    maxconn 4000\n" + logging, defaults=deflog)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def nginx_cmd():
    conf = os.path.join(work, "proxy-op.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/proxy-op.pid;
error_log {work}/proxy-op.err; events {{ worker_connections 4000; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 1024; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{PROXY} backlog=8192;
    location / {{ proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
""")
    return ["nginx", "-c", conf, "-p", work]


def wrk(secs):
    script = os.path.join(work, "pct.lua")
    with open(script, "w") as f:
        f.write('done = function(summary, latency, requests)\n'
                '  for _, p in pairs({50, 99, 99.9}) do io.write(string.format("P%g %d\\n", p, latency:percentile(p))) end\n'
                'end\n')
    out = subprocess.run(["wrk", "-t2", "-c1000", f"-d{secs}s", "-s", script, f"http://127.0.0.1:{PROXY}/"],
                         capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"error responses\n{out}")
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    pct = {m.group(1): int(m.group(2)) / 1000 for m in re.finditer(r"^P([\d.]+) (\d+)$", out, re.M)}
    return reqs, pct.get("50"), pct.get("99"), pct.get("99.9")


def measure(cmd):
    p = start(cmd, PROXY)
    wrk(1)
    rows = []
    for _ in range(RUNS):
        c0, t0 = group_cpu(p.pid), time.time()
        reqs, p50, p99, p999 = wrk(SECS)
        c1, t1 = group_cpu(p.pid), time.time()
        rows.append((reqs / (t1 - t0), reqs / max(c1 - c0, 1e-9), p50, p99, p999))
    stop(p)
    wait_closed(PROXY)
    return [statistics.median(r[i] for r in rows) for i in range(5)]


def main():
    o = origin()
    s = sink()
    print(f"# Operating benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians), wrk -t2 -c1000, origin answering after ~1 ms, 1 proxy thread\n")
    print("| proxy | access log | req/s | req per CPU-s | p50 ms | p99 ms | p99.9 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    res = {}
    runs = [("sluice", "none", hap_sluice("sluice", False)), ("haproxy", "none", hap_sluice("haproxy", False)),
            ("nginx", "none", nginx_cmd()),
            ("sluice", "httplog to UDP", hap_sluice("sluice", True)), ("haproxy", "httplog to UDP", hap_sluice("haproxy", True))]
    for name, logged, cmd in runs:
        m = measure(cmd)
        res[(name, logged)] = m
        print(f"| {name} | {logged} | {m[0]:.0f} | {m[1]:.0f} | {m[2]:.2f} | {m[3]:.2f} | {m[4]:.2f} |", flush=True)
    s_, h_ = res[("sluice", "none")], res[("haproxy", "none")]
    print(f"\nsluice / haproxy req/s: {s_[0]/h_[0]:.2f}x; sluice / nginx req/s: {s_[0]/res[('nginx','none')][0]:.2f}x")
    sl, hl = res[("sluice", "httplog to UDP")], res[("haproxy", "httplog to UDP")]
    print(f"logging cost (req per CPU-s, logged / not): sluice {sl[1]/s_[1]:.2f}, haproxy {hl[1]/h_[1]:.2f}")
    stop(o)
    s.close()


if __name__ == "__main__":
    core.run(main)
