#!/bin/sh
# conform_settle.sh — m3-conform check settles a TieDiverged dump (M3-TOL-8 4).
#
#   sh tests/conform_settle.sh CONFORM CLI_HELPER PYTHON
#
# The dump is a real free-running forward of model/tiny_fp32 (tools/tie_dump.py,
# numpy) whose router row 13 of layer 4 takes its runner-up expert, 1.4e-3 of
# the row's largest score below the golden choice: a near-tie under the bf16
# profile (tie tolerance 2e-2), a plain failure under fp32 (1e-4). Every later
# row and tensor is computed from that choice. Exit codes checked:
#   --no-settle                      3  TieDiverged, left open
#   default                          0  settled: the same dump judged teacher-forced passes
#   fp32 profile                     1  not a tie at all
#   a reached row also wrong         3 with --no-settle, 1 by default (the
#                                       teacher-forced judgement finds it)
#   --tie-dump the golden file       0  a port's own teacher-forced dump that conforms
#   --tie-dump with a layer-1 error  1
#   usage errors                     2
# and the golden's tie evidence (spec/vectors.md M3-VEC-11), on copies of the case:
#   a golden without evidence        1  the near tie is judged strictly, and said so
#   evidence of another golden       2  refused, naming the file
#   an unknown evidence name         2  refused, naming the file
set -u
conform=$1 helper=$2 py=$3
case=vectors/model/tiny_fp32
tmp=$(mktemp -d /tmp/m3-settle-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() { # want_rc label args...
  want=$1 label=$2
  shift 2
  "$conform" check --case $case --declare-unsupported greedy,eagle3 "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ $rc -ne "$want" ]; then
    echo "conform-settle: FAILED: $label: exit $rc, want $want"
    sed 's/^/    /' "$tmp/out" | grep -v ' Pass ' | head -20
    fails=$((fails + 1))
  else
    echo "conform-settle: ok: $label (exit $rc)"
  fi
}
has() { # text label
  if ! grep -q "$1" "$tmp/out"; then
    echo "conform-settle: FAILED: $2: the output lacks \"$1\""
    fails=$((fails + 1))
  fi
}

"$py" tools/tie_dump.py $case 4 13 "$tmp/tie.st" >"$tmp/gen" 2>&1 || {
  echo "conform-settle: FAILED: tools/tie_dump.py:"; cat "$tmp/gen"; exit 1; }
grep -q "expert 1 instead of 4" "$tmp/gen" || {
  echo "conform-settle: FAILED: the forced row is not the documented one:"; cat "$tmp/gen"; exit 1; }
"$helper" edit "$tmp/tie.st" "$tmp/reached.st" bump:final_norm:15:16:0.5 >/dev/null &&
  "$helper" edit $case/expected.safetensors "$tmp/tf_bad.st" bump:layers.1.attn.output:2:3:1 >/dev/null ||
  { echo "conform-settle: FAILED: cli_helper edit"; exit 1; }

expect 3 "bf16, --no-settle: TieDiverged" --dump "$tmp/tie.st" --profile bf16 --no-settle
has "TieDiverged — diverged after the tie-accepted row 13 of layers.4.moe.topk_index" "--no-settle"
expect 0 "bf16: settled teacher-forced on the same dump" --dump "$tmp/tie.st" --profile bf16
has "settling it teacher-forced" "settled"
has "conforms: every difference is a consequence of accepted ties" "settled"
expect 1 "fp32: the runner-up is not a tie" --dump "$tmp/tie.st" --profile fp32
has "Fail — first divergence: layer 4, moe-router" "fp32"
expect 3 "bf16, a wrong reached row, --no-settle: still only TieDiverged" \
  --dump "$tmp/reached.st" --profile bf16 --no-settle
expect 1 "bf16, a wrong reached row: the teacher-forced judgement fails" \
  --dump "$tmp/reached.st" --profile bf16
has "does not conform: the teacher-forced judgement fails" "reached row"
expect 0 "bf16, --tie-dump the golden file" --dump "$tmp/tie.st" --profile bf16 \
  --tie-dump $case/expected.safetensors
expect 1 "bf16, --tie-dump with a layer-1 error" --dump "$tmp/tie.st" --profile bf16 \
  --tie-dump "$tmp/tf_bad.st"
has "first divergence: layer 1, attention" "--tie-dump with a layer-1 error"
expect 0 "a conforming dump: --tie-dump not needed" --dump $case/expected.safetensors \
  --profile bf16 --tie-dump "$tmp/tf_bad.st"
has "was not needed" "not needed"
expect 2 "--tie-dump with --no-settle" --dump "$tmp/tie.st" --tie-dump "$tmp/tie.st" --no-settle
expect 2 "--tie-dump with --teacher-forced" --dump "$tmp/tie.st" --tie-dump "$tmp/tie.st" --teacher-forced
expect 2 "--tie-dump missing" --dump "$tmp/tie.st" --profile bf16 --tie-dump "$tmp/none.st"
has "none.st" "--tie-dump missing"
# ---- the golden's tie evidence (M3-VEC-11) ----
mkcase() { # dir: a copy of the case; the rest: python that edits it (d = the dir)
  d=$1; shift
  mkdir -p "$d" && cp $case/* "$d/" && "$py" -c "import json, hashlib, os, sys
sys.path.insert(0, 'tools')
import st
d = sys.argv[1]
$*
c = json.load(open(os.path.join(d, 'case.json')))
c['files'] = {f: hashlib.sha256(open(os.path.join(d, f), 'rb').read()).hexdigest()
              for f in c['files'] if os.path.exists(os.path.join(d, f))}
json.dump(c, open(os.path.join(d, 'case.json'), 'w'))" "$d" || { echo "conform-settle: FAILED: mkcase $d"; exit 1; }
}
mkcase "$tmp/old" "os.remove(os.path.join(d, 'evidence.safetensors'))"
mkcase "$tmp/other" "import shutil; shutil.copy('vectors/model/tiny_bf16/evidence.safetensors', os.path.join(d, 'evidence.safetensors'))"
mkcase "$tmp/badname" "ev = st.load(os.path.join(d, 'evidence.safetensors')); ev['layers.4.moe.extra'] = ev['layers.4.moe.bias']
open(os.path.join(d, 'evidence.safetensors'), 'wb').write(st.dumps(ev, {'m3.evidence_version': '1', 'm3.golden_sha256': hashlib.sha256(open(os.path.join(d, 'expected.safetensors'), 'rb').read()).hexdigest()}))"
gold=$case
case=$tmp/old
expect 1 "bf16, a golden without tie evidence: the near tie is judged strictly" --dump "$tmp/tie.st" --profile bf16 \
  --no-settle --json "$tmp/old.json"
has "no tie evidence: the golden carries no layers.4.moe.bias" "no evidence"
grep -q '"tie_evidence":"absent"' "$tmp/old.json" && grep -q '"type":"case".*"tie_evidence":"none"' "$tmp/old.json" ||
  { echo "conform-settle: FAILED: no evidence: the JSON lacks tie_evidence absent / none"; fails=$((fails + 1)); }
case=$tmp/other
expect 2 "evidence of another golden" --dump "$tmp/tie.st" --profile bf16
has "evidence.safetensors: m3.golden_sha256" "evidence of another golden"
has "belongs to another golden" "evidence of another golden"
case=$tmp/badname
expect 2 "an unknown evidence name" --dump "$tmp/tie.st" --profile bf16
has "evidence.safetensors: tensor \"layers.4.moe.extra\" is not a tie evidence name" "unknown evidence name"
case=$gold

[ $fails -eq 0 ] || { echo "conform-settle: $fails FAILED"; exit 1; }
echo "conform-settle: all passed"
