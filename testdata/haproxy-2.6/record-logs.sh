#!/usr/bin/env bash
# Records HAProxy 2.6's access-log lines for the cases of crates/sluice/tests/log_differential.rs
# into testdata/haproxy-2.6/logs/ (installs Debian's haproxy package when it is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v haproxy >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy
fi
haproxy -v | sed -n 1p
SLUICE_LOG_RECORD=haproxy cargo test -p sluice --test log_differential access_log_lines_match_haproxys -- --exact
