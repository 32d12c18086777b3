#!/bin/sh
# run_fuzz.sh — fuzz targets with libFuzzer for a while and log the figures.
#
# usage: fuzz/run_fuzz.sh SECONDS TARGET...   (after `make fuzz-libfuzzer`)
# Each target runs build-fuzz/fuzz/TARGET for SECONDS from a working copy of
# fuzz/corpus/TARGET (+ fuzz/regressions/TARGET) in build-fuzz/work/TARGET;
# the log is build-fuzz/work/TARGET.log, crash inputs build-fuzz/work/TARGET-crash-*.
# The last line of each log ("Done N runs in S second(s)") is the figure
# docs/fuzzing.md records.
set -u
secs=${1:?usage: run_fuzz.sh SECONDS TARGET...}
shift
for t in "$@"; do
    w=build-fuzz/work/$t
    mkdir -p "$w"
    set -- "$w" "fuzz/corpus/$t"
    [ -d "fuzz/regressions/$t" ] && set -- "$@" "fuzz/regressions/$t"
    ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "build-fuzz/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="build-fuzz/work/$t-" "$@" >"build-fuzz/work/$t.log" 2>&1
    rc=$?
    echo "$t rc=$rc $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "build-fuzz/work/$t.log")"
done
