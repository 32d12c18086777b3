#!/bin/sh
# conform_port.sh — the port-facing contract of m3-conform: partial dumps
# (capability internals, M3-DUMP-6), row subsets and case row selectors
# (M3-DUMP-10/11, with a 16,384-token case), written by the numpy-only
# writer tools/adapters/m3dump.py.
#
#   sh tests/conform_port.sh CONFORM M3REF CLI_HELPER PYTHON WORKDIR
#
# WORKDIR holds the generated long case (no golden file: the kit computes it
# with the reference). Every check states the exit code it wants and, where it
# matters, a phrase the output must hold.
set -u
conform=$1 ref=$2 helper=$3 py=$4 work=$5
tiny=vectors/model/tiny_fp32
strip="$py tools/adapters/m3dump.py strip"
tmp=$(mktemp -d /tmp/m3-port-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
run() { # want_rc label command...
  want=$1 label=$2
  shift 2
  "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ $rc -ne "$want" ]; then
    echo "conform-port: FAILED: $label: exit $rc, want $want"
    grep -v ' Pass \| NotSupported ' "$tmp/out" | head -20 | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "conform-port: ok: $label (exit $rc)"
  fi
}
has() { # text label
  if ! grep -qF -- "$1" "$tmp/out"; then
    echo "conform-port: FAILED: $2: the output lacks \"$1\""
    fails=$((fails + 1))
  fi
}
mk() { # label command... (a preparation step that must succeed)
  label=$1
  shift
  "$@" >"$tmp/mk" 2>&1 || { echo "conform-port: FAILED: $label:"; cat "$tmp/mk"; exit 1; }
}

# ---- partial dumps: capability internals --------------------------------------------
mk "strip faithful" $strip $tiny/expected.safetensors "$tmp/res.st" --residual-only
run 0 "residual-only dump of a faithful port" "$conform" check --case $tiny --dump "$tmp/res.st"
has "not judged: 34 tensors absent from the dump (embeddings: = layers.0.input; 33 of capability internals" "residual-only faithful"
mk "strip mutant" $strip vectors/mutants/shared_x2/dump.safetensors "$tmp/res_bad.st" --residual-only
run 1 "residual-only dump of a buggy port (shared expert x2)" \
  "$conform" check --case $tiny --dump "$tmp/res_bad.st" --profile bf16
has "first divergence: layer 3 (layers.3.output; the layer's internals are not in the dump, so localised to the layer)" \
  "residual-only buggy"
mk "drop one internal" $strip $tiny/expected.safetensors "$tmp/drop.st" --drop layers.1.ffn_norm
run 1 "an internal missing without the declaration" "$conform" check --case $tiny --dump "$tmp/drop.st"
has "layers.1.ffn_norm" "undeclared internal"
has "missing from the dump" "undeclared internal"
run 0 "the same dump, internals declared on the command line" \
  "$conform" check --case $tiny --dump "$tmp/drop.st" --declare-unsupported internals
mk "drop embeddings" $strip $tiny/expected.safetensors "$tmp/noemb.st" --drop embeddings
run 0 "embeddings absent, layers.0.input present" "$conform" check --case $tiny --dump "$tmp/noemb.st"
has "embeddings: = layers.0.input" "embeddings absent"
mk "drop embeddings and layer 0 input" $strip $tiny/expected.safetensors "$tmp/noemb2.st" \
  --drop embeddings,layers.0.input
run 1 "embeddings and layers.0.input both absent" "$conform" check --case $tiny --dump "$tmp/noemb2.st"
has "embeddings" "embeddings and input absent"

# ---- tools/adapters/m3capture.py: the mappings' calling conventions, simulated (no torch) ---------
for m in HF_TRANSFORMERS VLLM SGLANG; do
  mk "capture $m" "$py" tests/capture_sim.py $tiny $tiny/expected.safetensors $m "$tmp/cap_$m.st"
  run 0 "m3capture $m (simulated calls), the golden values" "$conform" check --case $tiny --dump "$tmp/cap_$m.st"
done
mk "capture VLLM buggy" "$py" tests/capture_sim.py $tiny vectors/mutants/shared_x2/dump.safetensors VLLM "$tmp/cap_bad.st"
run 1 "m3capture VLLM (simulated calls), the shared-expert x2 port" \
  "$conform" check --case $tiny --dump "$tmp/cap_bad.st" --profile bf16
has "first divergence: layer 3, moe (layers.3.mlp.output)" "m3capture buggy"

# ---- row subsets on the 20-token case ----------------------------------------------------
mk "rows subset" $strip $tiny/expected.safetensors "$tmp/rows.st" --rows '*4~1,-3:' --logits-rows=-2:
run 0 "a row subset of a faithful dump" "$conform" check --case $tiny --dump "$tmp/rows.st"
has "rows: only the 14 of 20 positions the dump carries were judged" "rows subset"
mk "rows subset, residual-only, buggy" $strip vectors/mutants/shared_x2/dump.safetensors "$tmp/rows_bad.st" \
  --residual-only --rows '*4~1,-3:'
run 1 "a residual-only row subset of the buggy port" "$conform" check --case $tiny --dump "$tmp/rows_bad.st" --profile bf16
has "first divergence: layer 3 (layers.3.output" "rows subset buggy"
# hostile row sets, written around m3dump's own checks
cat >"$tmp/bad_rows.py" <<'EOF'
import sys
sys.path.insert(0, "tools/adapters")
import numpy as np, m3dump
t, meta = m3dump.read_dump(sys.argv[1])
kind, out = sys.argv[2], sys.argv[3]
rows = {"dup": [0, 3, 3, 7], "range": [0, 3, 20, 21], "order": [0, 7, 3, 9]}.get(kind, [0, 3, 4, 7])
take = [min(r, 19) for r in rows]
t = {k: (v[take] if v.ndim and v.shape[0] == 20 and k != "greedy_tokens" else v) for k, v in t.items()
     if not k.endswith("block_indices")}
t["rows"] = np.array(rows, dtype=np.int32)
if kind == "count":
    t["layers.2.output"] = t["layers.2.output"][:3]
if kind == "orphan":
    t["nothere.rows"] = np.array([1], dtype=np.int32)
open(out, "wb").write(m3dump.encode(t, {"m3.unsupported": "block_indices"}))
EOF
for k in dup range order count orphan; do
  mk "bad rows $k" "$py" "$tmp/bad_rows.py" $tiny/expected.safetensors $k "$tmp/bad_$k.st"
done
run 2 "rows with a duplicate" "$conform" check --case $tiny --dump "$tmp/bad_dup.st"
has "bad_dup.st: tensor \"rows\": position 3 appears twice" "duplicate rows"
run 2 "rows out of range" "$conform" check --case $tiny --dump "$tmp/bad_range.st"
has "bad_range.st: tensor \"rows\" entry 2: position 20 is outside [0, 20)" "rows out of range"
run 2 "rows not ascending" "$conform" check --case $tiny --dump "$tmp/bad_order.st"
has "positions must ascend" "rows not ascending"
run 2 "a tensor with neither T rows nor its row set's" "$conform" check --case $tiny --dump "$tmp/bad_count.st"
has "bad_count.st: tensor \"layers.2.output\" has 3 rows; its row set \"rows\" has 4 positions" "row count"
run 2 "NAME.rows without NAME" "$conform" check --case $tiny --dump "$tmp/bad_orphan.st"
has "\"nothere.rows\" is the row set of \"nothere\"" "orphan row set"
run 0 "a good hand-written subset" "$py" "$tmp/bad_rows.py" $tiny/expected.safetensors ok "$tmp/ok.st"
run 0 "a good hand-written subset judged" "$conform" check --case $tiny --dump "$tmp/ok.st" \
  --declare-unsupported block_indices
run 2 "teacher forcing a row-subset dump" "$conform" check --case $tiny --dump "$tmp/ok.st" --teacher-forced \
  --declare-unsupported block_indices
has "teacher forcing needs every position of \"layers.0.input\"" "teacher-forced subset"

# ---- a 16,384-token case: the rows the case wants ------------------------------------------
long=$work/long_16k
mk "long case" "$py" tools/make_long_case.py "$helper" "$long"
mk "rows" sh -c "'$conform' rows --case '$long' >'$tmp/want'"
mk "logits rows" sh -c "'$conform' rows --case '$long' --logits >'$tmp/want_logits'"
n_want=$(tr ',' '\n' <"$tmp/want" | wc -l)
[ "$n_want" -eq 842 ] || { echo "conform-port: FAILED: the long case wants $n_want rows, not 842"; fails=$((fails + 1)); }
"$py" -c "
import sys; sys.path.insert(0, 'tools/adapters'); import m3dump
want = [int(x) for x in open('$tmp/want').read().split(',')]
assert want == m3dump.parse_selector('*blocks~1,2048:2112,-16:', 16384, 64), 'm3dump and m3-conform disagree'
" || { echo "conform-port: FAILED: m3dump.parse_selector and m3-conform rows disagree"; fails=$((fails + 1)); }
toks=$("$py" -c "
import sys; sys.path.insert(0, 'tools/adapters'); import m3dump
t, _ = m3dump.read_dump('$long/inputs.safetensors'); print(','.join(map(str, t['input_ids'])))")
mk "m3-ref forward 16K" "$ref" forward --model "$long" --tokens "$toks" --dump "$tmp/long_full.st"
mk "strip 16K" $strip "$tmp/long_full.st" "$tmp/long_rows.st" --rows "$(cat "$tmp/want")" \
  --logits-rows="$(cat "$tmp/want_logits")" --declare eagle3
run 0 "16K: the rows the case wants, logits for the last 16" \
  "$conform" check --case "$long" --dump "$tmp/long_rows.st"
has "rows: only the 842 of 16384 positions the dump carries were judged" "16K rows"
mk "bump 16K" "$py" -c "
import sys; sys.path.insert(0, 'tools/adapters'); import m3dump, numpy as np
t, meta = m3dump.read_dump('$tmp/long_rows.st')
j = int(np.searchsorted(t['rows'], 8192))
t['layers.1.output'][j] += 0.05
open('$tmp/long_bad.st', 'wb').write(m3dump.encode(t, meta))"
run 1 "16K: one wrong row (position 8192) of layer 1" "$conform" check --case "$long" --dump "$tmp/long_bad.st"
has "first divergence: layer 1, residual (layers.1.output)" "16K wrong row"
mk "strip 16K short" $strip "$tmp/long_full.st" "$tmp/long_short.st" --rows '*blocks~1,-16:' --block 64 \
  --logits-rows="$(cat "$tmp/want_logits")" --declare eagle3
run 1 "16K: a dump lacking rows the case wants" "$conform" check --case "$long" --dump "$tmp/long_short.st"
has "the case wants 61 positions this dump's rows lack (first: 2050" "16K missing rows"

# ---- a checkpoint teacher-forced: no case, slices, jobs, merge (M3-DUMP-12) ------------------
run 0 "the reference reads only routed experts (the others NaN: same dump)" \
  "$py" tests/unrouted_experts.py "$ref" $tiny "$tmp/unrouted" 5,17
has "the dumps are identical; with a routed expert NaN too they differ" "unrouted experts"
mut=vectors/mutants/shared_x2/dump.safetensors
run 0 "checkpoint dir, the golden dump" "$conform" check --teacher-forced --model $tiny \
  --dump $tiny/expected.safetensors --jobs 2
has "case checkpoint.tiny_fp32#teacher-forced" "checkpoint golden"
run 1 "checkpoint dir, the buggy port, --jobs 3" "$conform" check --teacher-forced --model $tiny --dump $mut --jobs 3 \
  --json "$tmp/whole.jsonl"
has "first divergence: layer 3, moe (layers.3.mlp.output)" "checkpoint buggy"
run 0 "slice 0-2 (2 jobs)" "$conform" check --teacher-forced --model $tiny --dump $mut --layers 0-2 --jobs 2 \
  --result "$tmp/s1.json"
has "slice: layers 0-2 of 5" "slice 0-2"
run 1 "slice 3-4 and the head" "$conform" check --teacher-forced --model $tiny --dump $mut --layers 3-4 \
  --result "$tmp/s2.json"
run 1 "merge of the two slices" "$conform" merge "$tmp/s2.json" "$tmp/s1.json" --json "$tmp/merged.jsonl" \
  --junit "$tmp/merged.xml"
has "first divergence: layer 3, moe (layers.3.mlp.output)" "merge"
grep -o '"tensor":"[^"]*","key":"[^"]*","layer":[-0-9]*,"component":"[^"]*","result":"[^"]*"' "$tmp/whole.jsonl" \
  >"$tmp/a" && grep -o '"tensor":"[^"]*","key":"[^"]*","layer":[-0-9]*,"component":"[^"]*","result":"[^"]*"' \
  "$tmp/merged.jsonl" >"$tmp/b" && cmp -s "$tmp/a" "$tmp/b" ||
  { echo "conform-port: FAILED: the merged slices differ from the whole run"; fails=$((fails + 1)); }
grep -q 'failures="1"' "$tmp/merged.xml" ||
  { echo "conform-port: FAILED: the merged JUnit file has no failure"; fails=$((fails + 1)); }
run 2 "merge: a gap" "$conform" merge "$tmp/s1.json"
has "layers 3-4 are in no slice result" "merge gap"
run 2 "merge: an overlap" "$conform" merge "$tmp/s1.json" "$tmp/s1.json" "$tmp/s2.json"
has "field \"layers\": layer 0 is also in" "merge overlap"
run 0 "slice 3-4 of the golden dump" "$conform" check --teacher-forced --model $tiny \
  --dump $tiny/expected.safetensors --layers 3-4 --result "$tmp/s3.json" --declare-unsupported internals
run 2 "merge: a slice of another dump" "$conform" merge "$tmp/s1.json" "$tmp/s3.json"
has "s3.json: field \"case\": another case or dump" "merge other case"
"$py" -c "
import json, sys
d = json.load(open(sys.argv[1])); d['kit'] = '0.9'; json.dump(d, open(sys.argv[2], 'w'))" "$tmp/s2.json" "$tmp/s4.json"
run 2 "merge: a slice of another kit version" "$conform" merge "$tmp/s1.json" "$tmp/s4.json"
has "s4.json: field \"kit\" is \"0.9\"" "merge other kit"
"$py" -c "
import json, sys
d = json.load(open(sys.argv[1])); d['records'][0]['ties']['rows'][1] = -1e300; json.dump(d, open(sys.argv[2], 'w'))" "$tmp/s2.json" "$tmp/s5.json"
run 2 "merge: a record's rows entry out of range" "$conform" merge "$tmp/s1.json" "$tmp/s5.json"
has "s5.json: records[0]: field \"rows\"[1] = -1e+300 is not a whole number in [-1, 1e15]" "merge rows range"
run 2 "--layers past L" "$conform" check --teacher-forced --model $tiny --dump $mut --layers 3-5
has "--layers 3-5: the model has 5 layers (0..4)" "layers past L"
run 2 "--layers reversed" "$conform" check --teacher-forced --model $tiny --dump $mut --layers 4-3
run 2 "--jobs 0" "$conform" check --teacher-forced --model $tiny --dump $mut --jobs 0
has "--jobs \"0\"" "jobs 0"
run 2 "--model without --teacher-forced" "$conform" check --model $tiny --dump $mut
run 2 "--model and --case" "$conform" check --teacher-forced --model $tiny --case $tiny --dump $mut
mk "residual-only subset for the checkpoint" $strip $mut "$tmp/tf_res.st" --residual-only --logits-rows=-4:
run 1 "checkpoint, residual-only dump, logits for 4 rows" "$conform" check --teacher-forced --model $tiny \
  --dump "$tmp/tf_res.st" --jobs 2
has "first divergence: layer 3 (layers.3.output; the layer's internals are not in the dump" "checkpoint residual-only"

[ $fails -eq 0 ] || { echo "conform-port: $fails FAILED"; exit 1; }
echo "conform-port: all passed"
