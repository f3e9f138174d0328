#!/usr/bin/env bash
# Runs Debian's testssl.sh against a sluice TLS bind (ECDSA P-256 certificate made here,
# default TLS settings) and prints the findings of severity LOW and above, if any.
# Never run in CI. Usage: bench/testssl.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v testssl >/dev/null 2>&1 || { apt-get update; DEBIAN_FRONTEND=noninteractive apt-get install -y testssl.sh; }
cargo build --release -p sluice
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/k.pem" \
    -out "$work/c.pem" -days 2 -subj /CN=site.test -addext subjectAltName=DNS:site.test 2>/dev/null
cat "$work/c.pem" "$work/k.pem" > "$work/site.pem"
port=18443
cat > "$work/t.cfg" <<CFG
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:$port ssl crt $work/site.pem alpn h2,http/1.1
    http-request return status 200 content-type text/plain string ok
CFG
target/release/sluice -f "$work/t.cfg" > "$work/sluice.log" 2>&1 &
pid=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
testssl --quiet --color 0 --warnings off 127.0.0.1:$port > "$work/testssl.out" 2>&1 || true
grep -E "VULNERABLE|NOT ok|CRITICAL|HIGH|MEDIUM" "$work/testssl.out" || echo "no finding of severity MEDIUM or above"
grep -E "^ (SSLv|TLS )|Secure Client-Initiated|Heartbleed|ROBOT" "$work/testssl.out"
