#!/usr/bin/env python3
"""coverage.py - map spec clauses to the code and vectors that cite them.

Clause definitions: lines in spec/*.md that start (after an optional list
marker) with the id in bold, e.g. `**M3-MSA-SELECT-4** ...` (spec/README.md).
Citations: any `M3-...` id in ref/**/*.[ch], conformance/*.[ch], tests/*.c,
spec/*.md (cross references), and the `clauses` lists of vectors/**/case.json.
A citation may name one clause (`M3-NORM-1`), a range (`M3-CFG-1..n`,
`M3-VIS-PRE-1..4`), a pair (`M3-ROPE-1/2`), or a whole topic
(`M3-MSA-SELECT-*`, `M3-MSA-IDX`).

Writes docs/coverage.md (clause -> implementing ref/ file:function -> tests ->
vectors; gaps listed). Exits 1 when anything cites an id (or topic) that no
spec file defines, so a test can catch typos; --check does only that.

Usage: /usr/bin/python3 tools/coverage.py [--root DIR] [--out FILE] [--check]
Stdlib only.
"""

import argparse
import glob
import json
import os
import re
import sys

DEF_RE = re.compile(r'^\s*(?:[-*+]\s+|\d+\.\s+)?\*\*(M3-[A-Z][A-Z0-9]*(?:-[A-Z][A-Z0-9]*)*-\d+)\*\*')
# An id, optionally followed by a range (..n / ..4), a pair (/2) or a wildcard.
CITE_RE = re.compile(r'(?<![A-Za-z0-9_-])(M3-[A-Z][A-Z0-9]*(?:-[A-Z][A-Z0-9]*)*)'
                     r'(?:-(\d+)(?:\.\.(\d+|n)|((?:/\d+)+))?|-(\*))?(?![A-Za-z0-9_])')
C_KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do', 'else', 'case',
              'defined', 'typedef'}
FUNC_RE = re.compile(r'^(?!\s)(?:[A-Za-z_][\w]*[\s\*]+)+\**\s*([A-Za-z_]\w*)\s*\(')


def clause_key(cid):
    """Sort key: (prefix, number)."""
    m = re.match(r'(.*)-(\d+)$', cid)
    return (m.group(1), int(m.group(2))) if m else (cid, 0)


def load_spec(root):
    """Return {id: {file, line, title, deprecated}} and duplicate definitions."""
    clauses, dups = {}, []
    for path in sorted(glob.glob(os.path.join(root, 'spec', '*.md'))):
        rel = os.path.relpath(path, root)
        with open(path, encoding='utf-8') as f:
            for n, line in enumerate(f, 1):
                m = DEF_RE.match(line)
                if not m:
                    continue
                cid = m.group(1)
                rest = line[m.end():].strip()
                title = re.sub(r'\s+', ' ', rest)[:70]
                if cid in clauses:
                    dups.append((cid, rel, n, clauses[cid]['file'], clauses[cid]['line']))
                    continue
                clauses[cid] = {'file': rel, 'line': n, 'title': title,
                                'deprecated': 'deprecated' in rest.lower()[:40]}
    return clauses, dups


def expand(m, clauses):
    """Resolve one citation match to (list of clause ids, text, known?)."""
    prefix, num, hi, pair, star = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
    text = m.group(0)
    if num is None:  # topic citation: M3-MSA-SELECT-*, M3-MSA-IDX, or area: M3-MSA-*
        ids = [c for c in clauses if clause_key(c)[0] == prefix]
        if not ids and star:
            ids = [c for c in clauses if c.startswith(prefix + '-')]
        return ids, text, bool(ids)
    nums = [int(num)]
    if pair:
        nums += [int(x) for x in pair.strip('/').split('/')]
    if hi is not None:
        if hi == 'n':
            ids = [c for c in clauses if clause_key(c)[0] == prefix and clause_key(c)[1] >= int(num)]
            return ids, text, '%s-%s' % (prefix, num) in clauses
        nums = list(range(int(num), int(hi) + 1))
    ids = ['%s-%d' % (prefix, k) for k in nums]
    known = all(i in clauses for i in ids)
    return [i for i in ids if i in clauses], text, known


def strip_c_noise(line):
    """Remove string/char literals so braces inside them are not counted."""
    return re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', '""', line)


def c_functions(lines, is_header):
    """Find function definitions (.c) and declarations (.h).
    Returns a list of (name, start_line, body_start, body_end) 1-based; body
    lines are None for declarations."""
    out = []
    in_comment = False
    depth = 0
    pending = None  # (name, start) waiting for '{' or ';'
    current = None  # [name, start, body_start]
    for n, raw in enumerate(lines, 1):
        line = raw
        # strip comments (block and line), tracking multi-line blocks
        code = ''
        i = 0
        while i < len(line):
            if in_comment:
                j = line.find('*/', i)
                if j < 0:
                    i = len(line)
                else:
                    in_comment = False
                    i = j + 2
            else:
                j = line.find('/*', i)
                k = line.find('//', i)
                if k >= 0 and (j < 0 or k < j):
                    code += line[i:k]
                    i = len(line)
                elif j >= 0:
                    code += line[i:j]
                    in_comment = True
                    i = j + 2
                else:
                    code += line[i:]
                    i = len(line)
        code = strip_c_noise(code)
        if depth == 0 and pending is None and not code.startswith('#'):
            fm = FUNC_RE.match(code)
            if fm and fm.group(1) not in C_KEYWORDS:
                pending = (fm.group(1), n)
        for ch in code:
            if ch == '{':
                if depth == 0 and pending is not None:
                    current = [pending[0], pending[1], n]
                    pending = None
                depth += 1
            elif ch == '}':
                depth = max(0, depth - 1)
                if depth == 0 and current is not None:
                    out.append((current[0], current[1], current[2], n))
                    current = None
            elif ch == ';' and depth == 0 and pending is not None:
                out.append((pending[0], pending[1], None, None))
                pending = None
    return out


def comment_span(lines, line):
    """If 1-based `line` lies in a comment, return the 1-based last line of it."""
    i = line - 1
    text = lines[i]
    if '/*' in text or text.lstrip().startswith('*') or '*/' in text:
        j = i
        while j < len(lines) and '*/' not in lines[j]:
            j += 1
        return j + 1
    if text.lstrip().startswith('//'):
        j = i
        while j + 1 < len(lines) and lines[j + 1].lstrip().startswith('//'):
            j += 1
        return j + 1
    return None


def locate(funcs, line, lines):
    """Name the function a citation on `line` belongs to: the enclosing
    function, or the function right after the comment holding the citation,
    else '(file header)' before the first function."""
    for name, start, b0, b1 in funcs:
        if b0 is not None and start <= line <= b1:
            return name
    end = comment_span(lines, line)
    if end is not None:
        nxt = [f for f in funcs if f[1] > end]
        if nxt and nxt[0][1] - end <= 1:
            return nxt[0][0]
    for name, start, b0, b1 in funcs:
        if start == line:
            return name
    if not [f for f in funcs if f[1] < line]:
        return '(file header)'
    return '(between functions)'


def scan_sources(root, patterns, clauses, unknown, code_kind):
    """Return {clause: [(relpath, func)]}; record unknown citations."""
    hits = {}
    files = set()
    for p in patterns:
        files.update(glob.glob(os.path.join(root, p), recursive=True))
    for path in sorted(files):
        rel = os.path.relpath(path, root)
        try:
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = f.read().split('\n')
        except OSError:
            continue
        funcs = None
        if path.endswith(('.c', '.h')):
            funcs = c_functions(lines, path.endswith('.h'))
        for n, line in enumerate(lines, 1):
            if 'M3-' not in line:
                continue
            for m in CITE_RE.finditer(line):
                ids, text, known = expand(m, clauses)
                if code_kind == 'spec' and DEF_RE.match(line) and m.start() == line.find('**') + 2:
                    continue  # the definition itself
                if not known:
                    unknown.append((text, rel, n))
                where = locate(funcs, n, lines) if funcs is not None else None
                for cid in ids:
                    hits.setdefault(cid, []).append((rel, where, n))
    return hits


def scan_vectors(root, clauses, unknown):
    """Return {clause: [case id]} from vectors/**/case.json."""
    hits = {}
    for path in sorted(glob.glob(os.path.join(root, 'vectors', '**', 'case.json'), recursive=True)):
        rel = os.path.relpath(path, root)
        try:
            with open(path, encoding='utf-8') as f:
                case = json.load(f)
        except (OSError, ValueError) as exc:
            unknown.append(('(unreadable case.json: %s)' % exc, rel, 0))
            continue
        cid = case.get('id') or os.path.basename(os.path.dirname(path))
        cl = case.get('clauses', [])
        if not isinstance(cl, list):
            unknown.append(('(clauses is not a list)', rel, 0))
            continue
        for c in cl:
            if not isinstance(c, str):
                unknown.append(('(non-string clause %r)' % (c,), rel, 0))
                continue
            m = CITE_RE.fullmatch(c.strip())
            if not m:
                unknown.append((c, rel, 0))
                continue
            ids, text, known = expand(m, clauses)
            if not known:
                unknown.append((text, rel, 0))
            for i in ids:
                hits.setdefault(i, []).append(cid)
    return hits


def fmt_refs(refs, limit=4):
    seen = []
    for rel, where, _ in refs:
        s = '`%s`' % rel if not where else '`%s`:%s' % (rel, where if where.startswith('(') else '`%s`' % where)
        if s not in seen:
            seen.append(s)
    more = len(seen) - limit
    return ', '.join(seen[:limit]) + (' +%d' % more if more > 0 else '')


def write_report(out, clauses, impl, tests, conf, vecs, unknown, dups, deprecated_cites):
    areas = {}
    for cid in sorted(clauses, key=clause_key):
        area = cid.split('-')[1]
        areas.setdefault(area, []).append(cid)
    live = [c for c in clauses if not clauses[c]['deprecated']]
    n_impl = sum(1 for c in live if c in impl)
    n_vec = sum(1 for c in live if c in vecs)
    L = []
    L.append('# Spec coverage\n')
    L.append('Generated by `tools/coverage.py` (`make coverage`); do not edit by hand.\n')
    L.append('Clauses defined: %d (%d deprecated). Cited by `ref/`: %d. Exercised by vectors: %d.\n'
             % (len(clauses), len(clauses) - len(live), n_impl, n_vec))
    L.append('Citations of a whole topic (`M3-MSA-SELECT-*`) count for every clause of the topic.\n')
    if unknown:
        L.append('## Unknown ids (cited, not defined in spec/)\n')
        L.append('| cited | where |')
        L.append('|---|---|')
        for text, rel, n in unknown:
            L.append('| `%s` | `%s`%s |' % (text, rel, (':%d' % n) if n else ''))
        L.append('')
    if dups:
        L.append('## Duplicate definitions\n')
        for cid, rel, n, rel0, n0 in dups:
            L.append('- `%s` at %s:%d (first at %s:%d)' % (cid, rel, n, rel0, n0))
        L.append('')
    L.append('## Clauses\n')
    for area in areas:
        L.append('### %s\n' % area)
        L.append('| clause | ref/ (file: function) | tests | conformance | vectors |')
        L.append('|---|---|---|---|---|')
        for cid in areas[area]:
            c = clauses[cid]
            name = '[%s](../%s#L%d)' % (cid, c['file'], c['line'])
            if c['deprecated']:
                name += ' (deprecated)'
            v = vecs.get(cid, [])
            vs = ('%d: ' % len(v) + ', '.join('`%s`' % x for x in sorted(set(v))[:3])
                  + (' …' if len(set(v)) > 3 else '')) if v else '—'
            L.append('| %s | %s | %s | %s | %s |' % (
                name, fmt_refs(impl.get(cid, [])) or '—', fmt_refs(tests.get(cid, []), 3) or '—',
                fmt_refs(conf.get(cid, []), 2) or '—', vs))
        L.append('')
    L.append('## Gaps\n')
    noimpl = [c for c in sorted(live, key=clause_key) if c not in impl]
    novec = [c for c in sorted(live, key=clause_key) if c not in vecs]
    L.append('### Not cited by any ref/ file (%d)\n' % len(noimpl))
    L.append(', '.join('`%s`' % c for c in noimpl) or 'none')
    L.append('')
    L.append('### No vector (%d)\n' % len(novec))
    L.append(', '.join('`%s`' % c for c in novec) or 'none')
    L.append('')
    if deprecated_cites:
        L.append('### Citations of deprecated clauses\n')
        for cid, rel, n in deprecated_cites:
            L.append('- `%s` in `%s`:%d' % (cid, rel, n))
        L.append('')
    os.makedirs(os.path.dirname(out) or '.', exist_ok=True)
    with open(out, 'w', encoding='utf-8') as f:
        f.write('\n'.join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument('--out', default=None, help='default: ROOT/docs/coverage.md')
    ap.add_argument('--check', action='store_true', help='only check for unknown ids; write nothing')
    a = ap.parse_args()
    root = a.root
    clauses, dups = load_spec(root)
    if not clauses:
        print('coverage: no clause definitions found under %s/spec' % root, file=sys.stderr)
        return 1
    unknown = []
    impl = scan_sources(root, ['ref/**/*.c', 'ref/**/*.h'], clauses, unknown, 'ref')
    conf = scan_sources(root, ['conformance/*.c', 'conformance/*.h'], clauses, unknown, 'conf')
    tests = scan_sources(root, ['tests/*.c', 'tests/*.h'], clauses, unknown, 'tests')
    scan_sources(root, ['spec/*.md'], clauses, unknown, 'spec')
    vecs = scan_vectors(root, clauses, unknown)
    deprecated_cites = [(cid, rel, n) for src in (impl, conf, tests) for cid, refs in src.items()
                        if clauses[cid]['deprecated'] for rel, _, n in refs]
    if not a.check:
        out = a.out or os.path.join(root, 'docs', 'coverage.md')
        write_report(out, clauses, impl, tests, conf, vecs, unknown, dups, deprecated_cites)
        live = [c for c in clauses if not clauses[c]['deprecated']]
        print('coverage: %d clauses, %d cited by ref/, %d with vectors -> %s'
              % (len(clauses), sum(c in impl for c in live), sum(c in vecs for c in live),
                 os.path.relpath(out, root)))
    for cid, rel, n, rel0, n0 in dups:
        print('coverage: %s:%d: %s is already defined at %s:%d' % (rel, n, cid, rel0, n0),
              file=sys.stderr)
    for text, rel, n in unknown:
        print('coverage: %s%s: cites %s, which spec/ does not define'
              % (rel, (':%d' % n) if n else '', text), file=sys.stderr)
    return 1 if (unknown or dups) else 0


if __name__ == '__main__':
    sys.exit(main())
