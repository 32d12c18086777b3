#!/bin/sh
# emu_msa_decode.sh — bin/m3-gpu forward (built against the CPU emulation of
# the HIP subset for make gpu-emu-test; the device build in
# tools/gpu_device_check.sh, where the merge runs in the tensor-core cluster
# attention's prologue) over a model whose MSA layer has index head dim 128, run
# as a serving engine runs a decode: a 200-row prefill chunk, 60 single-row
# steps, five chunks of 8 rows. Those decode calls take the deferred MSA
# selection of gpu/forward.cu (the streaming indexer ends with its per-block
# lists, m3g_attention_sk_msa merges them and writes the selection that the
# block_indices dump reads), which the model vectors (index dims 16 / 64)
# never reach. The model is a tiny random checkpoint (tests/cli_helper.c
# fixture: layer 0 dense, layer 1 MSA block 32, top-4, 2 index heads, + MoE);
# the golden comes from the reference (bin/m3-conform check without an
# expected file), judged in bf16 with greedy declared absent.
#
#   sh gpu/emu/emu_msa_decode.sh M3_GPU_BIN CONFORM_BIN CLI_HELPER PYTHON
set -e
emu=$1 conform=$2 helper=$3 py=$4
tmp=$(mktemp -d /tmp/m3_emu_msa.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
c=$tmp/case
"$helper" fixture "$c" --layers 2 --dense 1 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 \
  --rotary 8 --vocab 256 --block 32 --topk 4 --index-dim 128 --max-pos 4096 --seed 5 >/dev/null
ids=$("$py" - "$c" <<'PYEOF'
import hashlib, json, os, random, sys
sys.path.insert(0, os.path.join("tools", "adapters"))
import numpy as np
import m3dump
d, T = sys.argv[1], 300
r = random.Random(11)
ids = np.array([r.randrange(256) for _ in range(T)], dtype=np.int32)
with open(os.path.join(d, "inputs.safetensors"), "wb") as f:
    f.write(m3dump.encode({"input_ids": ids}))
files = {}
for n in ("config.json", "model.safetensors", "inputs.safetensors"):
    with open(os.path.join(d, n), "rb") as f:
        files[n] = hashlib.sha256(f.read()).hexdigest()
case = {"id": "model.msa_decode_idx128_bf16", "component": "model", "mode": "bf16",
        "profile": "bf16", "description": "tiny 2-layer model, MSA index head dim 128, decode chunks",
        "clauses": ["M3-DUMP-10"], "params": {"T": T}, "files": files,
        "generator": "gpu/emu/emu_msa_decode.sh"}
with open(os.path.join(d, "case.json"), "w") as f:
    json.dump(case, f, indent=1, sort_keys=True)
print(",".join(str(int(x)) for x in ids))
PYEOF
)
chunks=200
i=0
while [ $i -lt 60 ]; do chunks="$chunks,1"; i=$((i + 1)); done
chunks="$chunks,8,8,8,8,8"
"$emu" forward --model "$c" --tokens "$ids" --dtype bf16 --chunks "$chunks" \
  --dump "$tmp/dump.safetensors" >/dev/null
if "$conform" check --case "$c" --dump "$tmp/dump.safetensors" --profile bf16 \
     --declare-unsupported greedy >"$tmp/out" 2>&1 &&
   grep -q 'attn.block_indices *Pass' "$tmp/out"; then
  echo "gpu-emu msa decode (index dim 128, deferred selection; 200 + 60 x 1 + 5 x 8 rows): $(tail -1 "$tmp/out")"
else
  grep -v ' Pass ' "$tmp/out"; echo "gpu-emu msa decode (index dim 128): FAILED"; exit 1
fi
