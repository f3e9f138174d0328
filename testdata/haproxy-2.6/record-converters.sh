#!/usr/bin/env bash
# Records HAProxy 2.6's answers for the converters of
# crates/sluice/tests/converter_differential.rs into testdata/haproxy-2.6/converters.txt
# (installs Debian's haproxy package when it is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v haproxy >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy
fi
haproxy -v | sed -n 1p
SLUICE_CONV_RECORD=haproxy cargo test -p sluice --test converter_differential -- --exact converters_answer_as_haproxy_26
