#!/bin/sh
# real_device_check.sh — the real-shape suite on the GPU machine.
#
# Lays out vectors/real/manifest.json (tools/real_suite.py: the synthetic
# 2-layer released-shape checkpoint and its cases) under $B/vectors-real,
# checks the checkpoint's shards against the published sums
# (vectors/real/checkpoints.sha256), computes the goldens with the reference
# (bin/m3-conform golden, one process per case, in parallel), dumps the cases
# with HF transformers in fp32 (tools/real_hf_dumps.py) and with bin/m3-gpu in
# bf16, and judges every dump with bin/m3-conform.
#
#   sh tools/real_device_check.sh OUTDIR start    build, suite, goldens started in the background
#   sh tools/real_device_check.sh OUTDIR dumps    HF and m3-gpu dumps, then wait for the goldens and judge
#   sh tools/real_device_check.sh OUTDIR chunked  the chunked and prefix-reuse cases run as a serving port
#                                                 runs them (tools/real_hf_chunked.py, HF through its cache),
#                                                 an index-K-losing run that must fail, m3-gpu's greedy ids
#   sh tools/real_device_check.sh OUTDIR bg       suite + a 4-layer checkpoint synthesized and the
#                                                 2,600-token golden computed, all in the background
#   sh tools/real_device_check.sh OUTDIR gpu      m3-gpu's chunked prefills of the chunked and
#                                                 prefix-reuse cases (fp32, bf16), judged; resident
#                                                 against streamed weights on the 4-layer checkpoint
#   sh tools/real_device_check.sh OUTDIR stream   build, the 4-layer checkpoint synthesized, then
#                                                 resident against streamed weights alone (bf16,
#                                                 fp32): bitwise, the prefill rate, the link
#
# GOLDEN_CASES (environment) narrows the goldens that `start` computes.
# Two calls because one device command runs at most 10 minutes; the goldens
# run on between them, detached with setsid. Headers and
# libraries the device lacks come from .devroot/ (Debian packages unpacked
# with dpkg -x on the development machine; not committed).
set -u
out=${1:?usage: real_device_check.sh OUTDIR start|dumps|chunked|bg|gpu|stream|tf|collect}
phase=${2:?usage: real_device_check.sh OUTDIR start|dumps|chunked|bg|gpu|stream|tf|collect}
mkdir -p "$out"
. tools/devroot_env.sh
PY=python3
B=build-dev
S=$B/vectors-real/real
G=$B/real-goldens   # the goldens' logs and exit codes
D=$B/real-dumps
log() { echo "$*" | tee -a "$out/summary.txt"; }
# the cases whose one-shot runs differ (chunked_decode / prefix_reuse share prompt_2600's)
GOLDEN_CASES=${GOLDEN_CASES:-"prompt_1 prompt_129 prompt_2049 prompt_2600 greedy_2049 vision_image"}
TEXT_CASES="prompt_1 prompt_129 prompt_2049 prompt_2600 greedy_2049"

ids_of() { $PY - "$1" <<'PYEOF'
import json, struct, sys
import numpy as np
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    m = json.loads(f.read(n))['input_ids']
    f.seek(8 + n + m['data_offsets'][0])
    a = np.frombuffer(f.read(m['data_offsets'][1] - m['data_offsets'][0]), dtype=np.int32)
print(','.join(str(int(x)) for x in a))
PYEOF
}

if [ "$phase" = start ]; then
  t0=$(date +%s)
  mkdir -p $B && touch $B/.deps-ok   # headers come from .devroot; no apt on the device
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv >"$out/gpu.txt" 2>&1
  if ! make -j16 BUILD=$B bin/m3-ref bin/m3-conform gpu >"$out/build.log" 2>&1; then
    log "BUILD FAILED"; tail -30 "$out/build.log"; exit 1
  fi
  log "build: $(( $(date +%s) - t0 )) s; $(nproc) cores; $(df -h . | tail -1 | awk '{print $4}') free"
  t1=$(date +%s)
  /usr/bin/time -v $PY tools/real_suite.py --out $B/vectors-real --no-golden --no-verify \
      >"$out/suite.log" 2>"$out/suite.time" || { log "real_suite FAILED"; tail -20 "$out/suite.log" "$out/suite.time"; exit 1; }
  log "suite laid out (synth included): $(( $(date +%s) - t1 )) s, peak RSS $(grep 'Maximum resident' "$out/suite.time" | awk '{print $6}') KB"
  ck=$(ls -d $B/vectors-real/checkpoints/* | head -1)
  t2=$(date +%s)
  # the shards' sums against the published ones, in parallel
  (cd "$ck" && ls *.safetensors *.json | xargs -P 16 -n 1 sha256sum) | sort -k2 >"$out/checkpoint.sha256"
  name=$(basename "$ck")
  grep " $name/" vectors/real/checkpoints.sha256 | sed "s# $name/# #" | sort -k2 >/tmp/published.sha256
  if [ -s /tmp/published.sha256 ] && join -j 2 /tmp/published.sha256 "$out/checkpoint.sha256" | awk '$2 != $3 {bad=1} END {exit bad}'; then
    log "checkpoint $name: $(wc -l </tmp/published.sha256) published sums, all equal ($(( $(date +%s) - t2 )) s)"
  else
    log "checkpoint $name: sums DIFFER from vectors/real/checkpoints.sha256 (or none published)"
  fi
  rm -rf $G; mkdir -p $G
  for c in $GOLDEN_CASES; do
    setsid sh -c "/usr/bin/time -v bin/m3-conform golden --case $S/$c --no-hash --quiet >$G/$c.log 2>&1; echo \$? >$G/$c.rc" </dev/null >/dev/null 2>&1 &
  done
  log "goldens started: $GOLDEN_CASES"
  exit 0
fi

wait_goldens() { # seconds-from-t0 limit
  while :; do
    left=0
    for c in $GOLDEN_CASES; do [ -f $G/$c.rc ] || left=$((left + 1)); done
    [ $left -eq 0 ] && return 0
    [ $(( $(date +%s) - t0 )) -gt $1 ] && { log "goldens still running: $left"; return 1; }
    sleep 5
  done
}
greedy_compare() { # m3-gpu's fp32 greedy ids (the last ints of gpu_greedy_fp32.txt) against the golden's
  [ -f $S/greedy_2049/expected.safetensors ] || return 0
  $PY - $S/greedy_2049/expected.safetensors "$out/gpu_greedy_fp32.txt" <<'PYEOF' | tee -a "$out/summary.txt"
import json, struct, sys, re
import numpy as np
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    m = json.loads(f.read(n))['greedy_tokens']
    f.seek(8 + n + m['data_offsets'][0])
    g = np.frombuffer(f.read(m['data_offsets'][1] - m['data_offsets'][0]), dtype=np.int32).tolist()
txt = open(sys.argv[2]).read() if len(sys.argv) > 2 else ''
got = [int(x) for x in re.findall(r'-?\d+', txt)]
print("greedy_2049: golden %s, m3-gpu fp32 %s: %s" % (g, got[-len(g):], "equal" if got[-len(g):] == g else "DIFFER"))
PYEOF
}
judge() { # case dump profile label [extra]
  c=$1 d=$2 p=$3 label=$4; shift 4
  [ -f $S/$c/expected.safetensors ] || { log "$label: no golden"; return; }
  [ -f "$d" ] || { log "$label: no dump"; return; }
  bin/m3-conform check --case $S/$c --dump "$d" --profile $p --no-hash "$@" >"$out/check_$label.txt" 2>&1
  log "$label: rc=$? $(grep 'verdict' "$out/check_$label.txt" | head -1)"
}

if [ "$phase" = chunked ]; then
  t0=$(date +%s)
  mkdir -p $D
  [ -x bin/m3-conform ] || make -j16 BUILD=$B bin/m3-ref bin/m3-conform gpu >"$out/build.log" 2>&1
  # HF through its cache while the goldens finish (kept from an earlier call)
  [ -f $D/prefix_lost.hf_fp32.safetensors ] || PYTHONUNBUFFERED=1 timeout 300 $PY tools/real_hf_chunked.py --mode fp32 \
      $S/chunked_decode_2600:$D/chunked.hf_fp32.safetensors \
      $S/prefix_reuse_2600:$D/prefix.hf_fp32.safetensors:from=1 \
      $S/prefix_reuse_2600:$D/prefix_lost.hf_fp32.safetensors:from=1:lose-index-cache >"$out/hf_chunked.log" 2>&1
  log "hf chunked dumps rc=$? ($(( $(date +%s) - t0 )) s): $(grep -c '\-> ' "$out/hf_chunked.log") written; $(tail -1 "$out/hf_chunked.log")"
  if [ ! -f $D/prompt_2600.gpu_bf16.safetensors ]; then
    bin/m3-gpu forward --model "$S/prompt_2600" --tokens "$(ids_of "$S/prompt_2600/inputs.safetensors")" \
        --dtype bf16 --dump $D/prompt_2600.gpu_bf16.safetensors >"$out/gpu_prompt_2600.log" 2>&1
    log "m3-gpu forward prompt_2600 rc=$?"
  fi
  ids=$(ids_of "$S/greedy_2049/inputs.safetensors")
  [ -s $D/gpu_greedy_fp32.txt ] || bin/m3-gpu generate --model "$S/greedy_2049" --tokens "$ids" \
      --max-new-tokens 8 --greedy --print-ids --dtype fp32 >$D/gpu_greedy_fp32.txt 2>"$out/gpu_greedy_fp32.err"
  cp $D/gpu_greedy_fp32.txt "$out/gpu_greedy_fp32.txt"
  log "m3-gpu generate greedy_2049 fp32 rc=$?: $(head -c 300 "$out/gpu_greedy_fp32.txt" | tr '\n' ' ')"
  wait_goldens 420
  # the chunked cases' golden is the one-shot golden of the same prompt (M3-DUMP-5)
  if [ -f $G/prompt_2600.rc ] && [ "$(cat $G/prompt_2600.rc)" = 0 ]; then
    for c in chunked_decode_2600 prefix_reuse_2600; do cp $S/prompt_2600/expected.safetensors $S/$c/expected.safetensors; done
    log "golden prompt_2600: $(sha256sum $S/prompt_2600/expected.safetensors | cut -c1-16)..., copied to the chunked cases"
  fi
  judge chunked_decode_2600 $D/chunked.hf_fp32.safetensors fp32 hf_fp32_chunked_through_cache &
  judge prefix_reuse_2600 $D/prefix.hf_fp32.safetensors fp32 hf_fp32_prefix_reuse_through_cache &
  judge prefix_reuse_2600 $D/prefix_lost.hf_fp32.safetensors fp32 hf_fp32_prefix_reuse_index_k_lost &
  judge prefix_reuse_2600 $D/prompt_2600.gpu_bf16.safetensors bf16 gpu_bf16_prefix_reuse_one_pass --declare-unsupported greedy &
  wait
  greedy_compare
  log "chunked phase: $(( $(date +%s) - t0 )) s"
  exit 0
fi

R4=$B/real-4l   # 4 layers at the released shapes (3 dense + 1 MSA + MoE), vocabulary 16,384
# resident against streamed weights on the 4-layer checkpoint, a 2,048-token prompt, bf16 and fp32
stream_compare() {
  mkdir -p $D
  ids4=$($PY - $R4/inputs.safetensors <<'PYEOF'
import json, struct, sys
import numpy as np
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    m = json.loads(f.read(n))['input_ids']
    f.seek(8 + n + m['data_offsets'][0])
    a = np.frombuffer(f.read(m['data_offsets'][1] - m['data_offsets'][0]), dtype=np.int32)[:2048]
print(','.join(str(int(x)) for x in a))
PYEOF
)
  cat $R4/*.safetensors >/dev/null   # the checkpoint in the page cache for both runs
  for dt in bf16 fp32; do
    bin/m3-gpu forward --model $R4 --tokens "$ids4" --dtype $dt --dump $D/r4.$dt.resident.safetensors >"$out/r4_${dt}_resident.log" 2>&1
    log "4-layer resident $dt: rc=$? $(grep 'wall' "$out/r4_${dt}_resident.log" | tail -1)"
    bin/m3-gpu forward --model $R4 --tokens "$ids4" --dtype $dt --stream-weights --dump $D/r4.$dt.streamed.safetensors >"$out/r4_${dt}_streamed.log" 2>&1
    log "4-layer streamed $dt: rc=$? $(grep -E 'streamed weights|wall' "$out/r4_${dt}_streamed.log" | tr '\n' ' ')"
    if cmp -s $D/r4.$dt.resident.safetensors $D/r4.$dt.streamed.safetensors; then
      log "4-layer $dt: streamed dump BYTE-IDENTICAL to resident ($(stat -c %s $D/r4.$dt.resident.safetensors) bytes)"
    else
      log "4-layer $dt: streamed dump DIFFERS from resident"
    fi
    rm -f $D/r4.$dt.resident.safetensors $D/r4.$dt.streamed.safetensors
  done
}
if [ "$phase" = stream ]; then
  t0=$(date +%s)
  mkdir -p $B && touch $B/.deps-ok
  make -j16 BUILD=$B bin/m3-conform gpu >"$out/build.log" 2>&1 || { log "BUILD FAILED"; tail -20 "$out/build.log"; exit 1; }
  [ -f $R4/model.safetensors.index.json ] || bin/m3-conform synth --seed 1 --layers 4 --vocab 16384 --out $R4 --quiet \
      >"$out/r4.log" 2>&1 || { log "4-layer synth FAILED: $(tail -2 "$out/r4.log")"; exit 1; }
  log "4-layer synth: $(du -sh $R4 | cut -f1), $(( $(date +%s) - t0 )) s"
  stream_compare
  log "stream phase: $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "$phase" = bg ]; then
  mkdir -p $B && touch $B/.deps-ok
  make -j16 BUILD=$B bin/m3-ref bin/m3-conform gpu >"$out/build.log" 2>&1 || { log "BUILD FAILED"; exit 1; }
  rm -rf $G; mkdir -p $G
  setsid sh -c "$PY tools/real_suite.py --out $B/vectors-real --no-golden --no-verify >$G/suite.log 2>&1 && touch $G/suite.done &&
    bin/m3-conform golden --case $S/prompt_2600 --no-hash --quiet >$G/prompt_2600.log 2>&1; echo \$? >$G/prompt_2600.rc" </dev/null >/dev/null 2>&1 &
  setsid sh -c "bin/m3-conform synth --seed 1 --layers 4 --vocab 16384 --out $R4 --quiet >$G/r4.log 2>&1; echo \$? >$G/r4.rc" </dev/null >/dev/null 2>&1 &
  log "background: suite + golden prompt_2600, 4-layer synth"
  exit 0
fi
if [ "$phase" = gpu ]; then
  t0=$(date +%s)
  mkdir -p $D
  while [ ! -f $G/suite.done ] && [ $(( $(date +%s) - t0 )) -lt 200 ]; do sleep 3; done
  ids=$(ids_of "$S/prompt_2600/inputs.safetensors")
  for c in prefix_reuse_2600 chunked_decode_2600; do
    ch=$($PY -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["params"]["chunks"])))' $S/$c/case.json)
    for dt in fp32 bf16; do
      s1=$(date +%s.%N)
      bin/m3-gpu forward --model $S/$c --tokens "$ids" --dtype $dt --chunks "$ch" --quiet \
          --dump $D/$c.gpu_$dt.chunked.safetensors >"$out/gpu_${c}_$dt.log" 2>&1
      log "m3-gpu forward --chunks ($c, $dt): rc=$? $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $s1}") s"
    done
  done
  while [ ! -f $G/r4.rc ] && [ $(( $(date +%s) - t0 )) -lt 300 ]; do sleep 3; done
  log "4-layer synth: rc=$(cat $G/r4.rc 2>/dev/null) $(du -sh $R4 2>/dev/null | cut -f1)"
  stream_compare
  while [ ! -f $G/prompt_2600.rc ] && [ $(( $(date +%s) - t0 )) -lt 480 ]; do sleep 3; done
  if [ "$(cat $G/prompt_2600.rc 2>/dev/null)" = 0 ]; then
    for c in chunked_decode_2600 prefix_reuse_2600; do
      cp $S/prompt_2600/expected.safetensors $S/$c/
      cp $S/prompt_2600/evidence.safetensors $S/$c/ 2>/dev/null
    done
    log "golden prompt_2600 $(sha256sum $S/prompt_2600/expected.safetensors | cut -c1-16)..."
    for c in prefix_reuse_2600 chunked_decode_2600; do
      judge $c $D/$c.gpu_fp32.chunked.safetensors fp32 gpu_fp32_chunked_$c --declare-unsupported greedy &
    done
    wait
    for c in prefix_reuse_2600 chunked_decode_2600; do
      setsid sh -c "bin/m3-conform check --case $S/$c --dump $D/$c.gpu_bf16.chunked.safetensors --profile bf16 --no-hash --declare-unsupported greedy >$G/judge_bf16_$c.txt 2>&1; echo \$? >$G/judge_bf16_$c.rc" </dev/null >/dev/null 2>&1 &
    done
    log "bf16 chunked judgements started in the background ($G/judge_bf16_*)"
  else
    log "golden prompt_2600 not ready"
  fi
  log "gpu phase: $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "$phase" = tf ]; then
  t0=$(date +%s)
  mkdir -p $B $D && touch $B/.deps-ok
  make -j16 BUILD=$B bin/m3-ref bin/m3-conform gpu >"$out/build.log" 2>&1 || { log "BUILD FAILED"; tail -20 "$out/build.log"; exit 1; }
  $PY tools/real_suite.py --out $B/vectors-real --no-golden --no-verify --only prompt_129,prompt_2049 >"$out/suite.log" 2>&1 || { log "suite FAILED"; exit 1; }
  for c in prompt_129 prompt_2049; do
    bin/m3-conform golden --case $S/$c --no-hash --quiet >"$out/golden_$c.log" 2>&1 &
  done
  wait
  log "suite + goldens: $(( $(date +%s) - t0 )) s"
  for c in prompt_129 prompt_2049; do
    for dt in fp32 bf16; do
      bin/m3-gpu forward --model $S/$c --tokens "$(ids_of $S/$c/inputs.safetensors)" --dtype $dt --stream-weights \
          --teacher-forced $S/$c/expected.safetensors --dump $D/$c.tf_$dt.safetensors --quiet >"$out/tf_${c}_$dt.log" 2>&1
      log "m3-gpu forward --teacher-forced --stream-weights ($c, $dt): rc=$?"
      judge $c $D/$c.tf_$dt.safetensors $dt tf_${c}_$dt --declare-unsupported greedy
    done
  done
  log "tf phase: $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "$phase" = collect ]; then
  for f in $G/judge_bf16_*.txt; do
    [ -f "$f" ] || continue
    cp "$f" "$out/"
    log "$(basename $f .txt): rc=$(cat ${f%.txt}.rc 2>/dev/null) $(grep 'verdict' "$f" | tail -1) $(tail -1 "$f")"
  done
  exit 0
fi

# ---- dumps: HF fp32 and m3-gpu bf16 while the goldens finish --------------------------------
t0=$(date +%s)
mkdir -p $D
pairs=""
for c in $TEXT_CASES; do pairs="$pairs $S/$c:$D/$c.hf_fp32.safetensors"; done
PYTHONUNBUFFERED=1 timeout 330 $PY tools/real_hf_dumps.py --mode fp32 $pairs >"$out/hf.log" 2>&1
log "hf dumps rc=$? ($(( $(date +%s) - t0 )) s): $(tail -1 "$out/hf.log")"
for c in prompt_1 prompt_129 prompt_2049 prompt_2600 vision_image; do
  s=$(date +%s.%N)
  vis=
  grep -qa '"pixel_values"' "$S/$c/inputs.safetensors" && vis="--pixels $S/$c/inputs.safetensors"
  if bin/m3-gpu forward --model "$S/$c" --tokens "$(ids_of "$S/$c/inputs.safetensors")" --dtype bf16 $vis \
       --dump $D/$c.gpu_bf16.safetensors >"$out/gpu_$c.log" 2>&1; then
    log "m3-gpu forward $c: $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $s}") s"
  else
    log "m3-gpu forward $c FAILED: $(tail -2 "$out/gpu_$c.log" | tr '\n' ' ')"
  fi
done
# greedy: m3-gpu generate against the golden's greedy_tokens (compared below)
ids=$(ids_of "$S/greedy_2049/inputs.safetensors")
bin/m3-gpu generate --model "$S/greedy_2049" --tokens "$ids" --max-new-tokens 8 --greedy --print-ids \
    --dtype fp32 >"$out/gpu_greedy_fp32.txt" 2>"$out/gpu_greedy_fp32.err"
log "m3-gpu generate greedy_2049 fp32 rc=$?: $(tail -1 "$out/gpu_greedy_fp32.txt")"
wait_goldens 540
for c in $GOLDEN_CASES; do
  [ -f $G/$c.rc ] || continue
  log "golden $c: rc=$(cat $G/$c.rc) $(grep -E 'Elapsed|Maximum resident' $G/$c.log | awk '{print $NF}' | tr '\n' ' ')"
  [ "$(cat $G/$c.rc)" = 0 ] && sha256sum $S/$c/expected.safetensors | sed "s#$S/##" >>"$out/goldens.sha256"
done
for c in $TEXT_CASES; do judge $c $D/$c.hf_fp32.safetensors fp32 "hf_fp32_$c"; done
for c in prompt_1 prompt_129 prompt_2049 prompt_2600 vision_image; do
  judge $c $D/$c.gpu_bf16.safetensors bf16 "gpu_bf16_$c" --declare-unsupported greedy
done
# a chunked and a prefix-reuse case judged on the one-shot dumps (ports that run one pass)
judge chunked_decode_2600 $D/prompt_2600.hf_fp32.safetensors fp32 hf_fp32_chunked_decode_2600
judge prefix_reuse_2600 $D/prompt_2600.gpu_bf16.safetensors bf16 gpu_bf16_prefix_reuse_2600 --declare-unsupported greedy
greedy_compare
log "dumps phase: $(( $(date +%s) - t0 )) s"
