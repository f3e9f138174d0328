"""TLS termination benchmark (issue 14): sluice, HAProxy and nginx terminating TLS in front
of one nginx origin, same certificate (ECDSA P-256, made with openssl here), one proxy
worker each, side by side, medians of RUNS interleaved runs:
  handshakes  - wrk -t2 -c64 with `Connection: close`: every request on a new TLS 1.3
                connection, a full handshake each (wrk does not resume sessions)
  keep-alive  - wrk -t2 -c64 over kept-alive TLS connections, 13 B and 76 kB responses
wrk resumes TLS sessions when the server lets it, so every proxy is configured without
resumption (sluice and HAProxy: `no-tls-tickets` and `tune.ssl.cachesize 0`; nginx: tickets
and cache off), and after each run sluice's and HAProxy's `show stat` must count no reused
session: a run that resumed would compare a cheaper handshake with full ones.
Every proxy is held to one suite, TLS_AES_128_GCM_SHA256 (checked with `openssl s_client`
before each run): left to their defaults, sluice would pick it and OpenSSL AES-256-GCM with
its SHA-384 key schedule, and the runs would compare suites as well as proxies.
For handshakes, sluice and HAProxy run with `http-reuse always`: nginx keeps its upstream
connections alive (`keepalive 256`), while the default `safe` opens a server connection for
every first request of a client connection, which is every request of this load.
  handshakes, deferred accept - the same with each proxy's deferred accept on its bind
                (`defer-accept` for sluice and HAProxy, `deferred` for nginx: TCP_DEFER_ACCEPT),
                so that a connection reaches the proxy with its ClientHello; not in the
                issue's setup, a second figure beside it (the baseline build is left out)
  h2          - h2load over TLS with HTTP/2 (ALPN h2): 8 connections, 100 streams each
  h2 76 kB    - the same for the 76 kB page (what the per-connection send budget may slow)
Prints requests/s and requests per proxy CPU-second.
Usage: python3 bench/tls.py [seconds] [runs]  (bench/run.sh installs the tools).
SLUICE_BASELINE=/path/to/sluice adds an earlier build; BENCH_ONLY=<load> runs one load;
SLUICE_GLOBAL="line; line" adds global lines to the current build's configuration only
(a setting tried against the baseline, which may be the same binary).
"""
import os, re, statistics, subprocess, time

import core
from core import PROXY, ORIGIN, SECS, RUNS, work, start, stop, wait_closed, group_cpu


def cert():
    key, crt, pem = (os.path.join(work, n) for n in ("tls.key", "tls.crt", "tls.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=bench.test",
                    "-addext", "subjectAltName=DNS:bench.test"], check=True, capture_output=True)
    with open(pem, "w") as f:
        f.write(open(crt).read() + open(key).read())
    return key, crt, pem


def sock(kind):
    return os.path.join(work, f"{kind}-tls.sock")


SUITE = "TLS_AES_128_GCM_SHA256"
DEFERRED = "handshakes, deferred accept"


def hap_sluice(kind, pem, load):
    glob = f"    nbthread 1\n    maxconn 5000\n    tune.ssl.cachesize 0\n    stats socket {sock(kind)}\n"
    if kind == "sluice":
        glob += core.sluice_global()
    reuse = "    http-reuse always\n" if load.startswith("handshakes") else ""
    deferred = " defer-accept" if load == DEFERRED else ""
    path = core.write_config(f"{kind}-tls-{load.replace(' ', '-')}", glob=glob, defaults=reuse)
    text = open(path).read().replace(f"bind 127.0.0.1:{PROXY}",
                                     f"bind 127.0.0.1:{PROXY} ssl crt {pem} alpn h2,http/1.1 no-tls-tickets "
                                     f"ciphersuites {SUITE}{deferred}")
    with open(path, "w") as f:
        f.write(text)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def nginx_cmd(key, crt, load=""):
    conf = os.path.join(work, "proxy-tls.conf")
    deferred = " deferred" if load == DEFERRED else ""
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/proxy-tls.pid;
error_log {work}/proxy-tls.err; events {{ worker_connections 5000; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s; http2_max_requests 1000000;
  upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 256; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{PROXY} ssl http2 backlog=4096{deferred}; ssl_certificate {crt}; ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache off; ssl_session_tickets off;
    ssl_conf_command Ciphersuites {SUITE};
    location / {{ proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
""")
    return ["nginx", "-c", conf, "-p", work]


def wrk(secs, close, path):
    args = ["wrk", "-t2", "-c64", f"-d{secs}s"]
    if close:
        args += ["-H", "Connection: close"]
    out = subprocess.run(args + [f"https://127.0.0.1:{PROXY}{path}"], capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"error responses\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))


def h2load(secs, path):
    return core.h2load(f"https://127.0.0.1:{PROXY}{path}", secs)


def load(kind, secs):
    if kind == "h2":
        return h2load(secs, "/hello.txt")
    if kind == "h2 76 kB":
        return h2load(secs, "/page.html")
    path = "/page.html" if kind == "keep-alive 76 kB" else "/hello.txt"
    return wrk(secs, kind.startswith("handshakes"), path)


def reused_sessions(proxy):
    """TLS sessions the frontend resumed, from `show stat` (sluice, its baseline, HAProxy)."""
    kind = {"haproxy": "haproxy", "sluice before": "before"}.get(proxy, "sluice")
    lines = core.cli(sock(kind), "show stat").splitlines()
    header = lines[0].lstrip("# ").split(",")
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("svname") == "FRONTEND":
            return int(row["ssl_reused_sess"] or 0)
    raise SystemExit("no FRONTEND row in show stat")


def negotiated_suite():
    """The TLS 1.3 suite the proxy on PROXY picks for a client with OpenSSL's default list."""
    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{PROXY}", "-tls1_3"],
                         input="", capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"Cipher is (\S+)", out)
    return m.group(1) if m else out[-500:]


def run_once(proxy, cmd, kind):
    p = start(cmd, PROXY)
    if (suite := negotiated_suite()) != SUITE:
        raise SystemExit(f"{proxy} negotiated {suite}, not {SUITE}")
    load(kind, 1)
    c0, t0 = group_cpu(p.pid), time.time()
    reqs = load(kind, SECS)
    c1, t1 = group_cpu(p.pid), time.time()
    if proxy != "nginx" and (reused := reused_sessions(proxy)):
        raise SystemExit(f"{proxy} resumed {reused} TLS sessions: the runs would not compare full handshakes")
    stop(p)
    wait_closed(PROXY)
    return reqs / (t1 - t0), reqs / max(c1 - c0, 1e-9)


def main():
    o = core.nginx_origin()
    key, crt, pem = cert()
    def cmds_for(load):
        cmds = {"sluice": hap_sluice("sluice", pem, load), "haproxy": hap_sluice("haproxy", pem, load),
                "nginx": nginx_cmd(key, crt, load)}
        if core.BASELINE and load != DEFERRED:
            cmds["sluice before"] = [core.BASELINE] + hap_sluice("before", pem, load)[1:]
        return cmds
    only = os.environ.get("BENCH_ONLY")
    kinds = [k for k in ("handshakes", DEFERRED, "keep-alive 13 B", "keep-alive 76 kB", "h2", "h2 76 kB")
             if not only or k == only]
    print(f"# TLS benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians, interleaved), "
          f"1 proxy worker, ECDSA P-256, TLS 1.3 {SUITE}, no resumption, nginx origin; wrk -t2 -c64, "
          "h2load -c8 -m100; handshakes with server connections reused by all three\n")
    print("| load | proxy | req/s | req per CPU-s |")
    print("| --- | --- | ---: | ---: |")
    for kind in kinds:
        cmds = cmds_for(kind)
        rows = {k: [] for k in cmds}
        for i in range(RUNS):
            order = list(cmds)[i % len(cmds):] + list(cmds)[:i % len(cmds)]
            for k in order:
                rows[k].append(run_once(k, cmds[k], kind))
        for k in cmds:
            m = [statistics.median(r[j] for r in rows[k]) for j in range(2)]
            print(f"| {kind} | {k} | {m[0]:.0f} | {m[1]:.0f} |", flush=True)
    stop(o)


if __name__ == "__main__":
    core.run(main)
