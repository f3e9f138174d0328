"""HTTP/3 benchmark (issue 37): sluice's requests per CPU-second over HTTP/3, beside its own
HTTP/2 and HTTP/1.1 over TLS, same certificate (ECDSA P-256), one worker, one nginx origin,
13 B and 76 kB responses, medians of RUNS interleaved runs.

No local peer speaks HTTP/3 (Debian's HAProxy 2.6 and nginx 1.22 are built without QUIC)
and no packaged load generator does (Debian's h2load and curl lack it), so the HTTP/3 load
is aioquic's (bench/h3load.py: 2 connections x 10 streams), a Python client that reaches a
few thousand requests per second. Requests per proxy CPU-second depend on the rate (at a
low rate each request pays more of the event loop's wake-ups), so HTTP/2 and HTTP/1.1 are
measured twice: at full speed (h2load -c8 -m100, and --h1 -c64) and at the rate the
HTTP/3 client reached in the same round (h2load --rps, same number of connections and
requests in flight as the HTTP/3 client), which is the comparison that holds.
Usage: python3 bench/h3.py [seconds] [runs]  (bench/run.sh installs the tools); BENCH_ONLY
runs one size.
"""
import os, re, statistics, subprocess, time

import core
from core import PROXY, SECS, RUNS, work, start, stop, wait_closed, group_cpu


def cert():
    key, crt, pem = (os.path.join(work, n) for n in ("h3.key", "h3.crt", "h3.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=bench.test",
                    "-addext", "subjectAltName=DNS:bench.test"], check=True, capture_output=True)
    with open(pem, "w") as f:
        f.write(open(crt).read() + open(key).read())
    return pem


def sluice_cmd(pem):
    path = core.write_config("sluice-h3", glob="    nbthread 1\n    maxconn 5000\n" + core.sluice_global())
    text = open(path).read().replace(
        f"    bind 127.0.0.1:{PROXY}\n",
        f"    bind 127.0.0.1:{PROXY} ssl crt {pem} alpn h2,http/1.1\n"
        f"    bind quic4@127.0.0.1:{PROXY} ssl crt {pem}\n")
    with open(path, "w") as f:
        f.write(text)
    return [core.SLUICE, "-f", path]


def h3load(path, secs):
    out = subprocess.run(["python3", os.path.join(core.ROOT, "bench", "h3load.py"), "127.0.0.1",
                          str(PROXY), path, str(secs), "2", "10"],
                         capture_output=True, text=True, check=True).stdout.split()
    ok, failed = int(out[0]), int(out[1])
    if failed:
        raise SystemExit(f"h3load: {failed} failed requests")
    return ok


def h2load(path, secs, h1=False, rate=None):
    url = f"https://127.0.0.1:{PROXY}{path}"
    args = ["h2load", "-t1", "-D", str(secs)]
    if rate is None:
        args += ["--h1", "-c64"] if h1 else ["-c8", "-m100"]
    else:
        # As the HTTP/3 client: 2 connections, 10 requests in flight each, at its rate.
        args += ["-c2", "-m10" if not h1 else "-m1", f"--rps={max(rate / 2, 1):.0f}"]
        if h1:
            args += ["--h1"]
    out = subprocess.run(args + [url], capture_output=True, text=True).stdout
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", out)
    if not m or int(m.group(2)) > 0:
        raise SystemExit(f"h2load failed\n{out}")
    return int(m.group(1))


def measured(p, fn):
    c0, t0 = group_cpu(p.pid), time.time()
    n = fn()
    c1, t1 = group_cpu(p.pid), time.time()
    return n / (t1 - t0), n / max(c1 - c0, 1e-9)


def main():
    pem = cert()
    origin = core.nginx_origin()
    print(f"# HTTP/3 benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians), "
          "1 worker, ECDSA P-256, nginx origin; HTTP/3 by aioquic (2 connections x 10 streams)\n")
    only = os.environ.get("BENCH_ONLY")  # "13 B" or "76 kB"
    for size, path in [x for x in [("13 B", "/hello.txt"), ("76 kB", "/page.html")] if not only or x[0] == only]:
        rows = {}
        for _ in range(RUNS):
            p = start(sluice_cmd(pem), PROXY)
            h3load(path, 1)  # warm-up
            h3 = measured(p, lambda: h3load(path, SECS))
            rate = h3[0]
            loads = [("HTTP/3 (aioquic)", h3),
                     ("HTTP/2 at the HTTP/3 rate", measured(p, lambda: h2load(path, SECS, rate=rate))),
                     ("HTTP/1.1 at the HTTP/3 rate", measured(p, lambda: h2load(path, SECS, True, rate))),
                     ("HTTP/2 full speed (h2load -c8 -m100)", measured(p, lambda: h2load(path, SECS))),
                     ("HTTP/1.1 full speed (h2load --h1 -c64)", measured(p, lambda: h2load(path, SECS, True)))]
            for name, r in loads:
                rows.setdefault(name, []).append(r)
            stop(p)
            wait_closed(PROXY)
        print(f"## {size}\n")
        print("| load | req/s | req per proxy CPU-s |")
        print("| --- | ---: | ---: |")
        med = {n: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for n, v in rows.items()}
        for name, (rps, rpcpu) in med.items():
            print(f"| {name} | {rps:.0f} | {rpcpu:.0f} |")
        h3, h2 = med["HTTP/3 (aioquic)"][1], med["HTTP/2 at the HTTP/3 rate"][1]
        print(f"\nHTTP/3 / HTTP/2 at the same rate, per CPU-second: {h3 / h2:.2f}x (target 0.5x)\n", flush=True)
    stop(origin)


if __name__ == "__main__":
    core.run(main)
