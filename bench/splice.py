"""Splicing benchmark (issue 40, part 2): plain HTTP/1.1 keep-alive responses of 76 kB and
1 MB through sluice with `option splice-response` and without, and HAProxy 2.6 with `option
splice-auto`, with `option splice-response` and without, one worker each, same nginx origin (sendfile) and wrk -t1 -c50.
Each round runs the four contenders once, in turn (`core.measure_interleaved`); medians of
RUNS rounds of SECS seconds. Reported: requests per second and per proxy CPU-second, p50/p99.

Target (the issue's): sluice with splicing >= 1.5x HAProxy's requests per CPU-second with
its own splice-auto, on both sizes.

Usage: python3 bench/splice.py [seconds] [rounds]  (bench/run.sh installs the tools).
"""
import os, sys

import core
from core import SECS, RUNS, work

THREADS = int(os.environ.get("SPLICE_NBTHREAD", "1"))


MODE = os.environ.get("SPLICE_MODE", "http")


def config(kind, option):
    # `SPLICE_MODE=tcp`: the same proxies in `mode tcp` (the origin's keep-alive carried
    # through, each client connection on its own server connection).
    mode = "    mode tcp\n" if MODE == "tcp" else ""
    return core.write_config(
        f"{kind}-{option.split()[-1] if option else 'copy'}",
        glob=f"    nbthread {THREADS}\n    maxconn 5000\n",
        defaults=mode + (f"    {option}\n" if option else ""))


def cmd(kind, option=None):
    path = config(kind, option)
    return [core.SLUICE, "-f", path] if kind == "sluice" else ["haproxy", "-db", "-f", path]


def main():
    if not os.path.exists(core.SLUICE):
        raise SystemExit("build sluice first: cargo build --release -p sluice")
    origin = core.nginx_origin()
    root = os.path.join(work, "www")
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    print(f"# Splicing benchmark, mode {MODE}, {core.time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} rounds (medians, "
          f"contenders in turn), wrk -t1 -c50, nbthread {THREADS}, nginx origin\n")
    # HAProxy 2.6's splice-auto did not splice these keep-alive responses here (its
    # `show info` PipesFree stayed 0); splice-response does: both are measured.
    contenders = [("sluice splice", cmd("sluice", "option splice-response")), ("sluice copy", cmd("sluice")),
                  ("haproxy splice-auto", cmd("haproxy", "option splice-auto")),
                  ("haproxy splice-response", cmd("haproxy", "option splice-response")),
                  ("haproxy copy", cmd("haproxy"))]
    for size, path in [("76 kB", "/page.html"), ("1 MB", "/big.bin")]:
        rows = core.measure_interleaved(contenders, path)
        print(f"## {size}\n")
        print("| proxy | req/s | p50 ms | p99 ms | req per proxy CPU-s |")
        print("| --- | ---: | ---: | ---: | ---: |")
        by = {}
        for r in rows:
            by[r["name"]] = r
            print(f"| {r['name']} | {r['rps']:.0f} | {r['p50']:.3f} | {r['p99']:.3f} | {r['rpcpu']:.0f} |")
        s = by["sluice splice"]["rpcpu"]
        print(f"\nsluice splice, req per CPU-s: / haproxy splice-auto {s / by['haproxy splice-auto']['rpcpu']:.2f}x "
              f"(target >= 1.5x), / haproxy splice-response {s / by['haproxy splice-response']['rpcpu']:.2f}x, "
              f"/ sluice copy {s / by['sluice copy']['rpcpu']:.2f}x\n")
        sys.stdout.flush()
    core.stop(origin)


if __name__ == "__main__":
    core.run(main)
