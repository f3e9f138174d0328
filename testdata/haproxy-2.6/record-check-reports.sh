#!/usr/bin/env bash
# Records HAProxy 2.6's health-check reports for crates/sluice/tests/checks.rs
# (tcp_check_reports_match_haproxys, http_check_header_expectations_match_haproxys,
# http_check_comments_and_reports_match_haproxys, smtp_checks_match_haproxys,
# protocol_probes_match_haproxys) into
# testdata/haproxy-2.6/*-reports.txt (installs Debian's haproxy package when it is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v haproxy >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy
fi
haproxy -v | sed -n 1p
SLUICE_CHECK_RECORD=haproxy cargo test -p sluice --test checks match_haproxys
