"""Writes hash-placement.txt: which server HAProxy 2.6 picks for each request of a fixed
list, under each hashing configuration of hash-placement.cfg. Needs haproxy and curl; run
from this folder: python3 hash_placement.py > hash-placement.txt

The configuration's servers are its own frontends answering their names, on ports 19101..;
the proxy listens on 19100. Each line: BACKEND KIND KEY SERVER, where KIND is uri (KEY is
the request target), hdr (KEY is the X-User value, target /) or src (KEY is the client
address, target /)."""
import os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = os.path.join(HERE, "hash-placement.cfg")
URIS = ["/", "/index.html", "/api/users/1", "/api/users/2", "/api/orders?id=7",
        "/static/app.js?v=3", "/static/app.css", "/images/logo.png", "/a/b/c/d/e",
        "/a/b/x", "/a/c", "/search?q=haproxy&page=2", "/search?q=sluice", "/health",
        "/favicon.ico", "/blog/2026/11/23/reload", "/blog/2026/11/24", "/u/alice",
        "/u/bob", "/u/carol", "/p?id=1", "/p?id=2", "/p?id=3", "/p?id=42&x=1",
        "/p?x=1&id=99", "/p?other=1", "/Z", "/zz/zz/zz", "/0123456789", "/%41%42"]
USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
SOURCES = [f"127.0.0.{n}" for n in range(1, 21)]
URI_BACKENDS = ["uri_map", "uri_map_w", "uri_cons", "uri_cons_w", "uri_djb2_aval",
                "uri_depth2", "uri_whole", "uri_len5", "param_map", "param_cons"]


def ask(host, target, headers=(), source=None):
    cmd = ["curl", "-s", "--max-time", "5", "-H", f"Host: {host}"]
    for h in headers:
        cmd += ["-H", h]
    if source:
        cmd += ["--interface", source]
    return subprocess.run(cmd + [f"http://127.0.0.1:19100{target}"], capture_output=True,
                          text=True).stdout.strip()


p = subprocess.Popen(["haproxy", "-db", "-f", CFG], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    time.sleep(1)
    for be in URI_BACKENDS:
        for u in URIS:
            print(be, "uri", u, ask(be, u))
    for be in ("hdr_map", "hdr_cons", "expr_map", "expr_cons"):
        for user in USERS:
            print(be, "hdr", user, ask(be, "/", [f"X-User: {user}"]))
    for be in ("src_map", "src_cons", "hashsrc_map", "hashsrc_cons", "hashcrc_map"):
        for s in SOURCES:
            print(be, "src", s, ask(be, "/", source=s))
finally:
    p.terminate()
    p.wait()
