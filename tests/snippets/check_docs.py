#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that the C++ blocks of the docs are the tested snippets.

Every ```cpp block of the given Markdown files must be, up to common indentation, exactly
the text between a `//[name` line and the next `//]` line of one of the snippet files (the
files the snippet tests compile and run); every marked snippet must appear in some block.
A block that is in no snippet is reported with its file:line and a diff against the closest
snippet; a snippet that is in no block, with its file:line.

    check_docs.py --root DIR --snippets tests/snippets/a.cpp [...] -- README.md docs/guide.md

Exit status 0 when everything matches, 1 otherwise.
"""
import argparse
import difflib
import pathlib
import re
import sys

FENCE_OPEN = re.compile(r"^(\s*)```\s*(cpp|c\+\+|C\+\+|cxx|hpp)\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
MARK_OPEN = re.compile(r"^\s*//\[([A-Za-z0-9_]+)\s*$")
MARK_CLOSE = re.compile(r"^\s*//\]\s*$")


def dedent(lines):
    """The lines without their common leading whitespace (blank lines do not count)."""
    widths = [len(l) - len(l.lstrip(" \t")) for l in lines if l.strip()]
    cut = min(widths, default=0)
    return tuple(l[cut:] if l.strip() else "" for l in lines)


def doc_blocks(path, shown):
    """(line of the opening fence, dedented lines) of each C++ block of a Markdown file."""
    blocks, lines = [], path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        if FENCE_OPEN.match(lines[i]):
            start = i
            i += 1
            while i < len(lines) and not FENCE_CLOSE.match(lines[i]):
                i += 1
            if i == len(lines):
                raise SystemExit(f"{shown}:{start + 1}: C++ block without its closing ```")
            blocks.append((start + 1, dedent(lines[start + 1:i])))
        i += 1
    return blocks


def snippets(path, shown):
    """{name: (line of the //[ marker, dedented lines)} of a snippet file."""
    found, lines, current = {}, path.read_text(encoding="utf-8").split("\n"), None
    for number, line in enumerate(lines, 1):
        opening, closing = MARK_OPEN.match(line), MARK_CLOSE.match(line)
        if opening:
            if current:
                raise SystemExit(f"{shown}:{number}: //[{opening[1]} inside //[{current[0]}")
            current = (opening[1], number, [])
        elif closing:
            if not current:
                raise SystemExit(f"{shown}:{number}: //] without a //[name before it")
            name, start, body = current
            if name in found:
                raise SystemExit(f"{shown}:{start}: snippet {name} is marked twice")
            found[name] = (start, dedent(body))
            current = None
        elif current:
            current[2].append(line)
    if current:
        raise SystemExit(f"{shown}:{current[1]}: //[{current[0]} without its //]")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, type=pathlib.Path)
    parser.add_argument("--snippets", nargs="+", required=True)
    parser.add_argument("docs", nargs="+")
    args = parser.parse_args()

    marked = {}  # name -> (file:line, lines)
    for name in args.snippets:
        for snippet, (line, body) in snippets(args.root / name, name).items():
            if snippet in marked:
                raise SystemExit(f"{name}:{line}: snippet {snippet} is also in {marked[snippet][0]}")
            marked[snippet] = (f"{name}:{line}", body)
    by_text = {body: snippet for snippet, (_, body) in marked.items()}

    failures, used, count = [], set(), 0
    for doc in args.docs:
        for line, block in doc_blocks(args.root / doc, doc):
            count += 1
            if block in by_text:
                used.add(by_text[block])
                continue
            closest = max(marked, default=None, key=lambda s: difflib.SequenceMatcher(
                None, "\n".join(marked[s][1]), "\n".join(block)).ratio())
            message = f"{doc}:{line}: this C++ block is not a tested snippet"
            if closest:
                where, body = marked[closest]
                diff = difflib.unified_diff(body, block, f"{where} (snippet {closest})",
                                            f"{doc}:{line}", lineterm="", n=1)
                message += f"; closest is {closest} ({where}):\n  " + "\n  ".join(diff)
            failures.append(message)
    for snippet, (where, _) in sorted(marked.items()):
        if snippet not in used:
            failures.append(f"{where}: snippet {snippet} is in no C++ block of "
                            f"{', '.join(args.docs)}")

    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        print(f"docs and snippets differ: {len(failures)} problem(s). Edit the snippet in "
              f"tests/snippets/ and copy it into the doc, or the other way round.", file=sys.stderr)
        return 1
    print(f"{count} C++ blocks of {', '.join(args.docs)} match the tested snippets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
