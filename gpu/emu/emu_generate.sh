#!/bin/sh
# emu_generate.sh — bin/m3-gpu generate, built against the CPU emulation of
# the HIP subset, must produce the same greedy token ids as bin/m3-ref in
# fp32 (the GPU kernels follow the reference's summation orders there), for
# a single prompt, for the same prompt inside a batch of two, for a --chat
# prompt (--system, --thinking) and for a vision prompt (--pixels of a
# multimodal model vector: tower, placement at the prefill, then decode).
# The device run (tools/gpu_device_check.sh) repeats the first cases on the
# GPU, also in bf16 and with sampling.
#
#   sh gpu/emu/emu_generate.sh EMU_BIN REF_BIN MODEL_DIR [VISION_CASE_DIR]
#
# VISION_CASE_DIR (default vectors/model/vision_tiny_fp32) is a model vector
# whose inputs.safetensors holds input_ids, pixel_values and image_grid_thw.
set -e
emu=$1 ref=$2 model=$3 vcase=${4:-vectors/model/vision_tiny_fp32}
fail() {
  echo "gpu-emu generate: FAILED: $1"
  exit 1
}
p="In the beginning"
want=$("$ref" generate --model "$model" --prompt "$p" --greedy --max-new-tokens 8 --print-ids 2>/dev/null)
got=$("$emu" generate --model "$model" --prompt "$p" --greedy --max-new-tokens 8 --print-ids --dtype fp32 2>/dev/null)
batch=$("$emu" generate --model "$model" --tokens 2082 --prompt "$p" --greedy --max-new-tokens 8 --print-ids --dtype fp32 2>/dev/null | sed -n 2p)
if [ -z "$want" ] || [ "$got" != "$want" ] || [ "$batch" != "$want" ]; then
  fail "m3-ref '$want', m3-gpu '$got', m3-gpu in a batch '$batch'"
fi
echo "gpu-emu generate $model fp32 greedy: ids equal to m3-ref ($want), alone and in a batch of 2"

# --chat: the prompt rendered as a conversation (ref/prompt.h, shared with m3-ref)
chat="--chat --system Brief. --thinking disabled"
want=$("$ref" generate --model "$model" --prompt "Hi" $chat --greedy --max-new-tokens 2 --print-ids 2>/dev/null)
got=$("$emu" generate --model "$model" --prompt "Hi" $chat --greedy --max-new-tokens 2 --print-ids --dtype fp32 2>/dev/null)
if [ -z "$want" ] || [ "$got" != "$want" ]; then
  fail "$chat: m3-ref '$want', m3-gpu '$got'"
fi
echo "gpu-emu generate $model $chat: ids equal to m3-ref ($want)"

# vision: the case's input_ids (placeholder runs already expanded) and its pixels
ids=$(python3 - "$vcase/inputs.safetensors" <<'PYEOF'
import json, struct, sys
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    m = json.loads(f.read(n))['input_ids']
    assert m['dtype'] == 'I32'
    a, b = m['data_offsets']
    f.seek(8 + n + a)
    raw = f.read(b - a)
print(','.join(str(v) for v in struct.unpack('<%di' % (len(raw) // 4), raw)))
PYEOF
)
vis="--tokens $ids --pixels $vcase/inputs.safetensors"
want=$("$ref" generate --model "$vcase" $vis --greedy --max-new-tokens 6 --print-ids 2>/dev/null)
got=$("$emu" generate --model "$vcase" $vis --greedy --max-new-tokens 6 --print-ids --dtype fp32 2>/dev/null)
if [ -z "$want" ] || [ "$got" != "$want" ]; then
  fail "$vcase --pixels: m3-ref '$want', m3-gpu '$got'"
fi
echo "gpu-emu generate $vcase --pixels fp32 greedy: ids equal to m3-ref ($want)"
