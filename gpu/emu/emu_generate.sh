#!/bin/sh
# emu_generate.sh — bin/m3-gpu generate, built against the CPU emulation of
# the HIP subset, must produce the same greedy token ids as bin/m3-ref in
# fp32 (the GPU kernels follow the reference's summation orders there), for
# a single prompt, for the same prompt inside a batch of two, for a --chat
# prompt (--system, --thinking), for a --conversation file (and its refusal
# beside --tokens) and for a vision prompt (--pixels of a multimodal model
# vector: tower, placement at the prefill, then decode),
# and for Eagle3 speculative decoding (--draft models/demo-drafter, or the
# drafter directory in $EMU_DRAFT: ids and acceptance statistics equal to
# m3-ref's at K = 3, K = 1 and one seeded sampled run; a missing drafter and
# one whose hidden size is not the target's fail as m3-ref does).
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

# --conversation FILE: the file rendered as the one prompt (ref/conversation.h)
conv=vectors/chat/cases/single_user_default.json
want=$("$ref" generate --model "$model" --conversation "$conv" --thinking disabled --greedy --max-new-tokens 2 --print-ids 2>/dev/null)
got=$("$emu" generate --model "$model" --conversation "$conv" --thinking disabled --greedy --max-new-tokens 2 --print-ids --dtype fp32 2>/dev/null)
if [ -z "$want" ] || [ "$got" != "$want" ]; then
  fail "--conversation $conv: m3-ref '$want', m3-gpu '$got'"
fi
rc=0
"$emu" generate --model "$model" --conversation "$conv" --tokens 268 --greedy --max-new-tokens 2 >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--conversation with --tokens: exit $rc, want 2"
echo "gpu-emu generate $model --conversation: ids equal to m3-ref ($want); with --tokens refused (exit 2)"

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

# --draft (Eagle3 speculative decoding, models/demo-drafter): the same ids and
# the same statistics (target forwards, accepted / drafted) as m3-ref's
# speculative run, fp32 greedy at K = 3 and K = 1 and one seeded sampled run
# (ref/speculative.c's loop on both sides, so the uniforms are drawn alike).
# The three emulated runs go in parallel (each is one host thread).
draft=${EMU_DRAFT:-models/demo-drafter}
tmp=$(mktemp -d /tmp/m3_emu_gen.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# (each run has a round that rejects a draft; sampled: a draw from the residual)
set -- "k3|--prompt|In the beginning|--greedy --max-new-tokens 5 --spec-tokens 3" \
       "k1|--tokens|2082|--greedy --max-new-tokens 4 --spec-tokens 1" \
       "sampled|--prompt|And God said|--temperature 0.8 --seed 1 --max-new-tokens 5 --spec-tokens 2"
for c in "$@"; do
  IFS='|' read -r tag popt ptxt opts <<CEOF
$c
CEOF
  ( rc=0; "$ref" generate --model "$model" $popt "$ptxt" $opts --draft "$draft" --print-ids \
      >"$tmp/$tag.ref" 2>"$tmp/$tag.referr" || rc=$?
    echo "rc=$rc" >>"$tmp/$tag.ref" ) &
  ( rc=0; "$emu" generate --model "$model" $popt "$ptxt" $opts --draft "$draft" --print-ids \
      --dtype fp32 >"$tmp/$tag.gpu" 2>"$tmp/$tag.gpuerr" || rc=$?
    echo "rc=$rc" >>"$tmp/$tag.gpu" ) &
done
wait
spec_stat() { grep -o 'speculative (K [0-9]*): .* drafts)' "$1" || true; }
for c in "$@"; do
  tag=${c%%|*}
  want="$(tr '\n' ' ' <"$tmp/$tag.ref")$(spec_stat "$tmp/$tag.referr")"
  got="$(tr '\n' ' ' <"$tmp/$tag.gpu")$(spec_stat "$tmp/$tag.gpuerr")"
  grep -q '^rc=0$' "$tmp/$tag.ref" || fail "--draft $tag: m3-ref failed: $(cat "$tmp/$tag.referr")"
  [ "$got" = "$want" ] || fail "--draft $tag: m3-ref '$want', m3-gpu '$got' ($(tail -1 "$tmp/$tag.gpuerr"))"
  echo "gpu-emu generate $model --draft $draft ($tag): ids and statistics equal to m3-ref ($want)"
done

# bad drafters: the error of m3-ref (naming the file) and its exit status
mkdir "$tmp/h128"
sed 's/"hidden_size": [0-9]*/"hidden_size": 128/' "$draft/config.json" >"$tmp/h128/config.json"
ln -s "$PWD/$draft/model.safetensors" "$tmp/h128/model.safetensors"
for d in "$tmp/missing" "$tmp/h128"; do
  rrc=0 grc=0
  "$ref" generate --model "$model" --tokens 268 --greedy --max-new-tokens 2 --draft "$d" \
    >/dev/null 2>"$tmp/bad.ref" || rrc=$?
  "$emu" generate --model "$model" --tokens 268 --greedy --max-new-tokens 2 --draft "$d" \
    --dtype fp32 >/dev/null 2>"$tmp/bad.gpu" || grc=$?
  rmsg=$(sed -n 's/^m3-ref generate: //p' "$tmp/bad.ref") gmsg=$(sed -n 's/^m3-gpu generate: //p' "$tmp/bad.gpu")
  if [ $rrc -eq 0 ] || [ $grc -ne $rrc ] || [ -z "$rmsg" ] || [ "$gmsg" != "$rmsg" ]; then
    fail "--draft $d: m3-ref exit $rrc '$rmsg', m3-gpu exit $grc '$gmsg'"
  fi
  case $rmsg in *"$d"*) ;; *) fail "--draft $d: the error does not name the file: $rmsg" ;; esac
  echo "gpu-emu generate --draft $(basename "$d"): exit $grc and m3-ref's error ($gmsg)"
done
