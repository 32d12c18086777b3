#!/bin/sh
# run_fuzz.sh — fuzz targets with libFuzzer, one after the other, and log the figures.
#
# usage: fuzz/run_fuzz.sh SECONDS TARGET...   (after `make fuzz-libfuzzer`)
# Each target runs build-fuzz/fuzz/TARGET until RUNS executions (default
# 10,000,000, the bar of docs/fuzzing.md) or SECONDS, whichever comes first, from a
# working copy of fuzz/corpus/TARGET (+ fuzz/regressions/TARGET) in
# build-fuzz/work/TARGET; the log is build-fuzz/work/TARGET.log, crash inputs
# build-fuzz/work/TARGET-crash-*. -max_len is per target (below): large enough
# for every seed, small enough that one input costs bounded work.
# One line per target: executions, seconds, exec/s, coverage, result — the
# figures docs/fuzzing.md records. Run one at a time (one core).
set -u
secs=${1:?usage: run_fuzz.sh SECONDS TARGET...}
shift
runs=${RUNS:-10000000}
for t in "$@"; do
    case $t in
        fuzz_tokenizer) ml=24576 ;;          # the seed tokenizer.json is 19.6 KB
        fuzz_png|fuzz_jpeg) ml=16384 ;;
        fuzz_config|fuzz_case|fuzz_tolerances) ml=8192 ;; # seeds up to 5.3 KB
        fuzz_regex) ml=2048 ;;
        fuzz_prompt) ml=1024 ;;
        *) ml=4096 ;;
    esac
    w=build-fuzz/work/$t
    mkdir -p "$w"
    set -- "$w" "fuzz/corpus/$t"
    [ -d "fuzz/regressions/$t" ] && set -- "$@" "fuzz/regressions/$t"
    log=build-fuzz/work/$t.log
    start=$(date +%s)
    ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "build-fuzz/fuzz/$t" -runs="$runs" -max_total_time="$secs" -rss_limit_mb=2048 -max_len="$ml" \
        -timeout=10 -print_final_stats=1 -artifact_prefix="build-fuzz/work/$t-" "$@" >"$log" 2>&1
    rc=$?
    el=$(( $(date +%s) - start ))
    ex=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
    res=clean
    [ "$rc" -eq 0 ] || res="FAILED rc=$rc (see $log)"
    echo "$t: ${ex:-?} runs, ${el} s, ${rate:-?} exec/s, $cov, max_len $ml, $res"
done
