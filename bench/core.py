"""Runs the proxy-core benchmark: see bench/run.sh. Prints a markdown table.

For each response size (13 B, the 76 kB corpus page) and thread count (1, 2), each proxy is
started, warmed up, and loaded by wrk (1 thread, 50 keep-alive connections) for N seconds,
R times. Reported: requests/s, p50/p99 latency, and requests per CPU-second of the proxy
(utime+stime of all its processes from /proc/PID/stat), each the median of the R runs.

With SLUICE_BASELINE=/path/to/sluice, that binary is a fourth contender, "sluice-before", with
sluice's configuration; all four then take turns run by run and sluice / sluice-before is printed.
"""
import os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

SECS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 8
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "testdata", "corpus")
SLUICE = os.path.join(ROOT, "target", "release", "sluice")
BASELINE = os.environ.get("SLUICE_BASELINE")  # an earlier sluice build to compare against
CLK = os.sysconf("SC_CLK_TCK")
ORIGIN, PROXY = 18080, 18081
work = tempfile.mkdtemp(prefix="sluice-bench-")
os.chmod(work, 0o755)  # nginx workers run unprivileged and must read the origin's files
procs = []


def wait_port(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"port {port} never opened: " + open(os.path.join(work, "stderr.log")).read()[-2000:])


def wait_closed(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            time.sleep(0.05)
        except OSError:
            return


def start(cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "stderr.log"), "a"), start_new_session=True)
    procs.append(p)
    wait_port(port)
    return p


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    procs.remove(p)


def cli(sock, cmd):
    """One command to a stats socket (unix path), answered in full."""
    for _ in range(50):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
                s.sendall((cmd + "\n").encode())
                out = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        return out.decode()
                    out += b
        except OSError:
            time.sleep(0.1)
    raise SystemExit("stats socket unreachable")


def group_cpu_split(pgid):
    """User and system CPU seconds of every process in the process group (nginx has a master
    and workers)."""
    user = system = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            user += int(fields[11])
            system += int(fields[12])
    return user / CLK, system / CLK


def group_cpu(pgid):
    """CPU seconds of every process in the process group."""
    return sum(group_cpu_split(pgid))


def group_status_kib(pgid, field):
    """A memory field of /proc/PID/status (`VmRSS`, `VmHWM`, in KiB), summed over every
    process in the process group."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def nginx_origin():
    root = os.path.join(work, "www")
    os.makedirs(root, exist_ok=True)
    shutil.copy(os.path.join(CORPUS, "hello.txt"), os.path.join(root, "hello.txt"))
    shutil.copy(os.path.join(CORPUS, "python-tutorial-errors.html"), os.path.join(root, "page.html"))
    conf = os.path.join(work, "origin.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes 1; pid {work}/origin.pid;
error_log {work}/origin.err; events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s; sendfile on;
  server {{ listen 127.0.0.1:{ORIGIN} backlog=4096; root {root}; }} }}
""")
    return start(["nginx", "-c", conf, "-p", work], ORIGIN)


def sluice_global():
    """Global lines for the current build only (SLUICE_GLOBAL, `;`-separated), to try a
    setting side by side with a baseline that may be the same binary."""
    lines = [l.strip() for l in os.environ.get("SLUICE_GLOBAL", "").split(";") if l.strip()]
    return "".join(f"    {l}\n" for l in lines)


def write_config(name, glob="", defaults="", frontend="", backend=None, extra=""):
    """Writes work/NAME.cfg in HAProxy syntax (both proxies read it): `global` with the lines
    `glob`, the timeouts every benchmark uses plus `defaults`, frontend `fe` on PROXY with the
    lines `frontend` sending to backend `be`, whose lines are `backend` (by default one server
    on ORIGIN), then `extra` (more sections). Each argument is whole lines, indented, ending
    with a newline. Returns the path."""
    if backend is None:
        backend = f"    server s1 127.0.0.1:{ORIGIN}\n"
    text = f"""global
{glob}defaults
    mode http
{defaults}    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{PROXY}
{frontend}    default_backend be
backend be
{backend}{extra}"""
    path = os.path.join(work, f"{name}.cfg")
    with open(path, "w") as f:
        f.write(text)
    return path


def proxy_config(kind, threads):
    """The same HAProxy-syntax configuration for sluice and HAProxy."""
    return write_config(kind, glob=f"    nbthread {threads}\n    maxconn 5000\n")


def sluice_cmd(threads, binary=SLUICE):
    # One configuration file for both builds, so the baseline differs from sluice by its binary only.
    return [binary, "-f", proxy_config("sluice", threads)]


def haproxy_cmd(threads):
    return ["haproxy", "-db", "-f", proxy_config("haproxy", threads)]


def nginx_cmd(threads):
    conf = os.path.join(work, "proxy.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; master_process on; worker_processes {threads}; pid {work}/proxy.pid;
error_log {work}/proxy.err; events {{ worker_connections 5000; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  upstream o {{ server 127.0.0.1:{ORIGIN}; keepalive 256; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{PROXY} backlog=4096;
    location / {{ proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering on; }} }} }}
""")
    return ["nginx", "-c", conf, "-p", work]


LAT = re.compile(r"^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)


def to_ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1, "s": 1000}[unit]


def wrk(path, secs):
    out = subprocess.run(["wrk", "-t1", "-c50", f"-d{secs}s", "--latency", f"http://127.0.0.1:{PROXY}{path}"],
                         capture_output=True, text=True, check=True).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors and int(errors.group(1)) > 0:
        raise SystemExit(f"{path}: {errors.group(1)} error responses; results discarded\n{out}")
    sock_err = re.search(r"Socket errors: (.*)", out)
    lat = {m.group(1): to_ms(m.group(2), m.group(3)) for m in LAT.finditer(out)}
    return reqs, lat.get("50"), lat.get("99"), (errors.group(1) if errors else "0"), (sock_err.group(1) if sock_err else "")


def h2load(url, secs, proto="h2"):
    """Successful requests of h2load -c8 -m100 -t1 for `secs` seconds on `url`; fails the
    run unless every request succeeded over `proto` (h2 over TLS, h2c in clear)."""
    out = subprocess.run(["h2load", "-c8", "-m100", "-t1", "-D", str(secs), url],
                         capture_output=True, text=True).stdout
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", out)
    if not m or int(m.group(2)) > 0 or proto not in out:
        raise SystemExit(f"h2load failed\n{out}")
    return int(m.group(1))


def runs(cmd, path, n):
    """Starts the proxy, warms it up, and returns one row per run of wrk."""
    p = start(cmd, PROXY)
    wrk(path, 1)  # warm-up: connections, caches
    rows = []
    for _ in range(n):
        c0, t0 = group_cpu(p.pid), time.time()
        reqs, p50, p99, bad, sockerr = wrk(path, SECS)
        c1, t1 = group_cpu(p.pid), time.time()
        cpu = max(c1 - c0, 1e-9)
        rows.append((reqs / (t1 - t0), p50, p99, reqs / cpu, bad, sockerr))
    stop(p)
    wait_closed(PROXY)
    return rows


def summary(name, rows):
    med = lambda i: statistics.median(r[i] for r in rows)
    return {"name": name, "rps": med(0), "p50": med(1), "p99": med(2), "rpcpu": med(3),
            "bad": ",".join(r[4] for r in rows), "sockerr": "; ".join(r[5] for r in rows if r[5])}


def measure(name, cmd, path):
    return summary(name, runs(cmd, path, RUNS))


def measure_interleaved(contenders, path):
    """Every contender once per round, RUNS rounds: a noisy spell on this shared machine then hits
    all of them instead of one contender's whole block. They share the proxy port, so each run is a
    fresh start with its own warm-up. sluice and sluice-before swap places every other round so
    neither always follows the same process."""
    rows = {name: [] for name, _ in contenders}
    for i in range(RUNS):
        order = list(contenders)
        if i % 2:
            order[0], order[1] = order[1], order[0]
        for name, cmd in order:
            rows[name] += runs(cmd, path, 1)
    return [summary(name, rows[name]) for name, _ in contenders]


def results_for(threads, path):
    if not BASELINE:
        return [measure("sluice", sluice_cmd(threads), path),
                measure("haproxy", haproxy_cmd(threads), path),
                measure("nginx", nginx_cmd(threads), path)]
    return measure_interleaved([("sluice", sluice_cmd(threads)),
                                ("sluice-before", sluice_cmd(threads, BASELINE)),
                                ("haproxy", haproxy_cmd(threads)),
                                ("nginx", nginx_cmd(threads))], path)


def main():
    if not os.path.exists(SLUICE):
        raise SystemExit("build sluice first: cargo build --release -p sluice")
    if BASELINE and not os.access(BASELINE, os.X_OK):
        raise SystemExit(f"SLUICE_BASELINE={BASELINE} is not an executable file")
    origin = nginx_origin()
    print(f"# proxy core benchmark, {time.strftime('%Y-%m-%d')}, {SECS}s x {RUNS} runs (medians), wrk -t1 -c50, nginx origin\n")
    if BASELINE:  # the tables must say that these runs were taken in turns, unlike a default run's
        print(f"sluice-before: {BASELINE}, same configuration as sluice; contenders interleaved run by run\n")
    sizes = [("13 B", "/hello.txt"), ("76 kB", "/page.html")]
    only = os.environ.get("BENCH_ONLY")  # e.g. "76 kB" to run one size while iterating
    for size, path in [x for x in sizes if not only or x[0] == only]:
        for threads in (1, 2):
            results = results_for(threads, path)
            by = {r["name"]: r for r in results}
            best = max(by["haproxy"]["rpcpu"], by["nginx"]["rpcpu"])
            print(f"## {size}, {threads} thread(s)\n")
            print("| proxy | req/s | p50 ms | p99 ms | req per proxy CPU-s | non-2xx |")
            print("| --- | ---: | ---: | ---: | ---: | --- |")
            for r in results:
                print(f"| {r['name']} | {r['rps']:.0f} | {r['p50']:.3f} | {r['p99']:.3f} | {r['rpcpu']:.0f} | {r['bad']} |")
            s, h, n = by["sluice"], by["haproxy"], by["nginx"]
            before = ""
            if "sluice-before" in by:
                b = by["sluice-before"]
                before = f"sluice / sluice-before: req/s {s['rps']/b['rps']:.2f}x, req/CPU-s {s['rpcpu']/b['rpcpu']:.2f}x; "
            print(f"\n{before}sluice / HAProxy: req/s {s['rps']/h['rps']:.2f}x, req/CPU-s {s['rpcpu']/h['rpcpu']:.2f}x; "
                  f"sluice / nginx: req/s {s['rps']/n['rps']:.2f}x, req/CPU-s {s['rpcpu']/n['rpcpu']:.2f}x; "
                  f"sluice / best req/CPU-s: {s['rpcpu']/best:.2f}x\n", flush=True)
    stop(origin)


def cleanup():
    for p in list(procs):
        stop(p)
    shutil.rmtree(work, ignore_errors=True)


def run(main):
    """Runs a benchmark's `main`, stopping what it started and removing its files however
    it ends."""
    try:
        main()
    finally:
        cleanup()


if __name__ == "__main__":
    run(main)
