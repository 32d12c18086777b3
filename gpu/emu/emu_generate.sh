#!/bin/sh
# emu_generate.sh — bin/m3-gpu generate, built against the CPU emulation of
# the HIP subset, must produce the same greedy token ids as bin/m3-ref in
# fp32 (the GPU kernels follow the reference's summation orders there), for
# a single prompt and for the same prompt inside a batch of two. The device
# run (tools/gpu_device_check.sh) repeats this on the GPU, also in bf16 and
# with sampling.
#
#   sh gpu/emu/emu_generate.sh EMU_BIN REF_BIN MODEL_DIR
set -e
emu=$1 ref=$2 model=$3
p="In the beginning"
want=$("$ref" generate --model "$model" --prompt "$p" --greedy --max-new-tokens 8 --print-ids 2>/dev/null)
got=$("$emu" generate --model "$model" --prompt "$p" --greedy --max-new-tokens 8 --print-ids --dtype fp32 2>/dev/null)
batch=$("$emu" generate --model "$model" --tokens 2082 --prompt "$p" --greedy --max-new-tokens 8 --print-ids --dtype fp32 2>/dev/null | sed -n 2p)
if [ -z "$want" ] || [ "$got" != "$want" ] || [ "$batch" != "$want" ]; then
  echo "gpu-emu generate: FAILED: m3-ref '$want', m3-gpu '$got', m3-gpu in a batch '$batch'"
  exit 1
fi
echo "gpu-emu generate $model fp32 greedy: ids equal to m3-ref ($want), alone and in a batch of 2"
