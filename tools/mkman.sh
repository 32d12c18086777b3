#!/bin/sh
# mkman.sh — a man page (troff, section 1) from a program's --help texts.
#
# usage: tools/mkman.sh NAME "one-line description" BINARY [SUBCOMMAND...]
#   NAME        the program's name (m3-ref, m3-conform, m3-gpu)
#   BINARY      the built program; `BINARY --help` is the description, and
#               `BINARY SUBCOMMAND --help` a section per subcommand
# The page goes to stdout. The help texts are kept as they are, preformatted
# (.nf), with troff's special characters escaped; the environment and file
# sections are the ones every m3 program shares (and m3-conform's tolerance
# file lookup).
set -eu
NAME=${1:?usage: mkman.sh NAME DESCRIPTION BINARY [SUBCOMMAND...]}
DESC=${2:?usage: mkman.sh NAME DESCRIPTION BINARY [SUBCOMMAND...]}
BIN=${3:?usage: mkman.sh NAME DESCRIPTION BINARY [SUBCOMMAND...]}
shift 3

# troff-safe preformatted text: backslashes as \e, a leading . or ' guarded by \&
esc() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
help_of() { "$@" --help 2>&1 || true; }

UPPER=$(printf '%s' "$NAME" | tr 'a-z' 'A-Z')
MAIN=$(help_of "$BIN")
[ -n "$MAIN" ] || { echo "mkman.sh: $BIN --help printed nothing" >&2; exit 1; }

printf '.TH %s 1 "" "m3" "User Commands"\n' "$UPPER"
printf '.SH NAME\n%s \\- %s\n' "$NAME" "$(printf '%s' "$DESC" | esc)"
printf '.SH SYNOPSIS\n.nf\n'
# the usage block: the first line naming the program and the indented lines after it
printf '%s\n' "$MAIN" | awk -v n="$NAME" 'f && !/^ / { exit } f { print } !f && index($0, n) { f = 1; print }' | esc
printf '.fi\n.SH DESCRIPTION\n.nf\n'
printf '%s\n' "$MAIN" | esc
printf '.fi\n'
if [ $# -gt 0 ]; then
    printf '.SH COMMANDS\n'
    for c in "$@"; do
        printf '.SS %s\n.nf\n' "$c"
        help_of "$BIN" "$c" | esc
        printf '.fi\n'
    done
fi
cat <<'EOF'
.SH PROGRESS
Long runs report on standard error: on a terminal one line redrawn in place
(stage, rate, elapsed time, estimated time left), otherwise a plain line at
most every 30 seconds; a summary line with the wall time and the peak
resident set size ends the run. \fB\-\-quiet\fR, where the program has it,
turns both off.
.SH ENVIRONMENT
.TP
.B M3_PROGRESS_INTERVAL
seconds between progress lines when standard error is not a terminal
(default 30).
EOF
case $NAME in
m3-conform)
    cat <<'EOF'
.TP
.B NO_COLOR
when set, reports on a terminal are not coloured.
.SH FILES
The tolerance profiles are read from \fB\-\-tolerances\fR \fIFILE\fR when
given, else from the first that exists of
.IR ./spec/tolerances.json ,
.I spec/tolerances.json
next to the program's directory (a build tree), and
.I ../share/m3/tolerances.json
relative to the program's directory (an installed tree, e.g.
.IR /usr/local/share/m3/tolerances.json ).
EOF
    ;;
esac
printf '.SH SEE ALSO\n'
for p in m3-ref m3-conform m3-gpu; do
    [ "$p" = "$NAME" ] || printf '.BR %s (1)\n' "$p"
done
