#!/usr/bin/env bash
# Builds brig's fuzz targets with cargo-fuzz (nightly, installed pinned under target/tools on
# first use, so a fresh clone needs nothing else) and runs each for a bounded time, all at
# once. A crash fails the run and prints the input that caused it (hex), and the command
# that replays it. Usage: fuzz/run.sh [SECONDS per target, default 20]
# New corpus entries and crash inputs go under target/fuzz; fuzz/corpus stays as committed
# (add a crash input there, with a unit test, once fixed: `cargo test` replays the corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
version=0.13.2
tools=$PWD/target/tools
work=$PWD/target/fuzz
targets=(jail_packets first_bytes dns_query)

if ! cargo +nightly --version >/dev/null 2>&1; then
    rustup toolchain install --profile minimal nightly
fi
if ! "$tools/bin/cargo-fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $version"; then
    cargo install --quiet --locked "cargo-fuzz@$version" --root "$tools"
fi
export PATH=$tools/bin:$PATH
cd fuzz
# Safe Rust: no sanitizer (AddressSanitizer finds nothing the borrow checker has not),
# libFuzzer's coverage and debug assertions (overflow checks) still on. Unoptimized by
# default: half the build time of a release build (4 against 8 CPU minutes from clean),
# for about a tenth of its runs per second; BRIG_FUZZ_PROFILE=release for long runs.
profile=${BRIG_FUZZ_PROFILE:-dev}
build=(--"$profile" --sanitizer none --debug-assertions --target-dir "$work/build")
cargo +nightly fuzz build "${build[@]}"

# The targets run straight from the build, all at once (`cargo fuzz run` would call cargo
# again for each).
bin=$work/build/$(rustc -vV | sed -n 's/^host: //p')/$([[ $profile == dev ]] && echo debug || echo release)
pids=()
for target in "${targets[@]}"; do
    mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
    rm -f "$work/artifacts/$target"/*
    # The first corpus directory takes what libFuzzer finds; the committed one is only read.
    "$bin/$target" "$work/corpus/$target" "corpus/$target" \
        -max_total_time="$seconds" -artifact_prefix="$work/artifacts/$target/" \
        -print_final_stats=1 >"$work/$target.log" 2>&1 &
    pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
    target=${targets[$i]}
    if wait "${pids[$i]}"; then
        echo "fuzz $target: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" |
            grep -o '[0-9]*$') runs in ${seconds} s, no crash"
    else
        status=1
        echo "FAIL: fuzz $target crashed (log: $work/$target.log):" >&2
        grep -m5 -E 'panicked|ERROR|SUMMARY' "$work/$target.log" >&2 || tail -20 "$work/$target.log" >&2
        for input in "$work/artifacts/$target"/*; do
            [[ -f $input ]] || continue
            echo "crash input $input:" >&2
            od -A x -t x1z -v "$input" >&2
            echo "replay: $bin/$target $input" >&2
        done
    fi
done
exit "$status"
