#!/usr/bin/env bash
# Every test: formatting and lints, Rust unit/property/fs-layer/mount tests, then the
# real-client suite (zarr-python and tensorstore write fixtures, mount them, judge the view),
# which includes zarr-python's own test machinery through mounts with zarr 3.1 and 3.4
# (tests/clients/test_zarr_suites.py) and the Zarr tests of xarray and dask through a local and an S3 mount
# (tests/clients/test_client_suites.py); then the client reads, writes and xarray again with the
# newest zarr-python (3.4, .venv-zarr34).
# Installs what it needs (scripts/setup.sh). Run as root (FUSE mounts).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

bash scripts/setup.sh --test

echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy"
cargo clippy --quiet --workspace --all-targets -- -D warnings
echo "test: cargo test"
cargo test --quiet
echo "test: real clients (pytest tests/clients)"
# zarrfs and the delaying proxy of the latency tests (bench/delay-proxy, a workspace member:
# tests/clients/latency.py finds it in target/debug).
cargo build --quiet --workspace
# The wheel from that debug build (maturin; seconds, no release build), for
# tests/clients/test_wheel.py: a fresh venv installs it and runs the README's Python examples.
echo "test: the wheel (scripts/build_wheel.sh --profile dev)"
ZARRFS_WHEEL=$(bash scripts/build_wheel.sh --profile dev)
export ZARRFS_WHEEL
# Includes the remote-source tests: they start moto (S3), Azurite, fake-gcs-server and nginx on
# 127.0.0.1 themselves (scripts/servers.sh) and stop them afterwards.
# Both client runs go on after a failure, so one CI run reports both.
failed=0
ZARRFS_BIN="$REPO/target/debug/zarrfs" .venv/bin/python -m pytest -q tests/clients || failed=1
# The same client paths with zarr 3.4 (about 90 s): reads through the view, writes through the
# local and S3 views, metadata writes, xarray/dask, and the names clients create and remove. Azure is left to the run above (its client
# library is not in .venv-zarr34; the mount does the same for zarr-python either way).
echo "test: real clients with zarr 3.4 (reads, writes, xarray)"
ZARRFS_BIN="$REPO/target/debug/zarrfs" .venv-zarr34/bin/python -m pytest -q -p no:cacheprovider \
    tests/clients/test_view_data.py tests/clients/test_write_clients.py \
    tests/clients/test_write_metadata.py tests/clients/test_remote_write.py \
    tests/clients/test_consolidated.py tests/clients/test_names.py -k "not azure" || failed=1
[ "$failed" = 0 ] || { echo "test: real-client tests failed (see above)"; exit 1; }
echo "test: all passed"
