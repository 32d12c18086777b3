#!/bin/sh
# conform_cli.sh — bin/m3-conform against hostile or careless input, and the
# port author's path through it.
#
#   sh tests/conform_cli.sh CONFORM M3REF PYTHON
#
# Every case: the exit status (0 conforms, 1 does not, 2 bad input / internal
# error) and the message. Dumps are written by `m3-ref forward --case` and
# edited by tests/dump_edit.py (standard library only).
set -u
conform=$1 ref=$2 py=$3
case=vectors/model/tiny_fp32
vcase=vectors/model/vision_tiny_fp32
tmp=$(mktemp -d /tmp/m3-conform-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0 n=0
expect() { # want_rc label cmd...
  want=$1 label=$2
  shift 2
  n=$((n + 1))
  if command -v timeout >/dev/null; then timeout 120 "$@" >"$tmp/out" 2>&1; else "$@" >"$tmp/out" 2>&1; fi
  rc=$?
  if [ $rc -ne "$want" ]; then
    echo "conform-cli: FAILED: $label: exit $rc, want $want"
    grep -v ' Pass ' "$tmp/out" | sed 's/^/    /' | head -12
    fails=$((fails + 1))
  fi
}
has() { # pattern label
  if ! grep -q -- "$1" "$tmp/out"; then
    echo "conform-cli: FAILED: $2: the output lacks \"$1\""
    sed 's/^/    /' "$tmp/out" | head -12
    fails=$((fails + 1))
  fi
}
lacks() { # pattern label
  if grep -q -- "$1" "$tmp/out"; then
    echo "conform-cli: FAILED: $2: the output has \"$1\""
    fails=$((fails + 1))
  fi
}
edit() { "$py" tests/dump_edit.py "$@" || { echo "conform-cli: FAILED: dump_edit.py $*"; fails=$((fails + 1)); }; }

# ---- the faithful dump: m3-ref forward --case (greedy_tokens included) ----------------
"$ref" forward --case $case --dump "$tmp/ok.safetensors" >/dev/null || { echo "conform-cli: m3-ref forward --case failed"; exit 1; }
expect 0 "forward --case dump conforms (greedy_tokens included)" "$conform" check --case $case --dump "$tmp/ok.safetensors"
has "greedy_tokens" "forward --case dump"
lacks "downstream" "a clean pass has no downstream legend"

# ---- help ----------------------------------------------------------------------------------
expect 0 "check --help" "$conform" check --help
has "--no-hash" "check --help"; has "--declare-unsupported CAP" "check --help"
expect 0 "run --help" "$conform" run --help
has "--no-mutants" "run --help"; has "--no-hash" "run --help"

# ---- outputs never onto inputs, nor onto each other; written whole ---------------------------
cp "$tmp/ok.safetensors" "$tmp/keep.safetensors"
expect 2 "--json onto the dump" "$conform" check --case $case --dump "$tmp/ok.safetensors" --json "$tmp/ok.safetensors"
has "is an input" "--json onto the dump"
cmp -s "$tmp/ok.safetensors" "$tmp/keep.safetensors" || { echo "conform-cli: FAILED: --json truncated the dump"; fails=$((fails + 1)); }
expect 2 "--junit onto expected.safetensors" "$conform" check --case $case --dump "$tmp/ok.safetensors" --junit $case/expected.safetensors
has "is an input" "--junit onto expected"
expect 2 "--plot onto the dump" "$conform" check --case $case --dump "$tmp/ok.safetensors" --plot "$tmp/ok.safetensors"
expect 2 "--json and --junit the same file" "$conform" check --case $case --dump "$tmp/ok.safetensors" --json "$tmp/r.out" --junit "$tmp/./r.out"
has "name the same file" "--json = --junit"
expect 0 "outputs next to each other" "$conform" check --case $case --dump "$tmp/ok.safetensors" --json "$tmp/r.json" --junit "$tmp/r.xml" --plot "$tmp/r.png"
ls "$tmp" | grep -q '\.tmp\.' && { echo "conform-cli: FAILED: a temporary output was left behind"; fails=$((fails + 1)); }

# ---- the dump: FIFO, directory, index.json, dtypes, version, names -----------------------
if command -v mkfifo >/dev/null; then
  mkfifo "$tmp/fifo.safetensors"
  expect 2 "FIFO dump (no hang)" "$conform" check --case $case --dump "$tmp/fifo.safetensors"
  has "not a regular file" "FIFO dump"
fi
expect 2 "directory as --dump" "$conform" check --case $case --dump $case
has "is a directory" "directory as --dump"
printf '{"weight_map": {}}' >"$tmp/model.safetensors.index.json"
expect 2 "index.json as --dump" "$conform" check --case $case --dump "$tmp/model.safetensors.index.json"
has "an index.json" "index.json as --dump"
edit "$tmp/ok.safetensors" "$tmp/f64.safetensors" f64:extra
expect 2 "F64 tensor outside the contract" "$conform" check --case $case --dump "$tmp/f64.safetensors"
has "outside the dump contract" "F64 dump"
edit "$tmp/ok.safetensors" "$tmp/v2.safetensors" meta:m3.dump_version=2
expect 2 "dump version 2" "$conform" check --case $case --dump "$tmp/v2.safetensors"
has "m3.dump_version" "dump version 2"
edit "$tmp/ok.safetensors" "$tmp/cap.safetensors" meta:m3.unsupported=telepathy
expect 2 "unknown capability in the dump" "$conform" check --case $case --dump "$tmp/cap.safetensors"
has "unknown capability \"telepathy\"" "capability in the dump"
printf '{"unsupported": ["telepathy"]}' >"$tmp/caps.json"
expect 2 "unknown capability in --capabilities" "$conform" check --case $case --dump "$tmp/ok.safetensors" --capabilities "$tmp/caps.json"
has "unknown capability \"telepathy\"" "capabilities file"
edit "$tmp/ok.safetensors" "$tmp/nul.safetensors" nulname:logits
expect 2 "NUL escape in a tensor name" "$conform" check --case $case --dump "$tmp/nul.safetensors"
has "u0000" "NUL escape"
# an unused 16 GiB tensor (a sparse file) is mapped but never read or widened: under a
# 24 GiB address-space limit (widening it would need 16 GiB more); not under ASan,
# whose shadow memory needs more address space than any such limit
if [ -z "${CONFORM_CLI_ASAN:-}" ]; then
  edit "$tmp/ok.safetensors" "$tmp/huge.safetensors" huge:unused.blob:16
  expect 0 "unused 16 GiB tensor under a 24 GiB address-space limit" sh -c "ulimit -v 25165824; exec \"$conform\" check --case $case --dump \"$tmp/huge.safetensors\""
  has "unrecognised names in the dump: unused.blob" "huge tensor"
  rm -f "$tmp/huge.safetensors"
fi
# mis-shaped: judged from the header, data never read
edit "$tmp/ok.safetensors" "$tmp/shape.safetensors" reshape:logits:40,256
expect 1 "mis-shaped logits" "$conform" check --case $case --dump "$tmp/shape.safetensors"
has "shape \[40,256\], expected \[20,512\]" "mis-shaped logits"
# misnamed: model. prefix, 1-based layers
edit "$tmp/ok.safetensors" "$tmp/pre.safetensors" prefix:model.
expect 1 "model. prefix" "$conform" check --case $case --dump "$tmp/pre.safetensors"
has "unrecognised names in the dump: model\.eagle3\.aux (closest expected: eagle3\.aux), model\.embeddings (closest expected: embeddings)" "model. prefix"
edit "$tmp/ok.safetensors" "$tmp/one.safetensors" shift-layers
expect 1 "1-based layers" "$conform" check --case $case --dump "$tmp/one.safetensors"
has "unrecognised names in the dump: layers\.5\." "1-based layers"
# NaN: NaN metrics, not NMSE 0 / cosine 1
edit "$tmp/ok.safetensors" "$tmp/nan.safetensors" nan:final_norm
expect 1 "all-NaN tensor" "$conform" check --case $case --dump "$tmp/nan.safetensors" --verbose
grep "final_norm " "$tmp/out" | grep -q "Fail.*NaN.*NaN.*NaN" || { echo "conform-cli: FAILED: an all-NaN tensor must show NaN metrics"; grep "final_norm " "$tmp/out"; fails=$((fails + 1)); }

# ---- verdicts --------------------------------------------------------------------------------
edit "$tmp/ok.safetensors" "$tmp/noeagle.safetensors" drop:eagle3.aux
expect 0 "declared capability: conforms" "$conform" check --case $case --dump "$tmp/noeagle.safetensors" --declare-unsupported eagle3 --junit "$tmp/ns.xml"
has "verdict: conforms (1 tensor not supported)" "NotSupported verdict"
grep -q "<skipped" "$tmp/ns.xml" && { echo "conform-cli: FAILED: a conforming dump is not <skipped>"; fails=$((fails + 1)); }
# teacher-forced: NaN in the port's own layer input is the port's failure
edit "$tmp/ok.safetensors" "$tmp/tfnan.safetensors" nan:layers.2.input
expect 1 "teacher-forced NaN layer input is Fail" "$conform" check --case $case --dump "$tmp/tfnan.safetensors" --teacher-forced
lacks "InternalError" "teacher-forced NaN input"
# a golden whose shape disagrees with the case is the suite's fault
mkdir -p "$tmp/badg"; cp $case/* "$tmp/badg/"
edit $case/expected.safetensors "$tmp/badg/expected.safetensors" reshape:logits:40,256
expect 2 "golden shape vs the case" "$conform" check --case "$tmp/badg" --dump "$tmp/ok.safetensors" --no-hash --junit "$tmp/badg.xml"
has "a bad vector" "golden shape"
# vision declared unsupported: a text-only port's vision case is NotSupported
"$ref" forward --case $case --dump "$tmp/ok2.safetensors" >/dev/null
expect 0 "vision case, vision declared unsupported" "$conform" check --case $vcase --dump "$tmp/ok2.safetensors" --declare-unsupported vision
has "not supported" "vision NotSupported"

# ---- exit 2 still reports to CI ----------------------------------------------------------------
expect 2 "bad case dir" "$conform" check --case "$tmp/nothere" --dump "$tmp/ok.safetensors" --junit "$tmp/e.xml" --json "$tmp/e.json"
grep -q "<error" "$tmp/e.xml" && grep -q "nothere" "$tmp/e.xml" || { echo "conform-cli: FAILED: exit 2 wrote no JUnit <error> naming the problem"; fails=$((fails + 1)); }
grep -q '"InternalError"' "$tmp/e.json" || { echo "conform-cli: FAILED: exit 2 left the JSON without the error"; fails=$((fails + 1)); }

# ---- case directories: unlisted payloads, params vs input_ids --------------------------------
mkdir -p "$tmp/unl"; cp $case/* "$tmp/unl/"
cp $case/model.safetensors "$tmp/unl/extra.safetensors"
expect 2 "unlisted payload file" "$conform" check --case "$tmp/unl" --dump "$tmp/ok.safetensors"
has "not listed in case.json" "unlisted file"
mkdir -p "$tmp/nofiles"; cp $case/* "$tmp/nofiles/"
"$py" -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('files'); json.dump(d, open(sys.argv[1],'w'))" "$tmp/nofiles/case.json"
expect 2 "case.json without files" "$conform" check --case "$tmp/nofiles" --dump "$tmp/ok.safetensors"
has "not listed in case.json" "files removed"
mkdir -p "$tmp/badt"; cp $case/* "$tmp/badt/"
"$py" -c "import json,sys; d=json.load(open(sys.argv[1])); d['params']['T']=7; json.dump(d, open(sys.argv[1],'w'))" "$tmp/badt/case.json"
expect 2 "params.T vs input_ids" "$conform" check --case "$tmp/badt" --dump "$tmp/ok.safetensors" --no-hash
has "params.T is 7 but input_ids has 20 tokens" "params.T"

# ---- run DIR ---------------------------------------------------------------------------------
expect 0 "run one dir" "$conform" run $case --teacher-forced
has "summary: 1 case," "run DIR counts one case"
mkdir -p "$tmp/noexp"; cp $case/* "$tmp/noexp/"; rm "$tmp/noexp/expected.safetensors"
"$py" -c "import json,sys; d=json.load(open(sys.argv[1])); d['files'].pop('expected.safetensors'); json.dump(d, open(sys.argv[1],'w'))" "$tmp/noexp/case.json"
expect 0 "run a case without expected.safetensors" "$conform" run "$tmp/noexp" --no-hash
has "no expected.safetensors" "run without expected"

# ---- the plot: a legend entry for NotSupported and InternalError, the bound marked ------------
expect 0 "plot" "$conform" check --case $case --dump "$tmp/noeagle.safetensors" --declare-unsupported eagle3 --plot "$tmp/p.png"
"$py" - "$tmp/p.png" <<'PYEOF' || { echo "conform-cli: FAILED: plot legend"; fails=$((fails + 1)); }
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
px = set(im.getdata())
need = {(80, 170, 200): "not supported", (200, 0, 200): "internal error"}
miss = [v for k, v in need.items() if k not in px]
sys.exit("legend lacks " + ", ".join(miss) if miss else 0)
PYEOF

echo "conform-cli: $((n - fails))/$n passed"
[ $fails -eq 0 ]
