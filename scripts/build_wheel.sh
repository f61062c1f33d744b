#!/usr/bin/env bash
# Build the Python wheel: the zarrfs binary (cargo, through maturin's `bindings = "bin"`) and
# the pure-Python package in python/zarrfs, into dist/zarrfs-VERSION-py3-none-manylinux_2_34_x86_64.whl.
#
# Usage: scripts/build_wheel.sh [--profile release|dev]   (default: release, the LTO build)
#   --profile dev reuses target/debug (what scripts/test.sh builds anyway): no 8-minute LTO
#   build in CI. The wheel is the same apart from the binary's speed and size.
#
# maturin and auditwheel come from pip into a build venv (.cache/wheel-venv, pinned in
# scripts/requirements-wheel.txt). The manylinux tag: the binary needs glibc symbols up to
# GLIBC_2.34 (objdump -T), so manylinux_2_34 is the lowest auditwheel accepts; the script
# checks it with `auditwheel show` and fails when the wheel would not be manylinux.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.cache/wheel-venv"
REQS="$REPO/scripts/requirements-wheel.txt"
COMPAT="manylinux_2_34"
PROFILE=release
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) PROFILE="$2"; shift 2 ;;
        *) echo "build_wheel: unknown argument $1" >&2; exit 2 ;;
    esac
done
say() { echo "build_wheel: $*" >&2; }

STAMP="$VENV/.requirements.sha256"
want=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/maturin" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    say "installing maturin and auditwheel into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS"
    echo "$want" > "$STAMP"
fi

mkdir -p "$REPO/dist"
rm -f "$REPO"/dist/zarrfs-*.whl
say "building the wheel (cargo profile $PROFILE, $COMPAT)"
(cd "$REPO" && "$VENV/bin/maturin" build --quiet --profile "$PROFILE" --compatibility "$COMPAT" \
    --out "$REPO/dist" >&2)
wheel=$(ls "$REPO"/dist/zarrfs-*.whl)
tag=$("$VENV/bin/auditwheel" show "$wheel" 2>&1)
if ! grep -q "$COMPAT" <<<"$tag"; then
    echo "$tag" >&2
    say "error: auditwheel does not accept $wheel as $COMPAT"
    exit 1
fi
say "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB; auditwheel: $COMPAT"
echo "$wheel"
