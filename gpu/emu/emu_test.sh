#!/bin/sh
# emu_test.sh — run bin/m3-gpu's forward, built against the CPU emulation of
# the HIP subset (gpu/emu/hip_emu.h), over model vector cases and judge each
# dump with bin/m3-conform (generation is checked on the device by
# tools/gpu_device_check.sh, so it is declared absent here). This checks the kernels' logic
# (indexing, layouts, MSA selection, MoE routing, rounding points) without a
# GPU; it says nothing about speed or GPU memory-model bugs. Model cases
# whose inputs hold pixel_values run with --pixels (the vision tower on the
# device); cases under */vision/* are component cases run by
# `m3-gpu vision-case`. Every text case also runs with --stream-weights (its
# dump must be byte-identical to the resident one) and, when it has
# params.chunks or params.max_new_tokens, with its chunks and its greedy
# continuation (--chunks, --max-new-tokens), judged in full; bf16 text cases
# also with --exact-kernels (byte-identical here: the emulation's kernels are
# the exact ones).
#
#   sh gpu/emu/emu_test.sh EMU_BIN CONFORM_BIN PYTHON CASE_DIR...
set -e
emu=$1 conform=$2 py=$3
shift 3
tmp=$(mktemp -d /tmp/m3_gpu_emu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# same_dump OPT WHAT: case $c's forward with OPT must dump the bytes of $tmp/dump.safetensors
same_dump() {
  "$emu" forward --model "$c" --tokens "$ids" --dtype "$mode" $1 --quiet \
      --dump "$tmp/opt.safetensors" >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  if cmp -s "$tmp/dump.safetensors" "$tmp/opt.safetensors"; then
    echo "gpu-emu $c $1: dump byte-identical to $2"
  else
    echo "gpu-emu $c $1: FAILED (dump differs from $2)"; exit 1
  fi
}
for c in "$@"; do
  mode=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["mode"])' "$c/case.json")
  case $c in
  */vision/*) # vision component cases: m3-gpu vision-case (gpu/vision.h)
    "$emu" vision-case --case "$c" --dump "$tmp/dump.safetensors" >/dev/null
    if "$conform" check --case "$c" --dump "$tmp/dump.safetensors" --profile "$mode" >"$tmp/out" 2>&1; then
      echo "gpu-emu $c: $(tail -1 "$tmp/out")"
    else
      grep -v ' Pass ' "$tmp/out"; echo "gpu-emu $c: FAILED"; exit 1
    fi
    continue ;;
  esac
  # multimodal model cases carry pixel_values + image_grid_thw in their inputs
  vis=
  if grep -qa '"pixel_values"' "$c/inputs.safetensors"; then vis="--pixels $c/inputs.safetensors"; fi
  ids=$("$py" - "$c/inputs.safetensors" <<'PYEOF'
import json, struct, sys
import numpy as np
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    m = json.loads(f.read(n))['input_ids']
    f.seek(8 + n + m['data_offsets'][0])
    a = np.frombuffer(f.read(m['data_offsets'][1] - m['data_offsets'][0]), dtype=np.int32)
print(','.join(str(int(x)) for x in a))
PYEOF
)
  "$emu" forward --model "$c" --tokens "$ids" --dtype "$mode" $vis --dump "$tmp/dump.safetensors" >/dev/null
  if "$conform" check --case "$c" --dump "$tmp/dump.safetensors" --profile "$mode" \
       --declare-unsupported greedy >"$tmp/out" 2>&1; then
    echo "gpu-emu $c: $(tail -1 "$tmp/out")"
  else
    grep -v ' Pass ' "$tmp/out"; echo "gpu-emu $c: FAILED"; exit 1
  fi
  [ -n "$vis" ] && continue
  # streamed weights: the same bytes as resident ones
  same_dump --stream-weights "resident weights"
  # bf16 --exact-kernels: the emulation has no tensor-core paths, so its default
  # kernels are the exact ones and the dump must not change
  [ "$mode" = bf16 ] && same_dump --exact-kernels "the default kernels"
  # the case's own chunks (and greedy continuation), run as a serving engine runs them
  ext=$("$py" -c 'import json,sys; p=json.load(open(sys.argv[1])).get("params",{}); print(",".join(map(str,p.get("chunks",[]))), p.get("max_new_tokens",0))' "$c/case.json")
  chunks=${ext% *} nnew=${ext#* }
  [ -n "$chunks" ] || [ "$nnew" != 0 ] || continue
  opt= decl="--declare-unsupported greedy"
  [ -n "$chunks" ] && opt="--chunks $chunks"
  [ "$nnew" != 0 ] && opt="$opt --max-new-tokens $nnew" decl=
  "$emu" forward --model "$c" --tokens "$ids" --dtype "$mode" $opt --dump "$tmp/chunked.safetensors" >/dev/null
  if "$conform" check --case "$c" --dump "$tmp/chunked.safetensors" --profile "$mode" $decl >"$tmp/out" 2>&1; then
    echo "gpu-emu $c $opt: $(tail -1 "$tmp/out")"
  else
    grep -v ' Pass ' "$tmp/out"; echo "gpu-emu $c $opt: FAILED"; exit 1
  fi
done
