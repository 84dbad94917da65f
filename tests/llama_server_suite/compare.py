#!/usr/bin/env python3
"""The pass/fail table of llama.cpp's server suite on llama-server and on agentkv (run_suite.py's
JSON files), as Markdown: per test file, then every test that passes on llama-server and not on
agentkv, with agentkv's failure (docs/server.md keeps the table and gives each one its reason).

    tests/llama_server_suite/compare.py llama.json agentkv.json [--reasons reasons.json]

reasons.json (optional) maps a test id, or a prefix of one ending in '*', to the documented reason.
Exits 1 when a test passes on llama-server, fails on agentkv and has no reason.
"""
import argparse
import json
import sys
from collections import defaultdict


def reason_for(test, reasons):
    if test in reasons:
        return reasons[test]
    best = None
    for key, why in reasons.items():
        if key.endswith("*") and test.startswith(key[:-1]) and (best is None or len(key) > len(best[0])):
            best = (key, why)
    return best[1] if best else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llama")
    ap.add_argument("agentkv")
    ap.add_argument("--reasons", help="JSON: test id (or prefix*) -> reason")
    args = ap.parse_args()
    llama = json.load(open(args.llama))["tests"]
    agentkv = json.load(open(args.agentkv))["tests"]
    reasons = json.load(open(args.reasons)) if args.reasons else {}

    per_file = defaultdict(lambda: defaultdict(int))
    missing = []
    for test in sorted(set(llama) | set(agentkv)):
        f = test.split("::")[0]
        l = llama.get(test, {}).get("outcome", "absent")
        a = agentkv.get(test, {}).get("outcome", "absent")
        row = per_file[f]
        row["tests"] += 1
        row["llama"] += l == "passed"
        row["agentkv"] += a == "passed"
        row["both"] += l == "passed" and a == "passed"
        row["agentkv only"] += a == "passed" and l != "passed"
        if l == "passed" and a != "passed":
            row["llama only"] += 1
            missing.append((test, agentkv.get(test, {}).get("message", a)))

    cols = ["tests", "llama", "agentkv", "both", "llama only", "agentkv only"]
    print("| test file | tests | pass on llama-server | pass on agentkv | pass on both | llama-server only | agentkv only |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = defaultdict(int)
    for f in sorted(per_file):
        print("| %s | %s |" % (f, " | ".join(str(per_file[f][c]) for c in cols)))
        for c in cols:
            total[c] += per_file[f][c]
    print("| **all** | %s |" % " | ".join("**%d**" % total[c] for c in cols))
    print()
    unexplained = 0
    if missing:
        print("| passes on llama-server, not on agentkv | why |")
        print("| --- | --- |")
        for test, message in missing:
            why = reason_for(test, reasons)
            if why is None:
                unexplained += 1
                why = "**no reason recorded** — agentkv: " + " ".join(str(message).split())[:160].replace("|", "\\|")
            print("| `%s` | %s |" % (test, why))
    if unexplained:
        print("\ncompare.py: %d tests pass on llama-server, fail on agentkv and have no reason" % unexplained, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
