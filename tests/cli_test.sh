#!/bin/sh
# cli_test.sh — end-to-end tests of bin/m3-ref on tiny random checkpoints.
#
# usage: tests/cli_test.sh M3REF CLI_HELPER
#   M3REF       the m3-ref binary (bin/m3-ref)
#   CLI_HELPER  build/tests/cli_helper (writes fixtures, checks dumps)
# Spec: M3-DUMP-* (dump names and shapes), M3-SAMPLE-* (greedy determinism,
# seeded sampling, generation_config.json defaults, eos), M3-CACHE-2
# (generate's first greedy token = argmax of forward's last row), and the
# bad-input contract: non-zero exit with a message, never a crash.
set -u

M3REF=${1:?usage: cli_test.sh M3REF CLI_HELPER}
HELPER=${2:?usage: cli_test.sh M3REF CLI_HELPER}
TMP=$(mktemp -d /tmp/m3_cli_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT INT TERM
FAILS=0
N=0

pass() { N=$((N + 1)); }
fail() { N=$((N + 1)); FAILS=$((FAILS + 1)); echo "FAIL: $*"; }

# run NAME CMD...: run, keep stdout/stderr/rc in $TMP/out $TMP/err $RC
run() {
    "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
}

# expect_ok NAME CMD...
expect_ok() {
    name=$1; shift
    run "$@"
    if [ "$RC" -eq 0 ]; then pass; else
        fail "$name: exit $RC"; sed 's/^/    /' "$TMP/err" | head -5; fi
}

# expect_fail NAME PATTERN CMD...: exit 1 or 2 (no crash), message on stderr matching PATTERN
expect_fail() {
    name=$1; pat=$2; shift 2
    run "$@"
    if [ "$RC" -eq 0 ]; then fail "$name: succeeded but should fail"; return; fi
    if [ "$RC" -ge 3 ]; then fail "$name: exit $RC (crash?)"; sed 's/^/    /' "$TMP/err" | head -5; return; fi
    if [ ! -s "$TMP/err" ]; then fail "$name: no message on stderr"; return; fi
    if ! grep -q -- "$pat" "$TMP/err"; then
        fail "$name: stderr lacks '$pat':"; sed 's/^/    /' "$TMP/err" | head -5; return; fi
    pass
}

FX=$TMP/fx
"$HELPER" fixture "$FX" >/dev/null || { echo "FAIL: cannot build fixture"; exit 1; }

# ---- help ----------------------------------------------------------------
expect_ok "help" "$M3REF" --help
grep -q "forward" "$TMP/out" && grep -q "generate" "$TMP/out" || fail "help lists no commands"
for c in forward generate inspect; do
    expect_ok "$c --help" "$M3REF" $c --help
    grep -q "usage: m3-ref $c" "$TMP/out" || fail "$c --help has no usage line"
done
# the --help texts and the parser (ref/cli_opts.c, shared with bin/m3-gpu) agree
if [ -f ref/cli_opts.c ]; then
    expect_ok "usage texts in sync with the parser" sh tests/usage_check.sh "$M3REF" \
        "forward generate inspect" ref/cli_opts.c ref/cli/m3-ref.c
fi

# ---- forward and dumps ---------------------------------------------------
expect_ok "forward fp32" "$M3REF" forward --model "$FX" --tokens 5,17,300,2,9 --dump "$TMP/d32.safetensors"
grep -q "^T=5 " "$TMP/out" || fail "forward summary lacks T=5"
grep -q "top-5 of logits\[4\]:" "$TMP/out" || fail "forward summary lacks top-5"
TOP1=$(sed -n 's/^top-5 of logits\[4\]: \([0-9]*\) .*/\1/p' "$TMP/out")
expect_ok "dump names fp32" "$HELPER" dump-check "$TMP/d32.safetensors" "$FX" 5
expect_ok "forward bf16" "$M3REF" forward --model "$FX" --tokens "5, 17, 300, 2, 9" --dtype bf16 --dump "$TMP/d16.safetensors"
grep -q "mode=bf16" "$TMP/out" || fail "bf16 summary lacks mode=bf16"
expect_ok "dump names bf16" "$HELPER" dump-check "$TMP/d16.safetensors" "$FX" 5 --bf16
expect_ok "forward without dump" "$M3REF" forward --model "$FX" --tokens 7

# ---- generate --------------------------------------------------------------
expect_ok "generate greedy" "$M3REF" generate --model "$FX" --tokens 5,17,300,2,9 --max-new-tokens 12 --greedy --print-ids
G1=$(cat "$TMP/out")
echo "$G1" | grep -Eq '^[0-9]+(,[0-9]+){11}$' || fail "generate --print-ids output '$G1' is not 12 comma-separated ids"
grep -q "tokens/s" "$TMP/err" || fail "generate prints no tokens/s on stderr"
expect_ok "generate greedy again" "$M3REF" generate --model "$FX" --tokens 5,17,300,2,9 --max-new-tokens 12 --greedy --print-ids
[ "$(cat "$TMP/out")" = "$G1" ] || fail "greedy generation is not deterministic"
[ "${G1%%,*}" = "$TOP1" ] || fail "first greedy token ${G1%%,*} != forward's top-1 $TOP1"
expect_ok "generate sampled" "$M3REF" generate --model "$FX" --tokens 5,17 --max-new-tokens 10 --temperature 0.8 --top-p 0.9 --top-k 20 --seed 7 --print-ids
S1=$(cat "$TMP/out")
expect_ok "generate sampled again" "$M3REF" generate --model "$FX" --tokens 5,17 --max-new-tokens 10 --temperature 0.8 --top-p 0.9 --top-k 20 --seed 7 --print-ids
[ "$(cat "$TMP/out")" = "$S1" ] || fail "seeded sampling is not deterministic"
expect_ok "generate bf16" "$M3REF" generate --model "$FX" --tokens 5,17 --max-new-tokens 4 --greedy --dtype bf16
expect_ok "generate without --print-ids" "$M3REF" generate --model "$FX" --tokens 5 --max-new-tokens 3 --greedy
grep -Eq '^[0-9]+ [0-9]+ [0-9]+$' "$TMP/out" || fail "generate without --print-ids does not stream 3 ids"

# generation_config.json: do_sample false makes the default greedy
cp -r "$FX" "$TMP/fxg"
printf '{"do_sample": false, "temperature": 1.0, "top_p": 0.95, "top_k": 40}\n' >"$TMP/fxg/generation_config.json"
expect_ok "generate with generation_config" "$M3REF" generate --model "$TMP/fxg" --tokens 5,17,300,2,9 --max-new-tokens 12 --print-ids
[ "$(cat "$TMP/out")" = "$G1" ] || fail "do_sample=false generation_config did not give the greedy tokens"
printf '{"do_sample": "yes"}\n' >"$TMP/fxg/generation_config.json"
expect_fail "malformed generation_config" "generation_config.json" "$M3REF" generate --model "$TMP/fxg" --tokens 5 --max-new-tokens 2

# eos: a checkpoint whose eos is the first greedy token stops after it
FIRST=${G1%%,*}
"$HELPER" fixture "$TMP/fxe" --eos "$FIRST" >/dev/null
expect_ok "generate stops at eos" "$M3REF" generate --model "$TMP/fxe" --tokens 5,17,300,2,9 --max-new-tokens 12 --greedy --print-ids
[ "$(cat "$TMP/out")" = "$FIRST" ] || fail "generation did not stop at eos $FIRST (got '$(cat "$TMP/out")')"

# context limit: generation stops at max_position_embeddings
"$HELPER" fixture "$TMP/fxc" --max-pos 8 >/dev/null
expect_ok "generate at context limit" "$M3REF" generate --model "$TMP/fxc" --tokens 1,2,3,4,5 --max-new-tokens 20 --greedy --print-ids
echo "$(cat "$TMP/out")" | grep -Eq '^[0-9]+(,[0-9]+){3}$' || fail "context-limited generation should give 4 ids, got '$(cat "$TMP/out")'"
grep -q "context limit" "$TMP/err" || fail "no context-limit note"

# ---- inspect, mtp notice, lenient config ----------------------------------
expect_ok "inspect" "$M3REF" inspect --model "$FX"
[ -s "$TMP/out" ] || fail "inspect printed nothing"
"$HELPER" fixture "$TMP/fxm" --mtp 3 >/dev/null
expect_ok "forward with mtp tensors" "$M3REF" forward --model "$TMP/fxm" --tokens 1,2
grep -q "note: ignored 3 mtp.\* tensors" "$TMP/err" || fail "no mtp notice"
cp -r "$FX" "$TMP/fxl"
sed 's/"model_type": "minimax_m3_vl",/"model_type": "minimax_m3_vl", "surprise_key": 1,/' "$FX/config.json" >"$TMP/fxl/config.json"
expect_fail "unknown config key" "surprise_key" "$M3REF" forward --model "$TMP/fxl" --tokens 1,2
expect_ok "unknown config key with --lenient-config" "$M3REF" forward --model "$TMP/fxl" --tokens 1,2 --lenient-config

# ---- bad input ---------------------------------------------------------------
expect_fail "missing model dir" "$TMP/nope" "$M3REF" forward --model "$TMP/nope" --tokens 1,2
cp -r "$FX" "$TMP/fxt"
SZ=$(wc -c <"$FX/model.safetensors")
head -c $((SZ / 2)) "$FX/model.safetensors" >"$TMP/fxt/model.safetensors"
expect_fail "truncated safetensors" "model.safetensors" "$M3REF" forward --model "$TMP/fxt" --tokens 1,2
head -c 5 "$FX/model.safetensors" >"$TMP/fxt/model.safetensors"
expect_fail "tiny safetensors" "model.safetensors" "$M3REF" forward --model "$TMP/fxt" --tokens 1,2
cp -r "$FX" "$TMP/fxb"
printf '{"text_config": {"hidden_size": 64,' >"$TMP/fxb/config.json"
expect_fail "malformed config" "config.json" "$M3REF" forward --model "$TMP/fxb" --tokens 1,2
rm -f "$TMP/fxb/config.json"
expect_fail "missing config" "config.json" "$M3REF" forward --model "$TMP/fxb" --tokens 1,2
expect_fail "id >= vocab" "token 512 at position 1 is out of range \[0, 512)" "$M3REF" forward --model "$FX" --tokens 1,512
[ "$RC" -eq 2 ] || fail "id >= vocab: a bad --tokens value must exit 2 (got $RC)"
expect_fail "id >= vocab in generate" "out of range" "$M3REF" generate --model "$FX" --tokens 600 --greedy
[ "$RC" -eq 2 ] || fail "id >= vocab in generate: exit 2 expected (got $RC)"
# the id's real position, not its index inside the last prefill chunk
expect_fail "id >= vocab at the end of a prompt" "token 600 at position 3 " "$M3REF" generate --model "$FX" --tokens 1,2,3,600 --greedy
[ "$RC" -eq 2 ] || fail "id >= vocab at the end: exit 2 expected (got $RC)"
expect_fail "empty --tokens" "empty" "$M3REF" forward --model "$FX" --tokens ""
expect_fail "blank --tokens" "empty" "$M3REF" forward --model "$FX" --tokens "  "
expect_fail "garbage token" "not a digit" "$M3REF" forward --model "$FX" --tokens 1,x2
expect_fail "negative token" "not a digit" "$M3REF" forward --model "$FX" --tokens 1,-2
expect_fail "empty item" "empty item" "$M3REF" forward --model "$FX" --tokens 1,,2
expect_fail "trailing comma" "empty item" "$M3REF" forward --model "$FX" --tokens 1,2,
expect_fail "overflowing id" "larger than" "$M3REF" forward --model "$FX" --tokens 99999999999999999999
expect_fail "context overflow" "max_position_embeddings" "$M3REF" forward --model "$TMP/fxc" --tokens 1,2,3,4,5,6,7,8,9
expect_fail "missing --tokens" "--tokens" "$M3REF" forward --model "$FX"
expect_fail "missing --model" "--model" "$M3REF" forward --tokens 1
expect_fail "bad --dtype" "fp32 or bf16" "$M3REF" forward --model "$FX" --tokens 1 --dtype fp16
expect_fail "unknown option" "unknown option" "$M3REF" forward --model "$FX" --tokens 1 --frobnicate
expect_fail "option without value" "needs a value" "$M3REF" forward --model "$FX" --tokens
expect_fail "unknown command" "unknown command" "$M3REF" frobnicate
expect_fail "tokens and prompt" "exactly one" "$M3REF" generate --model "$FX" --tokens 1 --prompt hi
expect_fail "prompt without tokenizer" "tokenizer" "$M3REF" generate --model "$FX" --prompt hello
expect_fail "forward tokens and prompt" "exactly one" "$M3REF" forward --model "$FX" --tokens 1 --prompt hi
expect_fail "forward prompt without tokenizer" "tokenizer" "$M3REF" forward --model "$FX" --prompt hello
# forward --prompt prints the ids it encoded; --tokens with those ids gives the same logits
if [ -f models/demo/tokenizer.json ]; then
    expect_ok "forward --prompt" "$M3REF" forward --model models/demo --prompt "And God said"
    ids=$(sed -n 's/^ids: //p' "$TMP/out"); grep '^top-5' "$TMP/out" >"$TMP/top_prompt"
    expect_ok "forward --tokens (prompt ids)" "$M3REF" forward --model models/demo --tokens "$ids"
    grep '^top-5' "$TMP/out" | cmp -s - "$TMP/top_prompt" && pass || fail "forward --prompt and --tokens of its ids differ"
fi
expect_fail "greedy plus temperature" "cannot be combined" "$M3REF" generate --model "$FX" --tokens 1 --greedy --temperature 0.5
# temperature 0 is greedy (M3-SAMPLE-1); a tiny one would overflow logit / T
expect_ok "zero temperature" "$M3REF" generate --model "$FX" --tokens 5,17,300,2,9 --max-new-tokens 12 --temperature 0 --print-ids
[ "$(cat "$TMP/out")" = "$G1" ] || fail "--temperature 0 must decode greedily"
expect_fail "tiny temperature" "temperature" "$M3REF" generate --model "$FX" --tokens 1 --temperature 1e-38
cp -r "$FX" "$TMP/fxtt"
printf '{"temperature": 1e-38}\n' >"$TMP/fxtt/generation_config.json"
expect_fail "tiny temperature in generation_config.json" "at least 1e-4" "$M3REF" generate --model "$TMP/fxtt" --tokens 1
expect_fail "bad top-p" "top-p" "$M3REF" generate --model "$FX" --tokens 1 --top-p 1.5
expect_fail "bad max-new-tokens" "max-new-tokens" "$M3REF" generate --model "$FX" --tokens 1 --max-new-tokens -3
expect_fail "unwritable dump" "dump\|open\|create\|write" "$M3REF" forward --model "$FX" --tokens 1 --dump "$TMP/no/such/dir/x.safetensors"

# ---- prompts through the tokenizer (M3-TOK-*, M3-CHAT-*) -------------------
TOKJSON=$(dirname "$0")/../vectors/tokenizer/minimax_300/tokenizer.json
if [ -f "$TOKJSON" ]; then
    cp -r "$FX" "$TMP/tokm" && cp "$TOKJSON" "$TMP/tokm/tokenizer.json"
    expect_ok "prompt greedy" "$M3REF" generate --model "$TMP/tokm" --prompt "Hello world" --max-new-tokens 4 --greedy --print-ids
    P1=$(cat "$TMP/out")
    expect_ok "prompt greedy again" "$M3REF" generate --model "$TMP/tokm" --prompt "Hello world" --max-new-tokens 4 --greedy --print-ids
    [ "$P1" = "$(cat "$TMP/out")" ] && [ -n "$P1" ] || fail "prompt greedy not repeatable"
    expect_ok "chat prompt" "$M3REF" generate --model "$TMP/tokm" --prompt "Hi" --chat --thinking disabled --max-new-tokens 2 --greedy --print-ids
    [ "$P1" != "$(cat "$TMP/out")" ] || fail "chat rendering did not change the prompt"
    expect_fail "empty prompt" "empty prompt" "$M3REF" generate --model "$TMP/tokm" --prompt ""
    expect_fail "thinking without chat" "need --chat" "$M3REF" generate --model "$TMP/tokm" --prompt hi --thinking enabled
    expect_fail "bad thinking mode" "adaptive, enabled or disabled" "$M3REF" generate --model "$TMP/tokm" --prompt hi --chat --thinking maybe
    expect_fail "chat without prompt" "need --prompt" "$M3REF" generate --model "$TMP/tokm" --tokens 1 --chat
    CV=$(dirname "$0")/../vectors/chat/cases
    expect_ok "conversation prompt" "$M3REF" generate --model "$TMP/tokm" --conversation "$CV/tools_two_calls_merged.json" --max-new-tokens 2 --greedy --print-ids
    expect_ok "conversation and thinking" "$M3REF" generate --model "$TMP/tokm" --conversation "$CV/single_user_default.json" --thinking disabled --max-new-tokens 2 --greedy --print-ids
    expect_fail "conversation and prompt" "replaces --prompt" "$M3REF" generate --model "$TMP/tokm" --conversation "$CV/single_user_default.json" --prompt hi
    expect_fail "conversation and tokens" "exactly one" "$M3REF" generate --model "$TMP/tokm" --conversation "$CV/single_user_default.json" --tokens 1
    expect_fail "bad conversation" "unknown_role.json: messages\[1\].role" "$M3REF" generate --model "$TMP/tokm" --conversation "$CV/unknown_role.json"
    expect_fail "missing conversation" "no-such.json" "$M3REF" generate --model "$TMP/tokm" --conversation "$TMP/no-such.json"
    printf '{"model": {"type": "WordPiece"}}' >"$TMP/tokm/tokenizer.json"
    expect_fail "bad tokenizer.json" "tokenizer.json" "$M3REF" generate --model "$TMP/tokm" --prompt hi
else
    fail "missing $TOKJSON"
fi

# ---- hardening: caps, FIFOs, outputs onto inputs, alignment, non-finite logits ----
# config sizes against caps in 64 bits, before anything is allocated from them
cfgedit() { # cfgedit DIR KEY VALUE: a copy of $FX with one integer key of config.json changed
    rm -rf "$1"; cp -r "$FX" "$1"
    sed "s/\"$2\": [0-9]*/\"$2\": $3/" "$FX/config.json" >"$1/config.json"
}
cfgedit "$TMP/cap1" sparse_topk_blocks 2147483647
expect_fail "topk over the cap" "index_topk_blocks = 2147483647 is over the cap" "$M3REF" forward --model "$TMP/cap1" --tokens 1,2,3
cfgedit "$TMP/cap2" sparse_topk_blocks 65536
expect_ok "large topk: scratch sized by the blocks" "$M3REF" forward --model "$TMP/cap2" --tokens 1,2,3 --dump "$TMP/cap2.safetensors"
cfgedit "$TMP/cap3" num_local_experts 2147483647
expect_fail "experts over the cap" "num_local_experts = 2147483647 is over the cap" "$M3REF" forward --model "$TMP/cap3" --tokens 1,2,3
cfgedit "$TMP/cap4" num_local_experts 60000
expect_fail "experts checked against the router before the views" "gate.weight: shape \[8, 64\] vs expected \[60000, 64\]" "$M3REF" forward --model "$TMP/cap4" --tokens 1,2,3
cfgedit "$TMP/cap5" num_attention_heads 65536
sed -i 's/"head_dim": 16/"head_dim": 65536/; s/"num_key_value_heads": 2/"num_key_value_heads": 1/; /"rotary_dim"/d' "$TMP/cap5/config.json"
expect_fail "heads x head_dim in 64 bits" "num_attention_heads x head_dim = 4294967296 is over the cap" "$M3REF" forward --model "$TMP/cap5" --tokens 1,2,3
cfgedit "$TMP/eos" vocab_size 512
sed -i 's/"vocab_size": 512/"vocab_size": 512, "eos_token_id": 600/' "$TMP/eos/config.json"
expect_fail "eos beyond the vocabulary" "eos_token_id 600 is not in the vocabulary" "$M3REF" inspect --model "$TMP/eos"
cp -r "$FX" "$TMP/eosg"
printf '{"eos_token_id": [2, 100000]}\n' >"$TMP/eosg/generation_config.json"
expect_fail "generation_config eos beyond the vocabulary" "eos_token_id 100000 is not in the vocabulary" "$M3REF" generate --model "$TMP/eosg" --tokens 1 --greedy
# a FIFO never blocks open(): refused as not a regular file, naming it
if command -v mkfifo >/dev/null && command -v timeout >/dev/null; then
    mkdir -p "$TMP/fifo"; cp "$FX/config.json" "$TMP/fifo/"; mkfifo "$TMP/fifo/model.safetensors"
    run timeout 20 "$M3REF" forward --model "$TMP/fifo" --tokens 1,2
    if [ "$RC" -eq 124 ]; then fail "FIFO model.safetensors: open() blocked"; \
    elif grep -q "model.safetensors: not a regular file (a FIFO)" "$TMP/err"; then pass; \
    else fail "FIFO model.safetensors: rc $RC"; sed 's/^/    /' "$TMP/err" | head -3; fi
    mkdir -p "$TMP/fifot"; cp "$FX/config.json" "$FX/model.safetensors" "$TMP/fifot/"; mkfifo "$TMP/fifot/tokenizer.json"
    run timeout 20 "$M3REF" generate --model "$TMP/fifot" --tokens 1,2 --max-new-tokens 2 --greedy
    [ "$RC" -ne 124 ] && pass || fail "FIFO tokenizer.json: open() blocked"
else
    fail "mkfifo or timeout missing"
fi
# outputs: never an input; written whole through a temporary file and a rename
cp -r "$FX" "$TMP/own"
SUM0=$(cksum <"$TMP/own/model.safetensors")
expect_fail "--dump onto the checkpoint" "is an input" "$M3REF" forward --model "$TMP/own" --tokens 1,2 --dump "$TMP/own/model.safetensors"
[ "$(cksum <"$TMP/own/model.safetensors")" = "$SUM0" ] || fail "--dump replaced model.safetensors"
expect_fail "--dump onto config.json" "is an input" "$M3REF" forward --model "$TMP/own" --tokens 1,2 --dump "$TMP/own/config.json"
expect_fail "--dump onto config.json via another path" "is an input" "$M3REF" forward --model "$TMP/own" --tokens 1,2 --dump "$TMP/own/../own/./config.json"
expect_ok "--dump into the model dir under a new name" "$M3REF" forward --model "$TMP/own" --tokens 1,2 --dump "$TMP/own/acts.safetensors"
ls "$TMP/own" | grep -q tmp && fail "a temporary output file was left behind"
mkdir -p "$TMP/ro"; chmod 555 "$TMP/ro"
if [ "$(id -u)" != 0 ]; then
    expect_fail "--dump into an unwritable dir" "cannot create" "$M3REF" forward --model "$FX" --tokens 1,2 --dump "$TMP/ro/x.safetensors"
fi
chmod 755 "$TMP/ro"
# misaligned tensor data (the format allows odd offsets): a clear refusal
expect_ok "misaligned checkpoint" "$HELPER" misalign "$FX/model.safetensors" "$TMP/mis.safetensors"
mkdir -p "$TMP/misd"; cp "$FX/config.json" "$TMP/misd/"; mv "$TMP/mis.safetensors" "$TMP/misd/model.safetensors"
expect_fail "misaligned tensor data" "data is not aligned to its 2-byte elements" "$M3REF" forward --model "$TMP/misd" --tokens 1,2
# NaN weights: a warning, and exit 1 under --strict
NORM=language_model.model.norm.weight
mkdir -p "$TMP/nan"; cp "$FX/config.json" "$TMP/nan/"
expect_ok "NaN weights fixture" "$HELPER" edit "$FX/model.safetensors" "$TMP/nan/model.safetensors" "nan:$NORM:0"
expect_ok "NaN logits warn" "$M3REF" forward --model "$TMP/nan" --tokens 1,2
grep -q "warning: the logits hold" "$TMP/err" || fail "NaN logits: no warning"
expect_fail "NaN logits under --strict" "NaN or Inf" "$M3REF" forward --model "$TMP/nan" --tokens 1,2 --strict
[ "$RC" -eq 1 ] || fail "NaN logits under --strict: exit 1 expected (got $RC)"
expect_fail "NaN logits under generate --strict" "NaN or Inf" "$M3REF" generate --model "$TMP/nan" --tokens 1,2 --greedy --strict --print-ids

# ---- images (M3-VIS-*, M3-EMB-3) ----------------------------------------------
# A multimodal fixture with the real vocabulary size, so the image start/end
# ids 200029/200030 are ordinary rows of its embedding.
VM=$TMP/vm
if "$HELPER" vfixture "$VM" --vocab 200064 >/dev/null && "$HELPER" png "$TMP/a.png" 60 40 >/dev/null; then
    expect_ok "forward --image" "$M3REF" forward --model "$VM" --tokens 1,2,200025,3 --image "$TMP/a.png" --dump "$TMP/vd.safetensors"
    grep -q "T=11 " "$TMP/out" || fail "image of 60x40 should expand to 6 merged tokens (T=11)"
    expect_ok "pixels from dump" "$HELPER" pixels "$TMP/vd.safetensors" "$TMP/px.safetensors"
    expect_ok "forward --pixels" "$M3REF" forward --model "$VM" --tokens 1,2,200025,3 --pixels "$TMP/px.safetensors" --dump "$TMP/vp.safetensors"
    for t in vision.image_features embeddings logits; do
        expect_ok "--pixels == --image ($t)" "$HELPER" same "$TMP/vd.safetensors" "$TMP/vp.safetensors" $t
    done
    expect_ok "forward --video" "$M3REF" forward --model "$VM" --tokens 1,200026,3 --video "$TMP/a.png,$TMP/a.png,$TMP/a.png" --fps 1
    grep -q "T=18 " "$TMP/out" || fail "3 frames pad to 2 temporal groups of 6 tokens + start/end each (T=18)"
    expect_ok "forward --vision-joint" "$M3REF" forward --model "$VM" --tokens 1,2,200025,3 --image "$TMP/a.png" --vision-joint
    expect_ok "generate --image" "$M3REF" generate --model "$VM" --tokens 1,2,200025,3 --image "$TMP/a.png" --max-new-tokens 3 --greedy --print-ids
    # a conversation file's image and video parts (M3-CHAT-MM-1): the fixture with the small
    # MiniMax tokenizer, whose marker ids 1025/1026 become the config's image/video ids
    VT=$TMP/vmtok
    cp -r "$VM" "$VT" && cp "$(dirname "$0")"/../vectors/tokenizer/minimax_1000/tokenizer*.json "$VT"/ &&
        sed -i 's/"image_token_index": *200025/"image_token_index": 1025/; s/"video_token_index": *200026/"video_token_index": 1026/' "$VT/config.json"
    CV=$(dirname "$0")/../vectors/chat/cases
    expect_ok "conversation with two images" "$M3REF" generate --model "$VT" --conversation "$CV/user_images.json" --image "$TMP/a.png" --image "$TMP/a.png" --max-new-tokens 2 --greedy --print-ids
    expect_ok "conversation with a video" "$M3REF" generate --model "$VT" --conversation "$CV/user_video.json" --video "$TMP/a.png,$TMP/a.png" --fps 1 --max-new-tokens 2 --greedy --print-ids
    expect_fail "conversation with an image too few" "no image left" "$M3REF" generate --model "$VT" --conversation "$CV/user_images.json" --image "$TMP/a.png" --max-new-tokens 2
    printf 'not an image' >"$TMP/bad.png"
    expect_fail "corrupt image" "bad.png" "$M3REF" forward --model "$VM" --tokens 1,200025 --image "$TMP/bad.png"
    head -c 60 "$TMP/a.png" >"$TMP/trunc.png"
    expect_fail "truncated image" "trunc.png" "$M3REF" forward --model "$VM" --tokens 1,200025 --image "$TMP/trunc.png"
    expect_fail "image without marker" "marker\|placeholder\|image" "$M3REF" forward --model "$VM" --tokens 1,2,3 --image "$TMP/a.png"
    expect_fail "fps without video" "needs --video" "$M3REF" forward --model "$VM" --tokens 1 --fps 2
    expect_fail "video without fps" "needs --fps" "$M3REF" forward --model "$VM" --tokens 1,200026 --video "$TMP/a.png,$TMP/a.png"
    expect_fail "pixels plus image" "one or the other" "$M3REF" forward --model "$VM" --tokens 1 --pixels "$TMP/px.safetensors" --image "$TMP/a.png"
    expect_fail "image on text-only model" "vision" "$M3REF" forward --model "$FX" --tokens 1,200025 --image "$TMP/a.png"
    # the image ids come from the config (released values by default): a vocabulary of 256
    VS=$TMP/vs
    "$HELPER" vfixture "$VS" --vocab 256 >/dev/null
    sed -i 's/"image_token_index": 200025/"image_token_index": 254, "image_start_token_id": 250, "image_end_token_id": 251/; s/"video_token_index": 200026/"video_token_index": 253/' "$VS/config.json"
    expect_ok "--image with the config's start/end ids" "$M3REF" forward --model "$VS" --tokens 1,2,254,3 --image "$TMP/a.png"
    grep -q "T=11 " "$TMP/out" || fail "image ids from the config: T=11 expected"
    expect_ok "forward --help names the config's image ids" "$M3REF" forward --help
    grep -q "image_start_token_id" "$TMP/out" || fail "forward --help does not say the ids come from the config"
else
    fail "cannot build the multimodal fixture"
fi

echo "cli_test: $((N - FAILS))/$N passed"
[ "$FAILS" -eq 0 ]
