#!/bin/sh
# usage_check.sh — a program's usage texts agree with its option parser, in
# both directions, for each of its commands:
#   - every option a command's --help names is accepted by that command
#     (no "unknown option or argument" when it is given);
#   - every option the parsers know (the strcmp(a, "--...") tests of SRC...)
#     that some command accepts is named in some command's --help (options
#     every command takes, such as --quiet, are documented once).
# "Accepted" is asked of the program itself: PROG CMD --model /nonexistent
# OPT x, which fails later (no such model) but not as an unknown option.
#
#   sh tests/usage_check.sh PROG "CMD..." SRC...
# Prints one line per problem and a summary; exit 1 on any problem.
set -u
prog=${1:?usage: usage_check.sh PROG "CMD..." SRC...}
cmds=${2:?usage: usage_check.sh PROG "CMD..." SRC...}
shift 2
tmp=$(mktemp -d /tmp/m3_usage_check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0 n=0
fail() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }
pass() { n=$((n + 1)); }
accepted() { # CMD OPT: 0 when CMD does not reject OPT as unknown
    "$prog" "$1" --model "$tmp/nonexistent" "$2" x >/dev/null 2>"$tmp/err"
    ! grep -q -- "unknown option or argument '$2'" "$tmp/err"
}
known=$(cat "$@" | grep -o 'strcmp(a, "--[a-z-]*")' | grep -o -- '--[a-z-]*' | grep -v -- '^--help$' | sort -u)
[ -n "$known" ] || fail "no options found in $*"
: >"$tmp/helps"
for c in $cmds; do
    if ! "$prog" "$c" --help >"$tmp/help" 2>"$tmp/err"; then
        fail "$prog $c --help: exit status $?"; continue
    fi
    cat "$tmp/help" >>"$tmp/helps"
    for opt in $(grep -o -- '--[a-z][a-z-]*' "$tmp/help" | sort -u); do
        [ "$opt" = --help ] && continue
        if accepted "$c" "$opt"; then pass; else fail "$prog $c --help names $opt, which $c rejects"; fi
    done
done
for opt in $known; do
    taker=
    for c in $cmds; do
        if accepted "$c" "$opt"; then taker=$c; break; fi
    done
    [ -n "$taker" ] || continue
    if grep -q -- "$opt\b" "$tmp/helps"; then pass; else fail "$prog $taker takes $opt, which no --help names"; fi
done
echo "usage-check $(basename "$prog") ($cmds): $n checks, $fails failed"
[ "$fails" -eq 0 ]
