"""Compression benchmark (issue 6): one proxy thread, 300 keep-alive clients sending
`Accept-Encoding: gzip` for the 76 kB page, jquery.min.js and bootstrap.min.css, through
sluice, HAProxy 2.6 (built with libslz) and nginx 1.22 (gzip level 1), same nginx origin
(no compression there), same wrk. Then a second run with `maxcompcpuusage 85` for sluice and
HAProxy. Usage: python3 bench/compression.py [seconds] [runs]  (bench/run.sh installs tools).
"""
import os, re, statistics, subprocess, time

import core
from core import PROXY, ORIGIN, SECS, RUNS, work, start, stop, wait_closed, group_cpu, to_ms, LAT

FILES = [("76 kB page", "/page.html", "python-tutorial-errors.html"),
         ("jquery.min.js", "/jquery.min.js", "jquery.min.js"),
         ("bootstrap.min.css", "/bootstrap.min.css", "bootstrap.min.css")]
TYPES = "text/html application/javascript text/css"


def origin():
    import shutil
    root = os.path.join(work, "www")
    os.makedirs(root, exist_ok=True)
    for _, path, name in FILES:
        shutil.copy(os.path.join(core.CORPUS, name), os.path.join(root, path[1:]))
    conf = os.path.join(work, "origin.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/origin.pid;
error_log {work}/origin.err; events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s; sendfile on; gzip off;
  include /etc/nginx/mime.types;
  server {{ listen 127.0.0.1:{ORIGIN} backlog=4096; root {root}; }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], ORIGIN)


def hap_or_sluice_cfg(kind, cpu_cap):
    glob = f"    nbthread 1\n    maxconn 5000\n"
    if cpu_cap:
        glob += f"    maxcompcpuusage {cpu_cap}\n"
    conf = core.write_config(kind, glob=glob,
                             frontend=f"    compression algo gzip\n    compression type {TYPES}\n")
    return [core.SLUICE, "-f", conf] if kind == "sluice" else ["haproxy", "-db", "-f", conf]


def nginx_cmd():
    conf = os.path.join(work, "proxy.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/proxy.pid;
error_log {work}/proxy.err; events {{ worker_connections 5000; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  gzip on; gzip_comp_level 1; gzip_types {TYPES}; gzip_min_length 256;
  upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 512; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{PROXY} backlog=4096;
    location / {{ proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
""")
    return ["nginx", "-c", conf, "-p", work]


def peak_rss_kb(pgid):
    return core.group_status_kib(pgid, "VmHWM")


PACED = None  # milliseconds each connection waits between requests (fixed offered load)


def wrk(path, secs):
    cmd = ["wrk", "-t1", "-c300", f"-d{secs}s", "--latency", "-H", "Accept-Encoding: gzip"]
    if PACED:
        script = os.path.join(work, "paced.lua")
        with open(script, "w") as f:
            f.write(f"function delay()\n  return {PACED}\nend\n")
        cmd += ["-s", script]
    out = subprocess.run(cmd + [f"http://127.0.0.1:{PROXY}{path}"], capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"error responses, results discarded\n{out}")
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    m = re.search(r"requests in [\d.]+\w+, ([\d.]+)(B|KB|MB|GB) read", out)
    read = float(m.group(1)) * {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}[m.group(2)]
    lat = {m.group(1): to_ms(m.group(2), m.group(3)) for m in LAT.finditer(out)}
    return reqs, read, lat.get("50"), lat.get("99")


def measure(name, cmd, path, size):
    p = start(cmd, PROXY)
    wrk(path, 1)
    rows = []
    for _ in range(RUNS):
        c0, t0 = group_cpu(p.pid), time.time()
        reqs, read, p50, p99 = wrk(path, SECS)
        c1, t1 = group_cpu(p.pid), time.time()
        el, cpu = t1 - t0, max(c1 - c0, 1e-9)
        bw_in = reqs * size / el / 1e6
        bw_out = read / el / 1e6
        rows.append((reqs / el, reqs * size / 1e6 / cpu, bw_in, bw_out, bw_in - bw_out, reqs * size / max(read, 1), p50, p99))
    rss = peak_rss_kb(p.pid)
    stop(p)
    wait_closed(PROXY)
    med = [statistics.median(r[i] for r in rows) for i in range(8)]
    return name, med, rss


def table(title, results):
    print(f"### {title}\n")
    print("| proxy | hits/s | MB in per CPU-s | MB/s in | MB/s out | MB/s saved | ratio | peak RSS MB | p50 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, m, rss in results:
        print(f"| {name} | {m[0]:.0f} | {m[1]:.0f} | {m[2]:.0f} | {m[3]:.1f} | {m[4]:.0f} | {m[5]:.2f} | {rss/1024:.1f} | {m[6]:.2f} | {m[7]:.2f} |")
    s = results[0][1]
    for name, m, _ in results[1:]:
        print(f"\nsluice / {name}: MB per CPU-s {s[1]/m[1]:.2f}x, hits/s {s[0]/m[0]:.2f}x, ratio {s[5]/m[5]:.2f}x, saved {s[4]/m[4]:.2f}x", end="")
    print("\n", flush=True)


def main():
    o = origin()
    print(f"# Compression benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians), 1 proxy thread, wrk -t1 -c300, Accept-Encoding: gzip\n")
    # While iterating: COMP_FILES=jquery (label substring), COMP_NGINX=0, COMP_CAP=0.
    files = [f for f in FILES if os.environ.get("COMP_FILES", "") in f[0]]
    for label, path, name in files:
        size = os.path.getsize(os.path.join(core.CORPUS, name))
        rows = [measure("sluice", hap_or_sluice_cfg("sluice", None), path, size),
                measure("haproxy", hap_or_sluice_cfg("haproxy", None), path, size)]
        if os.environ.get("COMP_NGINX", "1") == "1":
            rows.append(measure("nginx", nginx_cmd(), path, size))
        table(f"{label} ({size} B), no CPU cap", rows)
    global PACED
    for label, path, name in FILES[:1] if os.environ.get("COMP_CAP", "1") == "1" else []:
        size = os.path.getsize(os.path.join(core.CORPUS, name))
        table(f"{label}, maxcompcpuusage 85, saturating load", [
            measure("sluice", hap_or_sluice_cfg("sluice", 85), path, size),
            measure("haproxy", hap_or_sluice_cfg("haproxy", 85), path, size)])
        # A fixed offered load (each of the 300 connections waits 55 ms between requests,
        # about 5,000 requests/s): the proxies are not saturated by the relay alone, so the cap
        # decides how much each can compress.
        PACED = int(os.environ.get("COMP_PACE_MS", "55"))
        table(f"{label}, maxcompcpuusage 85, paced load ({PACED} ms between requests per connection)", [
            measure("sluice", hap_or_sluice_cfg("sluice", 85), path, size),
            measure("haproxy", hap_or_sluice_cfg("haproxy", 85), path, size)])
        table(f"{label}, no cap, same paced load", [
            measure("sluice", hap_or_sluice_cfg("sluice", None), path, size),
            measure("haproxy", hap_or_sluice_cfg("haproxy", None), path, size)])
        PACED = None
    stop(o)


if __name__ == "__main__":
    core.run(main)
