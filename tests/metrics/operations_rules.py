#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The rules of docs/operations.md, as written there: each fenced block after a line
# `<!-- file: NAME -->` is a file.
#   operations_rules.py extract DOC OUTDIR            writes the files
#   operations_rules.py check DOC OUTDIR PROMTOOL     writes them, then promtool check rules
#                                                     and promtool test rules; every alert
#                                                     must be tested (exit 77: no promtool)
import re
import subprocess
import sys
from pathlib import Path


def extract(doc: Path, out: Path):
    text = doc.read_text()
    files = re.findall(r"<!-- file: ([\w.-]+) -->\n```[a-z]*\n(.*?)```", text, re.S)
    if not files:
        sys.exit(f"{doc}: no '<!-- file: NAME -->' block")
    out.mkdir(parents=True, exist_ok=True)
    for name, body in files:
        (out / name).write_text(body)
    return [out / name for name, _ in files]


def main():
    command, doc, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    files = extract(doc, out)
    if command == "extract":
        return 0
    promtool = sys.argv[4] if len(sys.argv) > 4 else ""
    if not promtool or not Path(promtool).exists():
        print("SKIPPED: no promtool (Debian's prometheus package; ./scripts/test fetches it)")
        return 77
    rules = [f for f in files if f.name.endswith(".rules.yml")]
    tests = [f for f in files if f.name.endswith(".test.yml")]
    if not rules or not tests:
        sys.exit("docs/operations.md needs a *.rules.yml and a *.test.yml block")
    # Every alert has at least one alert_rule_test.
    alerts = {m for f in rules for m in re.findall(r"^\s*- alert: (\w+)", f.read_text(), re.M)}
    tested = {m for f in tests for m in re.findall(r"alertname: (\w+)", f.read_text())}
    if alerts - tested:
        sys.exit(f"alerts without a test: {sorted(alerts - tested)}")
    for args in (["check", "rules", *map(str, rules)], ["test", "rules", *map(str, tests)]):
        print("$ promtool " + " ".join(args[:2]), flush=True)
        result = subprocess.run([promtool, *args], cwd=out)
        if result.returncode:
            return 1
    print(f"{len(alerts)} alerts, each tested: {', '.join(sorted(alerts))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
