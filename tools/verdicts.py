"""verdicts.py — the kit's JSON results on every vector and mutant, and the
difference between two builds of the kit (a refactor of the judge must not
change a verdict).

  /usr/bin/python3 tools/verdicts.py collect --conform BIN --out DIR
  /usr/bin/python3 tools/verdicts.py diff DIR_A DIR_B [--allow FIELD ...]
  make verdicts-diff BEFORE=OLD/m3-conform     (both, into build/verdicts/)

collect runs BIN on vectors/manifest.json (free-running and --teacher-forced),
on build/vectors-big/manifest.json when it exists, and `check` on every mutant
of the manifest (settled and --no-settle), keeping each JSON result and exit
status. diff compares two collections record by record, ignoring times and
temporary paths and the fields named by --allow (default: tie_evidence, where
a golden's tie evidence came from); it prints every other difference and
counts those that differ only in the digits of a number printed inside a
message. Exit 1 when a result (Pass, Fail, ...) or an exit status differs.
stdlib only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TMP = re.compile(r"/tmp/[A-Za-z0-9_.-]+")
NUM = re.compile(r"-?\d+\.\d+(e[-+]?\d+)?|-?\d+e[-+]?\d+")


def invocations():
    """(name, args) of every judgement collect runs."""
    out = [("run", ["run", "vectors/manifest.json", "--quiet"]),
           ("run_tf", ["run", "vectors/manifest.json", "--teacher-forced", "--quiet"])]
    big = os.path.join("build", "vectors-big", "manifest.json")
    if os.path.exists(os.path.join(ROOT, big)):
        out.append(("run_big", ["run", big, "--teacher-forced", "--quiet"]))
    man = json.load(open(os.path.join(ROOT, "vectors", "manifest.json")))
    for rel in man.get("mutants", []):
        mu = json.load(open(os.path.join(ROOT, "vectors", rel, "mutant.json")))
        args = ["check", "--case", os.path.join("vectors", mu["case"]),
                "--dump", os.path.join("vectors", rel, mu.get("dump", "dump.safetensors")), "--quiet"]
        if mu.get("profile"):
            args += ["--profile", mu["profile"]]
        name = rel.replace("/", "_")
        out.append((name, args))
        out.append((name + "_no_settle", args + ["--no-settle"]))
    return out


def collect(conform, out):
    os.makedirs(out, exist_ok=True)
    status = {}
    for name, args in invocations():
        path = os.path.join(out, name + ".json")
        r = subprocess.run([conform] + args + ["--json", path], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        status[name] = r.returncode
    with open(os.path.join(out, "status.json"), "w") as f:
        json.dump(status, f, indent=1, sort_keys=True)
    print("verdicts: %d judgements of %s in %s" % (len(status), conform, out))


def load(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def norm(x, drop):
    if isinstance(x, dict):
        return {k: norm(v, drop) for k, v in x.items() if k not in drop}
    if isinstance(x, list):
        return [norm(v, drop) for v in x]
    return TMP.sub("TMP", x) if isinstance(x, str) else x


def mask(x):
    if isinstance(x, dict):
        return {k: NUM.sub("#", v) if k == "msg" and isinstance(v, str) else mask(v) for k, v in x.items()}
    return [mask(v) for v in x] if isinstance(x, list) else x


def diff(a, b, allow):
    sa = json.load(open(os.path.join(a, "status.json")))
    sb = json.load(open(os.path.join(b, "status.json")))
    bad = 0
    for k in sorted(set(sa) | set(sb)):
        if sa.get(k) != sb.get(k):
            print("exit status of %s: %s -> %s" % (k, sa.get(k), sb.get(k)))
            bad += 1
    drop = {"seconds"} | set(allow)
    same = digits = other = 0
    for k in sorted(set(sa) & set(sb)):
        ra, rb = load(os.path.join(a, k + ".json")), load(os.path.join(b, k + ".json"))
        if len(ra) != len(rb):
            print("%s: %d records -> %d" % (k, len(ra), len(rb)))
            bad += 1
            continue
        for x, y in zip(ra, rb):
            nx, ny = norm(x, drop), norm(y, drop)
            if nx == ny:
                same += 1
            elif mask(nx) == mask(ny):
                digits += 1
            else:
                other += 1
                print("%s:\n  - %s\n  + %s" % (k, json.dumps(nx, sort_keys=True), json.dumps(ny, sort_keys=True)))
            if nx.get("result") != ny.get("result"):
                bad += 1
    print("verdicts: %d records identical, %d differ only in the digits of a number in a message, %d otherwise; "
          "%d result or exit-status changes (fields allowed to differ: %s)" % (same, digits, other, bad,
                                                                              ", ".join(sorted(allow))))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--conform", required=True)
    c.add_argument("--out", required=True)
    d = sub.add_parser("diff")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--allow", nargs="*", default=["tie_evidence"])
    o = ap.parse_args()
    if o.cmd == "collect":
        collect(os.path.abspath(o.conform), os.path.abspath(o.out))
        return 0
    return diff(o.a, o.b, o.allow)


if __name__ == "__main__":
    sys.exit(main())
