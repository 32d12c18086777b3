#!/usr/bin/env python3
"""prepare_demo_data.py — the demo model's training text: the King James Bible
from Debian's bible-kjv-text package, one verse per line, plain ASCII.

    mkdir -p .demo-data && cd .demo-data
    apt-get download bible-kjv-text bible-kjv        # 4.38 was used
    dpkg-deb -x bible-kjv-text_*.deb x && dpkg-deb -x bible-kjv_*.deb x
    x/usr/bin/bible -p x/usr/lib "Gen1:1-Rev22:21" > raw.txt
    /usr/bin/python3 ../tools/prepare_demo_data.py raw.txt kjv.txt

bible-kjv-text stores the text compressed; the `bible` program of the
bible-kjv package prints it as "Book N" chapter headings followed by verses
"  V text" wrapped at 80 columns. This keeps the verse text only: headings and
verse numbers dropped, wrapped lines joined with one space. Stdlib only.
"""
import re
import sys


def verses(lines):
    out, cur = [], None
    for line in lines:
        line = line.rstrip("\n")
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:  # a new verse
            if cur:
                out.append(cur)
            cur = m.group(2).strip()
        elif not line.strip():
            continue
        elif re.match(r"^[1-3]?\s?[A-Z][A-Za-z ]+ \d+$", line):  # "Genesis 1"
            if cur:
                out.append(cur)
            cur = None
        else:  # continuation of a wrapped verse
            cur = (cur + " " + line.strip()) if cur else line.strip()
    if cur:
        out.append(cur)
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="latin-1") as f:
        vs = verses(f)
    with open(dst, "w", encoding="utf-8") as f:
        f.write("\n".join(vs) + "\n")
    print("%d verses -> %s" % (len(vs), dst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
