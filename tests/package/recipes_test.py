# SPDX-License-Identifier: MIT
# The package recipes agree with the build: the vcpkg port and the Conan recipe carry the
# version CMakeLists.txt declares (the one place it is written), name the same dependencies,
# and the files they refer to exist. (vcpkg and Conan themselves are not run here.)
import ast
import json
import re
import sys
from pathlib import Path

source, version = Path(sys.argv[1]), sys.argv[2]
failures = []

manifest = json.loads((source / "ports/redis-lock/vcpkg.json").read_text())
if manifest.get("version-semver") != version:
    failures.append(f"vcpkg.json version {manifest.get('version-semver')} != {version}")
deps = {d if isinstance(d, str) else d["name"] for d in manifest["dependencies"]}
for needed in ("boost-asio", "boost-system", "boost-url", "hiredis", "openssl"):
    if needed not in deps:
        failures.append(f"vcpkg.json lacks {needed}")
# What the library does not use, the package does not require (fmt is for an example only).
if "fmt" in deps:
    failures.append("vcpkg.json requires fmt, which the library does not use")
cli_deps = {d if isinstance(d, str) else d["name"]
            for d in manifest.get("features", {}).get("cli", {}).get("dependencies", [])}
if "boost-program-options" not in cli_deps:
    failures.append("vcpkg.json's cli feature lacks boost-program-options")

prom_deps = {d if isinstance(d, str) else d["name"]
             for d in manifest.get("features", {}).get("prometheus", {}).get("dependencies", [])}
if "prometheus-cpp" not in prom_deps:
    failures.append("vcpkg.json's prometheus feature lacks prometheus-cpp")

portfile = (source / "ports/redis-lock/portfile.cmake").read_text()
for needed in ("PACKAGE_NAME redis_lock", "CONFIG_PATH lib/cmake/redis_lock", "REDIS_LOCK_BUILD_CLI",
               "prometheus REDIS_LOCK_PROMETHEUS"):
    if needed not in portfile:
        failures.append(f"portfile.cmake lacks {needed}")
if not (source / "ports/redis-lock/usage").is_file():
    failures.append("the port has no usage file")

recipe = (source / "conanfile.py").read_text()
ast.parse(recipe)
ast.parse((source / "test_package/conanfile.py").read_text())
pattern = re.search(r're\.search\(r"(.+?)", text\)', recipe).group(1)
found = re.search(pattern, (source / "CMakeLists.txt").read_text())
if not found or found.group(1) != version:
    failures.append(f"conanfile.py reads version {found and found.group(1)} != {version}")
for needed in ("boost/", "hiredis/", "openssl/", '"redis_lock::redis_lock"', "prometheus-cpp/",
               '"redis_lock::prometheus"', '"REDIS_LOCK_PROMETHEUS"'):
    if needed not in recipe:
        failures.append(f"conanfile.py lacks {needed}")
if "fmt/" in recipe:
    failures.append("conanfile.py requires fmt, which the library does not use")
for pattern in re.search(r"exports_sources = (.+)", recipe).group(1).split(", "):
    if not list(source.glob(pattern.strip('"'))):
        failures.append(f"conanfile.py exports {pattern}, which matches nothing")

for failure in failures:
    print("FAILED:", failure)
print("recipes agree with version", version if not failures else "-- no")
sys.exit(1 if failures else 0)
