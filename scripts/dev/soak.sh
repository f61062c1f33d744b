#!/usr/bin/env bash
# The mixed workload for a long run, with counters and memory sampled (scripts/dev/soak.py):
#   bash scripts/dev/soak.sh MINUTES [local|s3] [--seed N] [--threads N] [--round SECONDS]
# Builds the release binary and the test environment if needed. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,4p "$0"; exit 2; }
bash scripts/setup.sh --test >/dev/null  # the venv, and the S3 test server
cargo build --release --quiet
ZARRFS_BIN="${ZARRFS_BIN:-target/release/zarrfs}" exec .venv/bin/python scripts/dev/soak.py "$@"
