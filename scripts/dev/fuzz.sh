#!/usr/bin/env bash
# Run every fuzz target (fuzz/, cargo-fuzz on the nightly toolchain) for SECONDS in all, split
# evenly, each seeded with its corpus in fuzz/corpus/<target> (kept as it is: the inputs a run
# finds go to fuzz/target/corpus/<target>, which later runs start from too; crashes land in
# fuzz/artifacts/<target>/ and the run stops with an error).
# Prints executions per target and in total (libFuzzer's final stats).
# Usage: scripts/dev/fuzz.sh SECONDS   Installs cargo-fuzz (crates.io) when missing.
# Every crash found becomes a regression test: copy it into fuzz/corpus/<target>/, where
# tests/fuzz_corpus.rs replays it on stable.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SECONDS_TOTAL="${1:?usage: fuzz.sh SECONDS}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
TARGETS=(shard_index shard_pack zarr_json draft legacy chunk_key bytes_codecs mount_options)
PER=$(( SECONDS_TOTAL / ${#TARGETS[@]} ))
[ "$PER" -ge 1 ] || PER=1
cd "$REPO/fuzz"
cargo +nightly fuzz build -O >/dev/null 2>&1 || cargo +nightly fuzz build -O
total=0
printf "%-14s %14s %10s\n" target executions "exec/s"
for t in "${TARGETS[@]}"; do
    log="$(mktemp)"
    mkdir -p "target/corpus/$t"
    if ! cargo +nightly fuzz run -O "$t" "target/corpus/$t" "corpus/$t" -- -max_total_time="$PER" -print_final_stats=1 \
            -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "fuzz: $t found a crash (see fuzz/artifacts/$t/)" >&2
        exit 1
    fi
    execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log" | tail -1)
    rate=$(awk '/stat::average_exec_per_sec/ { print $2 }' "$log" | tail -1)
    printf "%-14s %14s %10s\n" "$t" "${execs:-?}" "${rate:-?}"
    total=$(( total + ${execs:-0} ))
    rm -f "$log"
done
printf "%-14s %14s\n" total "$total"
