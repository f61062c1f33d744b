#!/usr/bin/env bash
# Install zarrfs: build the release binary and put it at PREFIX/bin/zarrfs (default /usr/local,
# which is on PATH and on the FUSE mount helper's PATH, so `mount -t fuse.zarrfs` and fstab
# entries find it). Installs FUSE's runtime (fuse3: fusermount3, mount.fuse3) through apt when
# missing. Run as root for the default prefix.
#
#   bash scripts/install.sh                  # build and install /usr/local/bin/zarrfs
#   bash scripts/install.sh --systemd        # also the template unit zarrfs@.service
#   options: --prefix DIR  --binary PATH (install a binary already built; no build)
#            --systemd-dir DIR (default /etc/systemd/system)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=/usr/local
BINARY=""
SYSTEMD=0
SYSTEMD_DIR=/etc/systemd/system

say() { echo "install: $*"; }
die() { echo "install: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX="${2:?--prefix needs a directory}"; shift 2 ;;
        --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
        --systemd) SYSTEMD=1; shift ;;
        --systemd-dir) SYSTEMD_DIR="${2:?--systemd-dir needs a directory}"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

if ! command -v fusermount3 >/dev/null || [ ! -x /sbin/mount.fuse3 ]; then
    [ "$(id -u)" = 0 ] || die "fuse3 is missing: install it (apt-get install fuse3) or run as root"
    say "installing fuse3 (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null
fi

# The binary links only the C library (c-blosc and its compressors are compiled in); building
# it needs a C and C++ compiler, which cargo's own linking already needs the C half of.
if [ -z "$BINARY" ] && ! command -v c++ >/dev/null; then
    [ "$(id -u)" = 0 ] || die "a C++ compiler is missing: install it (apt-get install g++) or run as root"
    say "installing g++ (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
fi

if [ -z "$BINARY" ]; then
    command -v cargo >/dev/null || die "cargo is needed to build zarrfs (https://rustup.rs)"
    say "building the release binary (cargo build --release)"
    (cd "$REPO" && cargo build --release --quiet)
    BINARY="$REPO/target/release/zarrfs"
fi
[ -x "$BINARY" ] || die "$BINARY is not an executable"

install -D -m 0755 "$BINARY" "$PREFIX/bin/zarrfs"
say "installed $PREFIX/bin/zarrfs ($("$PREFIX/bin/zarrfs" --version))"

if [ "$SYSTEMD" = 1 ]; then
    mkdir -p "$SYSTEMD_DIR"
    sed "s#/usr/local/bin/zarrfs#$PREFIX/bin/zarrfs#g" "$REPO/systemd/zarrfs@.service" \
        > "$SYSTEMD_DIR/zarrfs@.service"
    chmod 0644 "$SYSTEMD_DIR/zarrfs@.service"
    say "installed $SYSTEMD_DIR/zarrfs@.service"
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
    fi
    say "enable a mount with: systemctl enable --now zarrfs@\$(systemd-escape --path /mnt/data).service"
fi
