#!/usr/bin/env bash
# Side-by-side benchmark: sluice vs HAProxy vs nginx as reverse proxies in front of one
# nginx origin, same load generator (wrk), same thread counts, keep-alive on both sides.
# Never run in CI. Usage: [BENCH=core|compression|pools|operating|checks|resolvers|peers|splice|uring|rules|cache|accept|tls|h3|h2server|reload|statsrender|instructions|syscalls|cpusplit|wakeups|polls|memory|h2memory] bench/run.sh [seconds-per-run] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for t in haproxy nginx wrk; do command -v "$t" >/dev/null 2>&1 || need+=("$t"); done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
fi
cargo build --release -p sluice
case "${BENCH:-core}" in
    core) exec python3 bench/core.py "${1:-8}" "${2:-3}" ;;
    compression) exec python3 bench/compression.py "${1:-8}" "${2:-3}" ;;
    pools) exec python3 bench/pools.py "${1:-5}" "${2:-3}" ;;
    checks) exec python3 bench/checks.py "${1:-30}" "${2:-3}" ;;
    resolvers) exec python3 bench/resolvers.py "${1:-10}" "${2:-3}" ;;
    peers) exec python3 bench/peers.py "${1:-10}" "${2:-3}" ;;
    splice) exec python3 bench/splice.py "${1:-5}" "${2:-3}" ;;
    uring) exec python3 bench/uring.py "${1:-5}" "${2:-3}" ;;
    statsrender) exec python3 bench/statsrender.py "${1:-20}" ;;
    reload) exec python3 bench/reload.py "${1:-10}" "${2:-3}" ;;
    rules) exec python3 bench/rules.py "${1:-5}" "${2:-3}" ;;
    cache) exec python3 bench/cache.py "${1:-5}" "${2:-3}" ;;
    accept) exec python3 bench/accept.py "${1:-8}" "${2:-3}" ;;
    cpusplit) exec python3 bench/cpusplit.py "${1:-5}" "${2:-3}" ;;
    h2server)
        command -v h2load >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y nghttp2-client
        exec python3 bench/h2server.py "${1:-5}" "${2:-3}" ;;
    memory) exec python3 bench/memory.py "${2:-3}" ;;
    h2memory) exec python3 bench/h2memory.py "${2:-3}" ;;
    h3)
        command -v h2load >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y nghttp2-client
        python3 -c 'import aioquic' 2>/dev/null || python3 -m pip install --quiet aioquic
        exec python3 bench/h3.py "${1:-5}" "${2:-3}" ;;
    tls)
        command -v h2load >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y nghttp2-client
        exec python3 bench/tls.py "${1:-5}" "${2:-3}" ;;
    syscalls)
        command -v perf >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y linux-perf
        exec python3 bench/syscalls.py "${1:-4000}" "${2:-8}" ;;
    wakeups)
        command -v perf >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y linux-perf
        [ -x /usr/bin/time ] || DEBIAN_FRONTEND=noninteractive apt-get install -y time
        exec python3 bench/wakeups.py "${1:-5}" "${2:-3}" ;;
    polls)
        command -v h2load >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y nghttp2-client
        command -v perf >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y linux-perf
        exec python3 bench/polls.py "${1:-30000}" "${2:-2}" ;;
    instructions)
        command -v valgrind >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y valgrind
        exec python3 bench/instructions.py "$@" ;;
    operating)
        dpkg -s libnginx-mod-http-echo >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y libnginx-mod-http-echo
        exec python3 bench/operating.py "${1:-8}" "${2:-3}" ;;
    *) echo "BENCH must be core, compression, pools, operating, checks, resolvers, peers, splice, uring, rules, cache, accept, tls, h3, h2server, statsrender, reload, instructions, syscalls, cpusplit, wakeups, polls, memory or h2memory" >&2; exit 2 ;;
esac
