#!/bin/sh
# synth_test.sh — bin/m3-conform synth (spec/synth.md) end to end:
#   1. bad arguments and a checkpoint that does not fit the disk are refused up front,
#      naming the need, and write nothing;
#   2. a tiny-shape checkpoint (MoE, MSA, vision) matches the independent numpy
#      implementation (tools/synth_check.py) element for element, matches its
#      published sha256 sums (vectors/real/checkpoints.sha256), and loads and runs in
#      bin/m3-ref;
#   3. a released-shape checkpoint (1 dense layer, vocabulary 256, 1 vision layer,
#      1.2 GB) matches its published sums and, on sampled elements, synth_check;
#      it is deleted afterwards;
#   4. the real-shape suite pipeline (tools/real_suite.py) on the tiny shapes:
#      every case, its golden, and m3-conform run on them.
# usage: sh tests/synth_test.sh BIN_CONFORM BIN_REF PYTHON BUILD_DIR
set -eu
CONF=$1 REF=$2 PY=$3 B=$4
SUMS=vectors/real/checkpoints.sha256
fail() { echo "synth_test: FAIL: $*"; exit 1; }

# sums NAME DIR: every file of NAME listed in $SUMS matches DIR's
sums() {
    n=$(grep -c "  $1/" "$SUMS" || true)
    [ "$n" -gt 0 ] || fail "$SUMS lists no file of $1"
    grep "  $1/" "$SUMS" | sed "s|  $1/|  |" | (cd "$2" && sha256sum -c --quiet) || fail "$2 differs from $SUMS ($1)"
    echo "synth_test: $2: $n files match the published sums of $1"
}

# 1. refusals
out=$B/synth-refused
rm -rf "$out"
expect_refused() {
    if "$CONF" synth "$@" >"$B/synth.out" 2>&1; then fail "accepted: synth $*"; fi
    grep -q "$EXPECT" "$B/synth.out" || { cat "$B/synth.out"; fail "synth $*: message lacks \"$EXPECT\""; }
    [ ! -e "$out" ] || fail "synth $* wrote $out"
}
EXPECT="seed must be a decimal integer" expect_refused --layers 2 --seed -3 --out "$out"
EXPECT="seed must be a decimal integer" expect_refused --layers 2 --seed 18446744073709551616 --out "$out"
EXPECT="seed must be a decimal integer" expect_refused --layers 2 --seed 12x --out "$out"
EXPECT="layers must be a whole number in \[1, 60\]" expect_refused --layers 61 --seed 1 --out "$out"
EXPECT="vocab must be a whole number in \[256, 200064\]" expect_refused --layers 1 --vocab 200065 --seed 1 --out "$out"
EXPECT="dense-layers 3 exceeds --layers 2" expect_refused --layers 2 --dense-layers 3 --seed 1 --out "$out"
EXPECT="shard-size must be a byte count" expect_refused --layers 1 --shard-size 10 --seed 1 --out "$out"
EXPECT="needs --layers N, --seed S and --out DIR" expect_refused --layers 1 --out "$out"
EXPECT="unknown argument" expect_refused --layers 1 --seed 1 --out "$out" --colour red
echo "synth_test: 9 bad invocations refused before writing"
# 60 layers at the released shapes need 852.51 GB: refused unless this disk has that much
if "$CONF" synth --layers 60 --seed 1 --out "$out" --dry-run >"$B/synth.out" 2>&1; then
    grep -q "852.44 GB of weights" "$B/synth.out" || fail "synth --dry-run: unexpected plan"
    echo "synth_test: this disk holds 852 GB: the disk refusal is not testable here"
else
    grep -q "the checkpoint needs 852.51 GB of disk .* free there" "$B/synth.out" || { cat "$B/synth.out"; fail "disk refusal message"; }
    [ ! -e "$out" ] || fail "the refused synth wrote $out"
    echo "synth_test: a checkpoint larger than the free disk refused up front"
fi

# 2. tiny shapes: exact agreement with the numpy implementation, published sums, runs
tiny=$B/synth-s1-tiny-l3-d1-k2
rm -rf "$tiny"
"$CONF" synth --seed 1 --shape tiny --layers 3 --dense-layers 1 --vision-layers 2 --prompt-len 40 \
    --shard-size 300K --out "$tiny" --quiet >/dev/null 2>"$B/synth.err"
[ ! -s "$B/synth.err" ] || { cat "$B/synth.err"; fail "synth --quiet wrote to stderr"; }
"$PY" tools/synth_check.py "$tiny" --seed 1 --prompt-len 40 --shard-size 300000
sums synth-s1-tiny-l3-d1-k2 "$tiny"
if "$PY" tools/synth_check.py "$tiny" --seed 2 --prompt-len 40 --shard-size 300000 >/dev/null; then
    fail "synth_check accepted the checkpoint of seed 1 as seed 2"
fi
"$REF" forward --model "$tiny" --tokens 5,17,300,2,9 >"$B/synth.out" || fail "m3-ref forward on $tiny"
grep -q "T=5 mode=fp32 layers=3 vocab=512" "$B/synth.out" || fail "m3-ref forward on $tiny: unexpected output"
"$REF" inspect --model "$tiny" | grep -q "vision: 2 layers, hidden 32" || fail "m3-ref inspect: no vision tower"

# 3. released shapes, 1.2 GB: published sums and sampled elements
small=$B/synth-s1-l1-d1-v256-k1
rm -rf "$small"
M3_PROGRESS_INTERVAL=0.05 "$CONF" synth --seed 1 --layers 1 --dense-layers 1 --vocab 256 --vision-layers 1 \
    --out "$small" >/dev/null 2>"$B/synth.err"
sums synth-s1-l1-d1-v256-k1 "$small"
# progress in a log (stderr not a terminal): plain lines of the bytes written, then the summary
grep -q "^m3-conform synth: writing shards, [0-9.]* [KMG]*i*B/1.11 GiB, " "$B/synth.err" ||
    { cat "$B/synth.err"; fail "synth: no progress line of the bytes written"; }
tail -1 "$B/synth.err" | grep -q "^m3-conform synth: $small; wall .*; peak RSS [0-9.]* MiB$" ||
    { cat "$B/synth.err"; fail "synth: the last line of stderr is not the summary"; }
"$PY" tools/synth_check.py "$small" --seed 1 --edge 256 --sample 64
"$REF" inspect --model "$small" | grep -q "hidden 6144, vocab 256, heads 64 (kv 4, head_dim 128" ||
    fail "m3-ref inspect: $small is not at the released shapes"
rm -rf "$small"

# 4. the real-shape suite's pipeline on the tiny shapes
suite=$B/vectors-real-tiny
"$PY" tools/real_suite.py --tiny --out "$suite" --conform "$CONF" >"$B/synth.out" || { cat "$B/synth.out"; fail "real_suite.py --tiny"; }
"$CONF" run "$suite/manifest.json" --quiet
echo "synth_test: passed"
