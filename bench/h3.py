"""HTTP/3 benchmark (issue 37): sluice's requests per CPU-second over HTTP/3, beside its own
HTTP/2 and HTTP/1.1 over TLS, same certificate (ECDSA P-256), one worker, one nginx origin,
13 B and 76 kB responses, medians of RUNS interleaved runs.

No local peer speaks HTTP/3 (Debian's HAProxy 2.6 and nginx 1.22 are built without QUIC)
and no packaged load generator does (Debian's h2load and curl lack it), so the HTTP/3 load
comes from bench/h3load-rs (quinn and h3 on one thread, as h2load -t1; built here with
cargo), at full speed with h2load's shape (8 connections x 100 streams) and with 2
connections x 10 streams. Requests per proxy CPU-second depend on the rate (at a low rate
each request pays more of the event loop's wake-ups), so HTTP/2 and HTTP/1.1 are measured
at full speed (h2load -c8 -m100, and --h1 -c64) and at the rate the 2 x 10 HTTP/3 load
reached in the same round (h2load --rps, same connections and requests in flight).
H3LOAD=aioquic uses the earlier Python client (bench/h3load.py, a few thousand requests per
second at most) for the 2 x 10 load instead.
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


RUST_LOAD = os.path.join(core.ROOT, "bench", "h3load-rs")
AIOQUIC = os.environ.get("H3LOAD") == "aioquic"


def build_load():
    subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path",
                    os.path.join(RUST_LOAD, "Cargo.toml")], check=True)


def h3load(path, secs, pem, conns=2, streams=10, aioquic=False):
    if aioquic:
        cmd = ["python3", os.path.join(core.ROOT, "bench", "h3load.py"), "127.0.0.1", str(PROXY),
               path, str(secs), str(conns), str(streams)]
    else:
        cmd = [os.path.join(RUST_LOAD, "target", "release", "h3load"), "127.0.0.1", str(PROXY),
               path, str(secs), str(conns), str(streams), pem]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
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
    if not AIOQUIC:
        build_load()
    origin = core.nginx_origin()
    client = "aioquic" if AIOQUIC else "h3load-rs"
    print(f"# HTTP/3 benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians), "
          f"1 worker, ECDSA P-256, nginx origin; HTTP/3 by {client}\n")
    only = os.environ.get("BENCH_ONLY")  # "13 B" or "76 kB"
    for size, path in [x for x in [("13 B", "/hello.txt"), ("76 kB", "/page.html")] if not only or x[0] == only]:
        rows = {}
        for _ in range(RUNS):
            p = start(sluice_cmd(pem), PROXY)
            h3load(path, 1, pem, aioquic=AIOQUIC)  # warm-up
            h3 = measured(p, lambda: h3load(path, SECS, pem, aioquic=AIOQUIC))
            rate = h3[0]
            loads = [(f"HTTP/3 ({client}, 2 x 10)", h3),
                     ("HTTP/2 at the HTTP/3 rate", measured(p, lambda: h2load(path, SECS, rate=rate))),
                     ("HTTP/1.1 at the HTTP/3 rate", measured(p, lambda: h2load(path, SECS, True, rate))),
                     ("HTTP/2 full speed (h2load -c8 -m100)", measured(p, lambda: h2load(path, SECS))),
                     ("HTTP/3 full speed (h3load-rs -c8 -m100)",
                      measured(p, lambda: h3load(path, SECS, pem, 8, 100))),
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
        h3, h2 = med[f"HTTP/3 ({client}, 2 x 10)"][1], med["HTTP/2 at the HTTP/3 rate"][1]
        h3f, h2f = med["HTTP/3 full speed (h3load-rs -c8 -m100)"][1], med["HTTP/2 full speed (h2load -c8 -m100)"][1]
        print(f"\nHTTP/3 / HTTP/2 per CPU-second, at the same rate: {h3 / h2:.2f}x; "
              f"both at full speed: {h3f / h2f:.2f}x (target 0.5x)\n", flush=True)
    stop(origin)


if __name__ == "__main__":
    core.run(main)
