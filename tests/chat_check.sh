#!/bin/sh
# chat_check.sh — m3-conform chat-check on the command line (M3-CHAT-*).
#
#   sh tests/chat_check.sh CONFORM
#
# The ids of a passing port are the spec's own (--print-expected); a failing
# port changes one id, drops the last or brings an M2-era prompt's ids.
# Exit codes checked: 0 pass, 1 differ (with the position printed), 2 usage and
# bad input (a bad conversation file, bad ids, no tokenizer), each message
# naming the file or option.
set -u
conform=$1
tok=vectors/tokenizer/minimax_1000
conv=vectors/chat/cases/long_agentic.json
tmp=$(mktemp -d /tmp/m3-chatcheck-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() { # want_rc label pattern args...
  want=$1 label=$2 pat=$3
  shift 3
  "$conform" chat-check "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ $rc -ne "$want" ]; then
    echo "chat-check: FAILED: $label: exit $rc, want $want"; sed 's/^/    /' "$tmp/out" | head -8
    fails=$((fails + 1))
  elif ! grep -q -- "$pat" "$tmp/out"; then
    echo "chat-check: FAILED: $label: the output lacks \"$pat\""; sed 's/^/    /' "$tmp/out" | head -8
    fails=$((fails + 1))
  else
    echo "chat-check: ok: $label (exit $rc)"
  fi
}
"$conform" chat-check --model $tok --conversation $conv --print-expected >"$tmp/ids" || fails=$((fails + 1))
n=$(tr ',' '\n' <"$tmp/ids" | grep -c .)
expect 0 "the spec's ids (file)" "verdict: PASS" --model $tok --conversation $conv --ids "$tmp/ids"
printf '[%s]\n' "$(sed 's/,/, /g' "$tmp/ids")" >"$tmp/ids.json"
expect 0 "the spec's ids (JSON list)" "verdict: PASS" --model $tok --conversation $conv --ids "$tmp/ids.json"
# id 40 replaced by the bos id
awk -F, -v OFS=, '{ $41 = $1; print }' "$tmp/ids" >"$tmp/bad"
expect 1 "one id changed" "first difference at position 40" --model $tok --conversation $conv --ids "$tmp/bad"
sed 's/,[0-9]*$//' "$tmp/ids" >"$tmp/short"
expect 1 "last id missing" "first difference at position $((n - 1)): expected .* got -1" --model $tok --conversation $conv --ids "$tmp/short"
expect 1 "thinking mode differs" "verdict: FAIL" --model $tok --conversation $conv --ids "$tmp/ids" --thinking disabled
expect 2 "bad conversation" "unknown_role.json: messages\[1\].role" --model $tok --conversation vectors/chat/cases/unknown_role.json --ids 1,2
expect 2 "bad ids" "item" --model $tok --conversation $conv --ids "1,,2"
expect 2 "no tokenizer" "$tmp/none" --model "$tmp/none" --conversation $conv --ids 1
expect 2 "missing option" "needs --model DIR" --model $tok --ids 1
if [ $fails -ne 0 ]; then echo "chat-check: $fails FAILED"; exit 1; fi
echo "chat-check: all passed"
