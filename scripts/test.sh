#!/usr/bin/env bash
# Every test: formatting and lints, Rust unit/property/fs-layer/mount tests, then the
# real-client suite (zarr-python and tensorstore write fixtures, mount them, judge the view).
# Installs what it needs (scripts/setup.sh). Run as root (FUSE mounts).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

bash scripts/setup.sh --test

echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy"
cargo clippy --quiet --all-targets -- -D warnings
echo "test: cargo test"
cargo test --quiet
echo "test: real clients (pytest tests/clients)"
cargo build --quiet
# Includes the remote-source tests: they start moto (S3), Azurite, fake-gcs-server and nginx on
# 127.0.0.1 themselves (scripts/servers.sh) and stop them afterwards.
ZARRFS_BIN="$REPO/target/debug/zarrfs" .venv/bin/python -m pytest -q tests/clients
echo "test: all passed"
