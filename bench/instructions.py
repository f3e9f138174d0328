"""User-space instructions per request, counted by callgrind (no timing noise): sluice with
`nbthread 1` in front of nginx, one keep-alive client sending sequential `GET /hello.txt`
requests, once with N1 and once with N2 requests; (instructions(N2) - instructions(N1)) /
(N2 - N1) cancels start-up and shutdown. Several binaries can be compared in one run.

Usage: python3 bench/instructions.py [SLUICE_BINARY ...]   (default: target/release/sluice)
N1 and N2 default to 500 and 2500 (INSTR_N1, INSTR_N2). Needs valgrind and nginx.
INSTR_PROTO=h2 counts HTTP/2 instead: h2load -c1 -m100 in clear to `bind ... proto h2`
(prior knowledge), the same page, N1 and N2 requests (2000 and 12000 by default), so that
the streams' own work shows apart from TLS and from this machine's speed.
"""
import os, re, signal, socket, subprocess, sys, time

import core
from core import ORIGIN, PROXY, work, start, stop, wait_closed, wait_port

H2 = os.environ.get("INSTR_PROTO") == "h2"
N1 = int(os.environ.get("INSTR_N1", "2000" if H2 else "500"))
N2 = int(os.environ.get("INSTR_N2", "12000" if H2 else "2500"))


def origin():
    root = os.path.join(work, "www")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(core.CORPUS, "hello.txt"), "rb") as src, open(os.path.join(root, "hello.txt"), "wb") as dst:
        dst.write(src.read())
    conf = os.path.join(work, "instr-origin.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process off; worker_processes 1; pid {work}/instr-origin.pid;
error_log {work}/instr-origin.err; events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{ORIGIN}; root {root}; }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], ORIGIN)


def requests(n):
    if H2:
        out = subprocess.run(["h2load", "-n", str(n), "-c1", "-m100", f"http://127.0.0.1:{PROXY}/hello.txt"],
                             capture_output=True, text=True).stdout
        if f"{n} succeeded" not in out:
            raise SystemExit(f"h2load failed\n{out}")
        return
    s = socket.create_connection(("127.0.0.1", PROXY))
    req = b"GET /hello.txt HTTP/1.1\r\nHost: b\r\n\r\n"
    for _ in range(n):
        s.sendall(req)
        got = b""
        while b"\r\n\r\n" not in got or len(got) < got.index(b"\r\n\r\n") + 4 + 13:
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("the proxy closed the connection")
            got += chunk
    s.close()


def instructions(binary, n):
    cfg = core.write_config("instr", glob="    nbthread 1\n")
    if H2:
        text = open(cfg).read().replace(f"bind 127.0.0.1:{PROXY}", f"bind 127.0.0.1:{PROXY} proto h2")
        with open(cfg, "w") as f:
            f.write(text)
    out = os.path.join(work, f"callgrind.{n}.out")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "-f", cfg],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_port(PROXY, timeout=60)
    requests(n)
    os.killpg(p.pid, signal.SIGTERM)
    p.wait()
    wait_closed(PROXY)
    total = 0
    for path in os.listdir(work):
        if path.startswith(f"callgrind.{n}.out"):
            with open(os.path.join(work, path)) as f:
                m = re.search(r"^summary:\s*(\d+)", f.read(), re.M)
                if m:
                    total += int(m.group(1))
            os.remove(os.path.join(work, path))
    return total


def main():
    binaries = sys.argv[1:] or [core.SLUICE]
    o = origin()
    try:
        for b in binaries:
            a, c = instructions(b, N1), instructions(b, N2)
            print(f"{b}: {(c - a) / (N2 - N1):,.0f} instructions per request ({N1}: {a:,}, {N2}: {c:,})", flush=True)
    finally:
        stop(o)


if __name__ == "__main__":
    main()
