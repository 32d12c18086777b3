#!/bin/sh
# gpu_device_check.sh — the device-machine run for the GPU path (issue 8):
# build bin/m3-ref, bin/m3-conform and bin/m3-gpu there, judge bin/m3-gpu's
# dumps with bin/m3-conform on every text model vector and on the ragged
# lengths 1, 127, 128, 129, 2047, 2048, 2049, 2200 of the deployment-MSA
# model, compare bin/m3-gpu generate with bin/m3-ref generate on models/demo
# (greedy and seeded sampling, fp32 and bf16), then run the benchmarks (gpu/bench.cu and tools/bench_torch.py).
#
#   sh tools/gpu_device_check.sh OUTDIR
# Headers and libraries the device lacks come from .devroot/ (Debian
# packages unpacked with dpkg -x on the development machine; not committed).
set -u
out=${1:?usage: gpu_device_check.sh OUTDIR}
mkdir -p "$out"
root=$PWD/.devroot
if [ -d "$root" ]; then
  export C_INCLUDE_PATH=$root/usr/include:$root/usr/include/cjson:$root/usr/include/x86_64-linux-gnu
  export CPLUS_INCLUDE_PATH=$C_INCLUDE_PATH
  export LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
PY=python3
B=build-dev
mkdir -p $B && touch $B/.deps-ok   # headers come from .devroot; no apt on the device
log() { echo "$*" | tee -a "$out/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv >"$out/gpu.txt" 2>&1
nvcc --version | tail -2 >>"$out/gpu.txt"
t0=$(date +%s)
if ! make -j16 BUILD=$B bin/m3-ref bin/m3-conform gpu >"$out/build.log" 2>&1; then
  log "BUILD FAILED"; tail -30 "$out/build.log"; exit 1
fi
log "build: $(( $(date +%s) - t0 )) s"

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

judge() { # case_dir mode label
  c=$1 mode=$2 label=$3
  ids=$(ids_of "$c/inputs.safetensors")
  s=$(date +%s.%N)
  if ! bin/m3-gpu forward --model "$c" --tokens "$ids" --dtype "$mode" --dump /tmp/gd.safetensors >/tmp/gd.out 2>&1; then
    log "$label: m3-gpu FAILED: $(tail -2 /tmp/gd.out | tr '\n' ' ')"; return
  fi
  e=$(date +%s.%N)
  bin/m3-conform check --case "$c" --dump /tmp/gd.safetensors --profile "$mode" \
      --declare-unsupported greedy >/tmp/gc.out 2>&1
  rc=$?
  log "$label ($mode, gpu forward $(awk "BEGIN{printf \"%.2f\", $e - $s}") s): rc=$rc $(tail -1 /tmp/gc.out)"
  [ $rc -eq 0 ] || grep -v ' Pass ' /tmp/gc.out | head -12 >>"$out/summary.txt"
}

for c in vectors/model/*; do
  case $c in *vision*) continue ;; esac
  mode=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["mode"])' "$c/case.json")
  judge "$c" "$mode" "$c"
done

# ragged lengths on the deployment MSA model (block 128, top-16, 4 index heads)
base=vectors/model/deploy_msa_2200_fp32  # same model as the bf16 case
for L in 1 127 128 129 2047 2048 2049 2200; do
 for mode in bf16 fp32; do
  d=/tmp/ragged_${L}_$mode; rm -rf $d; mkdir -p $d
  ln -s "$PWD/$base/config.json" $d/config.json
  ln -s "$PWD/$base/model.safetensors" $d/model.safetensors
  $PY - "$base/inputs.safetensors" "$d/inputs.safetensors" $L <<'PYEOF'
import sys
sys.path.insert(0, 'tools')
import st
t = st.load(sys.argv[1])
t = t[0] if isinstance(t, tuple) else t
st.save(sys.argv[2], {'input_ids': t['input_ids'][:int(sys.argv[3])]})
PYEOF
  # a case.json of its own (no expected file: m3-conform runs the reference for the golden)
  $PY - "$base/case.json" "$d" $L $mode <<'PYEOF'
import hashlib, json, os, sys
c = json.load(open(sys.argv[1]))
d, L = sys.argv[2], int(sys.argv[3])
c['mode'] = c['profile'] = sys.argv[4]  # the golden is computed by the reference in this mode
c['id'] = 'model.ragged_%d_%s' % (L, sys.argv[4])
c['description'] = 'first %d tokens of %s' % (L, c['description'])
c['params'] = {'T': L}
files = {}
for f in ('config.json', 'model.safetensors', 'inputs.safetensors'):
    files[f] = hashlib.sha256(open(os.path.join(d, f), 'rb').read()).hexdigest()
c['files'] = files
json.dump(c, open(os.path.join(d, 'case.json'), 'w'), indent=1)
PYEOF
  judge $d $mode "ragged T=$L"
 done
done

# generate on the demo model: bin/m3-gpu vs bin/m3-ref token ids (greedy and
# one seeded sampled run), fp32 and bf16
P="And God said"
for mode in fp32 bf16; do
  for kind in greedy sampled; do
    if [ $kind = greedy ]; then opt="--greedy"; else opt="--temperature 1 --top-k 40 --top-p 0.95 --seed 7"; fi
    r=$(bin/m3-ref generate --model models/demo --prompt "$P" $opt --max-new-tokens 40 --print-ids --dtype $mode 2>/tmp/gr.err)
    s=$(date +%s.%N)
    g=$(bin/m3-gpu generate --model models/demo --prompt "$P" $opt --max-new-tokens 40 --print-ids --dtype $mode 2>/tmp/gg.err)
    grc=$? e=$(date +%s.%N)
    if [ "$r" = "$g" ] && [ $grc -eq 0 ]; then v=IDENTICAL; else v=DIFFERENT; fi
    log "generate demo $mode $kind: ids $v (gpu rc=$grc, $(awk "BEGIN{printf \"%.2f\", $e - $s}") s; $(tail -1 /tmp/gg.err))"
    [ $v = IDENTICAL ] || { log "  ref: $r"; log "  gpu: $g"; }
  done
done

# benchmarks (numbers only; docs/performance.md records them); SKIP_BENCH=1 skips
[ -n "${SKIP_BENCH:-}" ] && { log "total: $(( $(date +%s) - t0 )) s"; exit 0; }
make BUILD=$B gpu/build/bench-gpu >>"$out/build.log" 2>&1 && \
  timeout 200 gpu/build/bench-gpu >"$out/bench-gpu.txt" 2>&1; log "bench-gpu rc=$?"
timeout 150 $PY tools/bench_torch.py >"$out/bench-torch.txt" 2>&1; log "bench-torch rc=$?"
log "total: $(( $(date +%s) - t0 )) s"
