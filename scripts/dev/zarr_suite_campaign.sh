#!/usr/bin/env bash
# A longer campaign of zarr-python's own test machinery (tests/zarr_suites) through writable
# zarrfs mounts: for each round, each zarr venv (zarr 3.1: .venv, zarr 3.4: .venv-zarr34) and
# each source (local: an empty directory; s3: an empty prefix of the moto bucket, default
# options), a fresh mount and one run of both suites, the state machine randomized from a new
# seed and larger than in CI. Figures for notes, not a CI gate.
#
# Usage: scripts/dev/zarr_suite_campaign.sh [ROUNDS]     (default 3)
# Environment:
#   ZARR_SUITE_EXAMPLES, ZARR_SUITE_STEPS   state machine size (default 100 x 50)
#   CAMPAIGN_VENVS    "zarr3.1 zarr3.4" (default both)     CAMPAIGN_SOURCES  "local s3"
#   CAMPAIGN_SUITES   the suite modules (default: both)    ZARRFS_BIN  (default target/debug)
#   CAMPAIGN_DIR      where results go (default .cache/zarr-suite-campaign/<UTC time>)
#   ZARR_SUITE_SHRINK=1  shrink failing examples (slow through a mount)
# Output: $CAMPAIGN_DIR/summary.tsv (round, venv, source, seed, exit, seconds, passed/failed
# counts, failed zarr tests), one pytest log and one daemon log per run; a table at the end.
# Needs scripts/setup.sh --test. Servers it starts (s3) are stopped at the end.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
ROUNDS="${1:-3}"
BIN="${ZARRFS_BIN:-$REPO/target/debug/zarrfs}"
VENVS=(${CAMPAIGN_VENVS:-zarr3.1 zarr3.4})
SOURCES=(${CAMPAIGN_SOURCES:-local s3})
SUITES=(${CAMPAIGN_SUITES:-test_store_suite.py test_hierarchy_machine.py})
export ZARR_SUITE_EXAMPLES="${ZARR_SUITE_EXAMPLES:-100}"
export ZARR_SUITE_STEPS="${ZARR_SUITE_STEPS:-50}"
OUT="${CAMPAIGN_DIR:-$REPO/.cache/zarr-suite-campaign/$(date -u +%Y%m%dT%H%M%SZ)}"
WORK="$(mktemp -d /tmp/zarr-suite-campaign.XXXXXX)"
export XDG_CACHE_HOME="$WORK/cache-home"   # the remote mounts' journals
RUN_PREFIX="zarr-suite-campaign-$(date -u +%Y%m%d-%H%M%S)-$$"
mkdir -p "$OUT"

say() { echo "campaign: $*" >&2; }
[ -x "$BIN" ] || { say "no zarrfs binary at $BIN (cargo build, or set ZARRFS_BIN)"; exit 2; }

venv_python() {
    case "$1" in
        zarr3.1) echo "$REPO/.venv/bin/python" ;;
        zarr3.4) echo "$REPO/.venv-zarr34/bin/python" ;;
        *) say "unknown venv $1"; exit 2 ;;
    esac
}

started_s3=0
MNT=""
cleanup() {
    if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
        fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    fi
    if [[ " ${SOURCES[*]} " == *" s3 "* ]]; then
        "$REPO/.venv/bin/python" -c 'import sys; sys.path.insert(0, "scripts")
import seed_remote; seed_remote.delete_prefix("s3", sys.argv[1])' "$RUN_PREFIX" \
            >/dev/null 2>&1 || true
    fi
    if [ "$started_s3" = 1 ]; then
        bash "$REPO/scripts/servers.sh" stop s3 >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

if [[ " ${SOURCES[*]} " == *" s3 "* ]]; then
    bash "$REPO/scripts/servers.sh" status s3 >/dev/null 2>&1 || started_s3=1
    bash "$REPO/scripts/servers.sh" start s3 >/dev/null
    eval "$(bash "$REPO/scripts/servers.sh" env s3)"
    export AWS_ENDPOINT_URL AWS_ALLOW_HTTP AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION AWS_DEFAULT_REGION
fi

# mount_source SOURCE N -> mounts on $WORK/mnt-N, sets MNT and LOG
mount_source() {
    local source=$1 n=$2 src
    MNT="$WORK/mnt-$n"
    LOG="$OUT/run-$n.daemon.log"
    mkdir -p "$MNT"
    case "$source" in
        local) src="$WORK/src-$n"; mkdir -p "$src" ;;
        s3) src=$(bash "$REPO/scripts/servers.sh" url s3 "$RUN_PREFIX/$n") ;;
        *) say "unknown source $source"; exit 2 ;;
    esac
    RUST_LOG="${ZARRFS_RUST_LOG:-zarrfs=info}" "$BIN" mount "$src" "$MNT" --log-file "$LOG" 2>>"$LOG"
}

printf "round\tvenv\tsource\tseed\texit\tseconds\tpassed\tfailed\tfailed_tests\n" > "$OUT/summary.tsv"
say "results in $OUT (state machine ${ZARR_SUITE_EXAMPLES} examples x ${ZARR_SUITE_STEPS} steps)"
n=0
for round in $(seq 1 "$ROUNDS"); do
    for venv in "${VENVS[@]}"; do
        for source in "${SOURCES[@]}"; do
            n=$((n + 1))
            seed=$(( (RANDOM << 15) | RANDOM ))
            mount_source "$source" "$n"
            log="$OUT/run-$n.pytest.log"
            junit="$WORK/junit-$n.xml"
            start=$(date +%s.%N)
            set +e
            ZARR_SUITE_ROOT="$MNT/suite" ZARR_SUITE_SEED="$seed" \
                timeout 3600 "$(venv_python "$venv")" -m pytest -q -p no:cacheprovider \
                "--hypothesis-seed=$seed" "--junitxml=$junit" \
                "${SUITES[@]/#/tests/zarr_suites/}" > "$log" 2>&1
            code=$?
            set -e
            secs=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
            fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
            MNT=""
            counts=$(python3 - "$junit" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).iter("testcase"))
except (OSError, ET.ParseError):
    print("0\t0\t(no report)"); sys.exit()
bad = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
skipped = [c for c in cases if c.find("skipped") is not None]
names = ",".join(c.get("name") for c in bad)
print(f"{len(cases) - len(bad) - len(skipped)}\t{len(bad)}\t{names}")
EOF
)
            printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$round" "$venv" "$source" "$seed" "$code" \
                "$secs" "$counts" >> "$OUT/summary.tsv"
            say "run $n: round $round $venv $source seed $seed: exit $code in ${secs}s ($(echo "$counts" | cut -f2) failed)"
        done
    done
done
column -t -s $'\t' "$OUT/summary.tsv"
