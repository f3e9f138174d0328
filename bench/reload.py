"""Reloads under traffic: RELOADS replacements of the running proxy, one every INTERVAL
seconds, while keep-alive clients (and one client opening a connection per request) send
requests continuously; failed requests / total for each proxy and way of reloading:

- HAProxy 2.6 with `-sf` (as packaged), and with `-x` (its listening sockets handed over
  through a stats socket declared `expose-fd listeners`);
- sluice with `-sf` alone, and with `-x`.

A request fails when its connection cannot be opened, or no whole 200 response comes back.
A keep-alive client opens a new connection when the proxy closes its connection after a
response (`Connection: close`), as browsers do. Every process is started in the
foreground by this script and waited for; processes are stopped by their PIDs.

Usage: python3 bench/reload.py [reloads] [rounds]   (bench/run.sh installs HAProxy, nginx)
"""
import os, signal, socket, subprocess, sys, threading, time

import core
from core import ORIGIN, PROXY, work, start, stop, wait_closed

RELOADS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
INTERVAL = 1.0
CLIENTS = 4
SOCK = os.path.join(work, "reload.sock")
PIDFILE = os.path.join(work, "reload.pid")


def origin():
    conf = os.path.join(work, "reload-origin.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process off; worker_processes 1; pid {work}/reload-origin.pid;
error_log {work}/reload-origin.err; events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{ORIGIN}; location / {{ return 200 "ok\\n"; }} }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], ORIGIN)


def cfg(kind, expose):
    sock = f"    stats socket {SOCK} level admin{' expose-fd listeners' if expose else ''}\n"
    return core.write_config(f"reload-{kind}", glob=sock)


def command(kind, path, old_pid, handover):
    base = [core.SLUICE] if kind == "sluice" else ["haproxy", "-db"]
    cmd = base + ["-f", path, "-p", PIDFILE]
    if old_pid is not None:
        if handover:
            cmd += ["-x", SOCK]
        cmd += ["-sf", str(old_pid)]
    return cmd


def read_response(f):
    """Reads one response from a buffered socket file; (ok, close)."""
    line = f.readline()
    if not line.startswith(b"HTTP/1.1 200"):
        return False, True
    length, close = 0, False
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            if h == b"":
                return False, True
            break
        k, _, v = h.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v.strip())
        elif k == b"connection" and v.strip().lower() == b"close":
            close = True
    body = f.read(length)
    return len(body) == length, close


def keepalive_client(stop_flag, counts, i):
    conn = f = None
    while not stop_flag.is_set():
        ok = False
        try:
            if conn is None:
                conn = socket.create_connection(("127.0.0.1", PROXY), 5)
                f = conn.makefile("rb")
            conn.sendall(b"GET /ka HTTP/1.1\r\nHost: b\r\n\r\n")
            ok, close = read_response(f)
            if close or not ok:
                conn.close()
                conn = None
        except OSError:
            if conn is not None:
                conn.close()
            conn = None
        counts[i][0] += 1
        counts[i][1] += 0 if ok else 1


def oneshot_client(stop_flag, counts, i):
    while not stop_flag.is_set():
        ok = False
        try:
            with socket.create_connection(("127.0.0.1", PROXY), 5) as c:
                c.sendall(b"GET /one HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
                ok, _ = read_response(c.makefile("rb"))
        except OSError:
            pass
        counts[i][0] += 1
        counts[i][1] += 0 if ok else 1


def halt(p):
    """Stops a process this script started, by its PID (its process group)."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def run(kind, handover):
    path = cfg(kind, handover)
    err = open(os.path.join(work, f"reload-{kind}.err"), "a")
    procs = [subprocess.Popen(command(kind, path, None, handover), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)]
    core.wait_port(PROXY)
    time.sleep(0.5)
    stop_flag = threading.Event()
    counts = [[0, 0] for _ in range(CLIENTS + 1)]
    threads = [threading.Thread(target=keepalive_client, args=(stop_flag, counts, i)) for i in range(CLIENTS)]
    threads.append(threading.Thread(target=oneshot_client, args=(stop_flag, counts, CLIENTS)))
    for t in threads:
        t.start()
    started = time.time()
    for _ in range(RELOADS):
        time.sleep(INTERVAL)
        old = procs[-1]
        procs.append(subprocess.Popen(command(kind, path, old.pid, handover), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True))
        try:
            old.wait(30)
        except subprocess.TimeoutExpired:
            print(f"  {kind}: process {old.pid} did not finish", file=sys.stderr)
    time.sleep(INTERVAL)
    stop_flag.set()
    for t in threads:
        t.join()
    elapsed = time.time() - started
    for p in procs:
        if p.poll() is None:
            halt(p)
    wait_closed(PROXY)
    total = sum(c[0] for c in counts)
    failed = sum(c[1] for c in counts)
    return total, failed, total / elapsed


def main():
    o = origin()
    try:
        version = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.splitlines()[0]
        print(f"# Reload benchmark: {RELOADS} reloads {INTERVAL:.0f} s apart, {CLIENTS} keep-alive clients "
              f"and one connection-per-request client, {ROUNDS} rounds\n\n{version}\n")
        print("| proxy | reload | failed / total per round | failed in all | requests/s |")
        print("| --- | --- | --- | ---: | ---: |")
        for kind, handover in (("haproxy", False), ("haproxy", True), ("sluice", False), ("sluice", True)):
            results = [run(kind, handover) for _ in range(ROUNDS)]
            per = ", ".join(f"{f}/{t}" for t, f, _ in results)
            rate = sum(r for _, _, r in results) / len(results)
            print(f"| {kind} | {'-x -sf' if handover else '-sf'} | {per} | {sum(f for _, f, _ in results)} | {rate:.0f} |", flush=True)
    finally:
        stop(o)


if __name__ == "__main__":
    main()
