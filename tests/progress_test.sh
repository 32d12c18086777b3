#!/bin/sh
# progress_test.sh — progress and summary lines of bin/m3-ref (ref/progress.h)
# as users see them: in a real terminal (a tmux pane), in a log (not a
# terminal), under --quiet, and with stdout piped through head.
#
# usage: tests/progress_test.sh M3REF MODEL
#   M3REF  the m3-ref binary; MODEL  a checkpoint where a 1,000-token
#   forward takes a few seconds (models/demo)
# Needs tmux (installed by the Makefile's dependency step).
set -u

M3REF=${1:?usage: progress_test.sh M3REF MODEL}
MODEL=${2:?usage: progress_test.sh M3REF MODEL}
command -v tmux >/dev/null || { echo "progress_test: FAIL: tmux is not installed (make deps installs it)"; exit 1; }
case $M3REF in /*) ;; *) M3REF=$(pwd)/$M3REF ;; esac
case $MODEL in /*) ;; *) MODEL=$(pwd)/$MODEL ;; esac
TMP=$(mktemp -d /tmp/m3_progress_test.XXXXXX)
SOCK=m3progress$$
trap 'tmux -L $SOCK kill-server 2>/dev/null; rm -rf "$TMP"' EXIT INT TERM
FAILS=0
N=0
pass() { N=$((N + 1)); }
fail() { N=$((N + 1)); FAILS=$((FAILS + 1)); echo "FAIL: $*"; }
check() { if eval "$2"; then pass; else fail "$1"; fi; }

T=1000
TOK=$(seq 0 $((T - 1)) | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37) % 2000 + 5}')
LINE_RE="^m3-ref forward: layer [1-6]/6, [0-9.]*%, [0-9.]* rows/s, [0-9.]* s elapsed, ETA "
SUM_RE="^m3-ref forward: $T tokens, 6 layers, [0-9.]* tokens/s; wall [0-9.]* s; peak RSS [0-9.]* MiB\$"
ESC=$(printf '\033')
CR=$(printf '\r')

# ---- a log (stderr not a terminal): plain lines every M3_PROGRESS_INTERVAL s, then the summary
M3_PROGRESS_INTERVAL=0.2 "$M3REF" forward --model "$MODEL" --tokens "$TOK" --dump "$TMP/plain.st" \
    >"$TMP/out" 2>"$TMP/err"
check "plain forward exits 0" '[ $? -eq 0 ]'
check "plain: at least one progress line (got: $(head -2 "$TMP/err"))" '[ "$(grep -c "$LINE_RE" "$TMP/err")" -ge 1 ]'
check "plain: no carriage return or escape in a log" '! grep -q "[$CR$ESC]" "$TMP/err"'
check "plain: the last line is the summary (got: $(tail -1 "$TMP/err"))" 'tail -1 "$TMP/err" | grep -q "$SUM_RE"'
check "plain: nothing but progress lines and the summary" \
    '[ "$(grep -vc -e "$LINE_RE" -e "$SUM_RE" "$TMP/err")" -eq 0 ]'
check "plain: stdout unchanged (T= and top-5)" 'grep -q "^T=$T " "$TMP/out" && grep -q "^top-5 of logits" "$TMP/out"'

# default interval (30 s): a run this short prints the summary only
"$M3REF" forward --model "$MODEL" --tokens "$TOK" >/dev/null 2>"$TMP/err"
check "default log: only the summary (got $(wc -l <"$TMP/err") lines)" \
    '[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$SUM_RE" "$TMP/err"'
# --quiet: nothing at all
M3_PROGRESS_INTERVAL=0.2 "$M3REF" forward --model "$MODEL" --tokens "$TOK" --quiet >/dev/null 2>"$TMP/err"
check "--quiet: stderr empty" '[ ! -s "$TMP/err" ]'

# ---- stdout through head: the dump is whole, the status 0, the summary printed
{ M3_PROGRESS_INTERVAL=0.2 "$M3REF" forward --model "$MODEL" --tokens "$TOK" --dump "$TMP/piped.st" \
      2>"$TMP/err"; echo $? >"$TMP/rc"; } | head -1 >"$TMP/head"
check "forward | head: exit 0 (got $(cat "$TMP/rc"))" '[ "$(cat "$TMP/rc")" = 0 ]'
check "forward | head: head got the T= line" 'grep -q "^T=$T " "$TMP/head"'
check "forward | head: the dump equals the unpiped one" 'cmp -s "$TMP/piped.st" "$TMP/plain.st"'
check "forward | head: progress and summary on stderr" \
    'grep -q "$LINE_RE" "$TMP/err" && tail -1 "$TMP/err" | grep -q "$SUM_RE"'
MAXNEW=1000
{ M3_PROGRESS_INTERVAL=0.2 "$M3REF" generate --model "$MODEL" --prompt "And God said" --greedy \
      --max-new-tokens $MAXNEW 2>"$TMP/err"; echo $? >"$TMP/rc"; } | head -c 40 >"$TMP/head"
check "generate | head: exit 0 (got $(cat "$TMP/rc"))" '[ "$(cat "$TMP/rc")" = 0 ]'
check "generate | head: 40 bytes of text" '[ "$(wc -c <"$TMP/head")" -eq 40 ] && grep -q "^And God said" "$TMP/head"'
STOP=$(sed -n 's/^m3-ref: stdout closed; stopped after \([0-9]*\) tokens$/\1/p' "$TMP/err")
check "generate | head: stops when the reader goes (got '$STOP' of $MAXNEW; $(head -3 "$TMP/err"))" \
    '[ -n "$STOP" ] && [ "$STOP" -lt $MAXNEW ]'
check "generate | head: the summary is the last line" \
    'tail -1 "$TMP/err" | grep -q "^m3-ref generate: greedy; prefill .* tokens/s); wall .*; peak RSS "'
check "generate | head: no terminal control characters in a log" '! grep -q "[$CR$ESC]" "$TMP/err"'

# ---- a real terminal: a tmux pane runs the forward with stdout through head
cat >"$TMP/run.sh" <<EOF
date +%s.%N >"$TMP/t0"
{ "$M3REF" forward --model "$MODEL" --tokens "$TOK" --dump "$TMP/tty.st"; echo \$? >"$TMP/tty.rc"; } | head -1
date +%s.%N >"$TMP/t1"
touch "$TMP/done"
sleep 60
EOF
tmux -L $SOCK new-session -d -s prog -x 160 -y 12 "sh $TMP/run.sh" ||
    { fail "tmux cannot start its server"; echo "progress_test: $FAILS of $N checks failed"; exit 1; }
: >"$TMP/seen"
MULTI=0
i=0
while [ ! -f "$TMP/done" ] && [ $i -lt 1200 ]; do # up to 120 s
    tmux -L $SOCK capture-pane -p -t prog >"$TMP/pane" 2>/dev/null
    grep "$LINE_RE" "$TMP/pane" >>"$TMP/seen"
    [ "$(grep -c "m3-ref forward: layer" "$TMP/pane")" -gt 1 ] && MULTI=1
    sleep 0.1
    i=$((i + 1))
done
sleep 0.3
tmux -L $SOCK capture-pane -p -t prog >"$TMP/final"
[ -n "${M3_TEST_VERBOSE:-}" ] && { sort -u "$TMP/seen" | head -5; cat "$TMP/final"; }
DISTINCT=$(sort -u "$TMP/seen" | wc -l)
check "tty: the progress line changes (saw $DISTINCT distinct lines)" '[ "$DISTINCT" -ge 2 ]'
check "tty: the layer advances (saw $(sed 's/.*layer \([0-9]\).*/\1/' "$TMP/seen" | sort -u | tr '\n' ' '))" \
    '[ "$(sed "s/.*layer \([0-9]\).*/\1/" "$TMP/seen" | sort -u | wc -l)" -ge 2 ]'
check "tty: one line redrawn in place (never two progress lines in the pane)" '[ $MULTI -eq 0 ]'
check "tty: forward exits 0" '[ "$(cat "$TMP/tty.rc" 2>/dev/null)" = 0 ]'
check "tty: head's line is in the pane" 'grep -q "^T=$T " "$TMP/final"'
check "tty: the progress line is erased at the end" '! grep -q "m3-ref forward: layer" "$TMP/final"'
check "tty: the summary is in the pane ($(grep "wall" "$TMP/final"))" 'grep -q "$SUM_RE" "$TMP/final"'
check "tty: the dump equals the log run's" 'cmp -s "$TMP/tty.st" "$TMP/plain.st"'
# the summary's wall time is the run's: within 0.5 s or 30% of the time the shell measured
WALL=$(sed -n 's/.*; wall \([0-9.]*\) s; .*/\1/p' "$TMP/final")
RSS=$(sed -n 's/.*; peak RSS \([0-9.]*\) MiB$/\1/p' "$TMP/final")
MEAS=$(awk -v a="$(cat "$TMP/t0")" -v b="$(cat "$TMP/t1")" 'BEGIN { printf "%.3f", b - a }')
check "tty: summary wall $WALL s against measured $MEAS s" \
    'awk -v w="$WALL" -v m="$MEAS" "BEGIN { d = m - w; if (d < 0) d = -d; t = 0.3 * m; if (t < 0.5) t = 0.5; exit !(w > 0 && d <= t) }"'
check "tty: peak RSS $RSS MiB is plausible (above the 7 MiB of weights it maps, below 1 GiB)" \
    'awk -v r="$RSS" "BEGIN { exit !(r > 7 && r < 1024) }"'

if [ $FAILS -ne 0 ]; then
    echo "progress_test: $FAILS of $N checks failed"
    exit 1
fi
echo "progress_test: $N/$N passed"
