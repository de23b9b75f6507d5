#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fails when a tracked C++ file differs from what clang-format makes of it.

    check_format.py CLANG_FORMAT ROOT

Lists the files git tracks under ROOT (outside a git checkout: every *.cpp and *.hpp), asks
clang-format for each one's replacements, and prints the files it would change.
"""
import pathlib
import subprocess
import sys


def tracked(root):
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "*.cpp", "*.hpp"],
                             check=True, capture_output=True, text=True).stdout.split()
        return [root / f for f in out]
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for ext in ("*.cpp", "*.hpp") for p in root.rglob(ext)
                      if "build" not in p.relative_to(root).parts)


def main():
    clang_format, root = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
    files = [f for f in tracked(root) if f.is_file()]
    unformatted = []
    for f in files:
        # (tests/snippets has a .clang-format of its own that turns formatting off.)
        result = subprocess.run([clang_format, "--dry-run", "-Werror", str(f)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            unformatted.append(str(f.relative_to(root)))
    if not files:
        print("no C++ files found under", root, file=sys.stderr)
        return 1
    if unformatted:
        print(f"{len(unformatted)} of {len(files)} files differ from their clang-format layout "
              f"(run: {clang_format} -i FILE):", file=sys.stderr)
        for f in unformatted:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"{len(files)} C++ files keep the .clang-format layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
