#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The library's layers (docs/architecture.md): every file of src/ belongs to one, and
# includes files of its own layer or of lower ones only. A new file must be given a layer
# here; an include that points up fails with the file, the line and the two layers.
import re
import sys
from pathlib import Path

LAYERS = {
    1: ["resp", "backoff", "keys", "token", "error", "completion", "redis_lock_scripts", "decimal",
        "replies", "script_call", "script_table", "script_words", "validity", "info_text",
        "idempotency_record", "attempt", "printable"],
    2: ["connection", "connection_connect", "connection_link", "connect_fsm", "library_use",
        "pipeline", "tls"],
    3: ["router", "redirect", "sentinel_locator", "slot_map", "quorum", "quorum_call", "topology"],
    4: ["lock_service", "engine", "acquire_all", "acquire_fsm", "acquire_op", "observe_op", "pending",
        "lease_ops", "renewal", "waiters", "script_op", "lease", "validate", "shutdown_watch", "admin",
        "idempotency_store", "idempotency_run"],
    5: ["lock", "config", "config_syntax", "election", "idempotency", "idempotency_op"],
}
NAMES = {1: "protocol", 2: "connection", 3: "topology", 4: "engine", 5: "public API"}
LAYER_OF = {stem: layer for layer, stems in LAYERS.items() for stem in stems}
# A deployment's shape is one file of the topology layer each (src/topology.hpp).
SHAPE_PREFIX, SHAPE_LAYER = "topology_", 3


def layer_of_stem(stem: str):
    if stem.startswith(SHAPE_PREFIX):
        return SHAPE_LAYER
    return LAYER_OF.get(stem)
# Public headers: the types every layer may use, and the API on top (the engine hands the
# public layer Grants; only the public layer makes LockGuards of them).
PUBLIC = {"config": 1, "error": 1, "diagnostics": 1, "observer": 1, "export": 1, "version": 1, "state": 1,
          "lock": 5, "election": 5, "idempotency": 5, "idempotency_types": 1, "idempotency_kind": 1, "with_lock": 5, "redis_lock": 5, "prometheus": 6}


def layer_of_include(name: str):
    if name.startswith("redis_lock/detail/"):
        return 4  # the public headers' own plumbing, part of LockGuard/LockManager
    if name.startswith("redis_lock/"):
        return PUBLIC.get(Path(name).stem)
    return layer_of_stem(Path(name).stem)


# The facade starts ops; ops never reach back into it (they share the Engine, engine.hpp).
FACADE = "lock_service.hpp"
FACADE_USERS = {"lock_service", "lock", "election", "idempotency"}


def main() -> int:
    src = Path(sys.argv[1])
    failures = []
    files = sorted(p for p in src.iterdir() if p.suffix in (".hpp", ".cpp"))
    for path in files:
        stem = path.stem
        if layer_of_stem(stem) is None:
            failures.append(f"{path}: not in any layer (add it to tests/layers/check_layers.py)")
            continue
        mine = layer_of_stem(stem)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+(?:"([^"]+)"|<(redis_lock/[^>]+)>)', line)
            if not m:
                continue
            name = m.group(1) or m.group(2)
            if name == FACADE and stem not in FACADE_USERS:
                failures.append(f"{path}:{number}: {stem} includes the facade ({FACADE}); "
                                "an op uses the Engine (engine.hpp)")
                continue
            target = layer_of_include(name)
            if target is None:
                failures.append(f"{path}:{number}: includes {name}, which is in no layer")
            elif target > mine:
                failures.append(
                    f"{path}:{number}: {NAMES[mine]} ({stem}) includes {NAMES[target]} ({name})")
    # Optional components (src/<component>/, e.g. prometheus) are built on the public API
    # alone: no include of src/ or of the public headers' detail/ plumbing (a header of
    # the component's own directory is its own).
    components = sorted(p for p in src.glob("*/*") if p.suffix in (".hpp", ".cpp"))
    for path in components:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+(?:"([^"]+)"|<(redis_lock/[^>]+)>)', line)
            if not m:
                continue
            name = m.group(1) or m.group(2)
            if m.group(1) and "/" not in name and (path.parent / name).is_file():
                continue
            if m.group(1) or name.startswith("redis_lock/detail/") or PUBLIC.get(Path(name).stem) is None:
                failures.append(f"{path}:{number}: an optional component includes {name}; "
                                "it may use the public headers only")
    for f in failures:
        print(f)
    print(f"{len(files) + len(components)} files checked, {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
