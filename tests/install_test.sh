#!/bin/sh
# install_test.sh — make install into a temporary PREFIX and a DESTDIR stage,
# then the installed programs, man pages, library and pkg-config file used
# from another directory; make uninstall removes them.
#
# usage: tests/install_test.sh MAKE CC   (run from the repository root)
set -u
MAKE=${1:?usage: install_test.sh MAKE CC}
CC=${2:?usage: install_test.sh MAKE CC}
REPO=$(pwd)
TMP=$(mktemp -d /tmp/m3_install_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT INT TERM
FAILS=0
N=0
pass() { N=$((N + 1)); }
fail() { N=$((N + 1)); FAILS=$((FAILS + 1)); echo "FAIL: $*"; }
check() { if eval "$2"; then pass; else fail "$1"; fi; }

P=$TMP/prefix
$MAKE --no-print-directory install PREFIX="$P" >"$TMP/log" 2>&1
check "make install PREFIX=$P exits 0 ($(tail -3 "$TMP/log"))" '[ $? -eq 0 ]'
for f in bin/m3-ref bin/m3-conform lib/libm3.a include/m3/model.h include/m3/progress.h \
         lib/pkgconfig/m3.pc share/man/man1/m3-ref.1 share/man/man1/m3-conform.1 \
         share/m3/tolerances.json; do
    check "installed $f" '[ -s "$P/$f" ]'
done
check "installed programs are executable" '[ -x "$P/bin/m3-ref" ] && [ -x "$P/bin/m3-conform" ]'
if [ -x bin/m3-gpu ]; then
    check "bin/m3-gpu built: installed with its man page" '[ -x "$P/bin/m3-gpu" ] && [ -s "$P/share/man/man1/m3-gpu.1" ]'
else
    check "bin/m3-gpu not built: not installed, and said so" \
        '[ ! -e "$P/bin/m3-gpu" ] && [ ! -e "$P/share/man/man1/m3-gpu.1" ] && grep -q "m3-gpu was not built" "$TMP/log"'
fi
check "tolerances.json installed as the spec's" 'cmp -s "$P/share/m3/tolerances.json" spec/tolerances.json'

# the installed programs from a directory with no spec/ in it
mkdir -p "$TMP/elsewhere"
cd "$TMP/elsewhere" || exit 1
"$P/bin/m3-conform" run "$REPO/vectors/model/tiny_fp32" --teacher-forced --quiet >"$TMP/out" 2>"$TMP/err"
check "installed m3-conform passes a vector from elsewhere ($(tail -2 "$TMP/out") $(head -2 "$TMP/err"))" \
    '[ $? -eq 0 ] && grep -q "^verdict: PASS" "$TMP/out"'
mv "$P/share/m3/tolerances.json" "$TMP/tol.json"
"$P/bin/m3-conform" run "$REPO/vectors/model/tiny_fp32" --quiet >"$TMP/out" 2>"$TMP/err"
check "without the installed tolerances.json it stops with exit 2 naming the file ($(cat "$TMP/err"))" \
    '[ $? -eq 2 ] && grep -q "tolerances.json" "$TMP/err"'
mv "$TMP/tol.json" "$P/share/m3/tolerances.json"
"$P/bin/m3-conform" run "$REPO/vectors/model/tiny_fp32" --tolerances "$REPO/spec/tolerances.json" --quiet >"$TMP/out" 2>&1
check "--tolerances FILE overrides the installed file" '[ $? -eq 0 ]'
"$P/bin/m3-ref" forward --model "$REPO/models/tiny" --tokens 1,2,3 --dump "$TMP/d.st" >"$TMP/out" 2>"$TMP/err"
check "installed m3-ref forward runs from elsewhere" '[ $? -eq 0 ] && [ -s "$TMP/d.st" ] && grep -q "^T=3 " "$TMP/out"'
LAYERS=$(sed -n 's/^T=3 mode=fp32 layers=\([0-9]*\) .*/\1/p' "$TMP/out")

# man pages: troff that renders without warnings
check "m3-ref.1 is a section-1 page with every command" \
    'head -1 "$P/share/man/man1/m3-ref.1" | grep -q "^\.TH M3-REF 1" && grep -q "^\.SS generate" "$P/share/man/man1/m3-ref.1"'
if command -v groff >/dev/null; then
    for m in m3-ref m3-conform; do
        groff -man -Tutf8 -ww -z "$P/share/man/man1/$m.1" >"$TMP/groff" 2>&1
        check "$m.1 renders without troff warnings ($(head -3 "$TMP/groff"))" '[ ! -s "$TMP/groff" ]'
    done
fi

# the library through its pkg-config file
cat >"$TMP/prog.c" <<'EOF'
#include <stdio.h>
#include "model.h"
int main(int argc, char **argv)
{
    m3_model m;
    m3_err e;
    if (argc < 2 || m3_model_open(&m, argv[1], NULL, &e) != 0)
        return 1;
    printf("layers=%d\n", m.cfg.text.num_layers);
    m3_model_close(&m);
    return 0;
}
EOF
if command -v pkg-config >/dev/null; then
    FLAGS=$(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs m3)
    check "pkg-config knows m3 ($FLAGS)" '[ -n "$FLAGS" ] && echo "$FLAGS" | grep -q -- "-I$P/include/m3"'
    # shellcheck disable=SC2086
    $CC -std=c11 -o "$TMP/prog" "$TMP/prog.c" $FLAGS >"$TMP/cc" 2>&1
    check "a program builds against the installed library ($(head -3 "$TMP/cc"))" '[ $? -eq 0 ]'
    check "and reads the checkpoint as m3-ref does (layers=$LAYERS)" \
        '[ -n "$LAYERS" ] && [ "$("$TMP/prog" "$REPO/models/tiny")" = "layers=$LAYERS" ]'
else
    fail "pkg-config is not installed (make deps installs pkgconf)"
fi
cd "$REPO" || exit 1

# DESTDIR: staged under the stage, paths inside for the final PREFIX
S=$TMP/stage
OPT_BEFORE=$([ -e /opt/m3 ] && echo present || echo absent)
$MAKE --no-print-directory install PREFIX=/opt/m3 DESTDIR="$S" >"$TMP/log" 2>&1
check "make install DESTDIR=... exits 0" '[ $? -eq 0 ]'
check "staged under DESTDIR/PREFIX" '[ -x "$S/opt/m3/bin/m3-conform" ] && [ -s "$S/opt/m3/share/m3/tolerances.json" ]'
check "nothing written to the real /opt/m3" '[ "$OPT_BEFORE" = present ] || [ ! -e /opt/m3 ]'
check "m3.pc names the final prefix, not the stage" \
    'grep -qx "prefix=/opt/m3" "$S/opt/m3/lib/pkgconfig/m3.pc" && ! grep -q "$S" "$S/opt/m3/lib/pkgconfig/m3.pc"'
(cd "$TMP/elsewhere" && "$S/opt/m3/bin/m3-conform" run "$REPO/vectors/model/tiny_fp32" --quiet >"$TMP/out" 2>&1)
check "the staged m3-conform finds its tolerances.json ($(tail -1 "$TMP/out"))" '[ $? -eq 0 ]'

# uninstall
$MAKE --no-print-directory uninstall PREFIX="$P" >"$TMP/log" 2>&1
check "make uninstall removes the files" \
    '[ ! -e "$P/bin/m3-ref" ] && [ ! -e "$P/lib/libm3.a" ] && [ ! -e "$P/include/m3" ] && [ ! -e "$P/share/m3" ] && [ ! -e "$P/share/man/man1/m3-ref.1" ]'

if [ $FAILS -ne 0 ]; then
    echo "install_test: $FAILS of $N checks failed"
    exit 1
fi
echo "install_test: $N/$N passed"
