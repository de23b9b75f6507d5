# SPDX-License-Identifier: MIT
# The package recipes agree with the build and with each other. vcpkg cannot run here (its
# ports fetch their sources at build time); Conan runs in package.conan_create.*. What this
# checks without either:
#   - the version: the vcpkg port and the Conan recipe carry the one CMakeLists.txt declares;
#   - the dependencies: the CMake package's find_dependency lines (what find_package(redis_lock)
#     needs), the Conan recipe's requires and the port's vcpkg.json name the same libraries,
#     with the same minimum versions where the build and the recipe both state one (Boost,
#     OpenSSL; vcpkg.json states none: a port takes its registry's), and the optional parts
#     (the CLI, the prometheus component) are optional in each, behind the same switch;
#   - the options: vcpkg features == Conan options (besides shared/fPIC) == the CMake options
#     they set, with the same defaults;
#   - the targets: the usage text, the Conan components and the installed export sets name
#     the same targets;
#   - vcpkg's conventions as its maintainer guide states them: vcpkg_cmake_configure /
#     vcpkg_cmake_install / vcpkg_cmake_config_fixup (with their host ports), no deprecated
#     helper, copyright through vcpkg_install_copyright, a usage file, features through
#     vcpkg_check_features, each with a description; the debug headers and share removed.
import ast
import json
import re
import sys
from pathlib import Path

source, version = Path(sys.argv[1]), sys.argv[2]
failures = []


def fail(text):
    failures.append(text)


def read(path):
    return (source / path).read_text()


# ---- the three descriptions of the package --------------------------------------------------
manifest = json.loads(read("ports/redis-lock/vcpkg.json"))
portfile = read("ports/redis-lock/portfile.cmake")
usage = read("ports/redis-lock/usage")
recipe = read("conanfile.py")
config_in = read("cmake/redis_lockConfig.cmake.in")
dependencies_cmake = read("cmake/dependencies.cmake")
cli_cmake = read("cmake/cli.cmake")
top = read("CMakeLists.txt")
install_rules = read("cmake/install-rules.cmake")
ast.parse(recipe)
ast.parse(read("test_package/conanfile.py"))


def dep_names(entries):
    return {d if isinstance(d, str) else d["name"] for d in entries}


def vcpkg_feature_deps(feature):
    return dep_names(manifest.get("features", {}).get(feature, {}).get("dependencies", []))


# The libraries, by the name each tool gives them: CMake package -> Conan -> vcpkg ports.
# (Boost's ports are per library: the Boost components the CMake package asks for, plus Asio,
# which is header-only and so never a find_package component.)
boost_components = set(re.search(r"find_dependency\(Boost [0-9.]+ COMPONENTS ([a-z_ ]+)\)",
                                 config_in).group(1).split())
core_cmake = set()
for line in config_in.splitlines():
    found = re.match(r"\s*find_dependency\((\w+)", line)
    if found:
        core_cmake.add(found.group(1))
if "redis_lock_find_hiredis" in config_in:
    core_cmake.add("hiredis")
core_cmake.discard("Threads")  # the system's, in no package manager
expected_core = {"Boost", "OpenSSL", "hiredis"}
if core_cmake != expected_core:
    fail(f"redis_lockConfig.cmake.in finds {sorted(core_cmake)}, the recipes know {sorted(expected_core)}")
to_conan = {"Boost": "boost", "OpenSSL": "openssl", "hiredis": "hiredis",
            "prometheus-cpp": "prometheus-cpp"}
to_vcpkg = {"Boost": {"boost-asio"} | {f"boost-{c.replace('_', '-')}" for c in boost_components},
            "OpenSSL": {"openssl"}, "hiredis": {"hiredis"}, "prometheus-cpp": {"prometheus-cpp"}}

# Conan: requires, unconditional or under an option.
conan_requires = {}  # name -> (minimum or None, option or None)
option, option_indent = None, -1
for line in recipe.splitlines():
    if not line.strip():
        continue
    indent = len(line) - len(line.lstrip())
    if option is not None and indent <= option_indent:
        option = None  # out of the `if self.options.X:` block
    guard = re.match(r"\s*if self\.options\.(\w+):", line)
    if guard:
        option, option_indent = guard.group(1), indent
    found = re.search(r'self\.requires\("([\w-]+)/([^"]+)"', line)
    if found:
        minimum = re.match(r"\[>=([0-9.]+)", found.group(2))
        conan_requires[found.group(1)] = (minimum and minimum.group(1), option)

for cmake_name in sorted(expected_core):
    name = to_conan[cmake_name]
    if name not in conan_requires:
        fail(f"conanfile.py does not require {name} (the CMake package finds {cmake_name})")
    elif conan_requires[name][1] is not None:
        fail(f"conanfile.py requires {name} only with option {conan_requires[name][1]}")
    for port in sorted(to_vcpkg[cmake_name]):
        if port not in dep_names(manifest["dependencies"]):
            fail(f"vcpkg.json lacks {port} (the CMake package finds {cmake_name})")
extra_conan = set(conan_requires) - {to_conan[n] for n in expected_core} - {"prometheus-cpp"}
if extra_conan:
    fail(f"conanfile.py requires {sorted(extra_conan)}, which the CMake package does not find")
library_ports = {d for d in dep_names(manifest["dependencies"]) if not d.startswith("vcpkg-")}
extra_vcpkg = library_ports - set().union(*(to_vcpkg[n] for n in expected_core))
if extra_vcpkg:
    fail(f"vcpkg.json requires {sorted(extra_vcpkg)}, which the CMake package does not find")

# The same minimum versions where both state one.
cmake_minimums = {name: ver for name, ver in
                  re.findall(r"find_package\((Boost|OpenSSL) ([0-9.]+)", dependencies_cmake)}
for cmake_name, minimum in cmake_minimums.items():
    conan_min = conan_requires.get(to_conan[cmake_name], (None,))[0]
    if conan_min != minimum:
        fail(f"{cmake_name}: the build needs >= {minimum}, conanfile.py asks >= {conan_min}")

# The prometheus component: optional in all three, behind the switch of that name.
if "find_package(prometheus-cpp" not in config_in or '"prometheus" IN_LIST' not in config_in:
    fail("redis_lockConfig.cmake.in does not find prometheus-cpp for the prometheus component")
if conan_requires.get("prometheus-cpp", (None, None))[1] != "prometheus":
    fail("conanfile.py must require prometheus-cpp under `if self.options.prometheus:`")
if "prometheus-cpp" not in vcpkg_feature_deps("prometheus"):
    fail("vcpkg.json's prometheus feature lacks prometheus-cpp")
if "prometheus-cpp" in dep_names(manifest["dependencies"]):
    fail("vcpkg.json requires prometheus-cpp outside its feature")
# The CLI: Boost.Program_options, for the tool only.
if "COMPONENTS program_options" not in cli_cmake:
    fail("cmake/cli.cmake no longer finds Boost.Program_options: update the recipes")
if "boost-program-options" not in vcpkg_feature_deps("cli"):
    fail("vcpkg.json's cli feature lacks boost-program-options")
if "boost-program-options" in dep_names(manifest["dependencies"]):
    fail("vcpkg.json requires boost-program-options outside the cli feature")
# What the library does not use, no package requires (fmt is for an example only).
if "fmt" in library_ports or "fmt/" in recipe:
    fail("a recipe requires fmt, which the library does not use")

# ---- options and features -------------------------------------------------------------------
options = ast.literal_eval(re.search(r"^    options = (\{.*?\})$", recipe, re.M | re.S).group(1))
defaults = ast.literal_eval(re.search(r"^    default_options = (\{.*?\})$", recipe,
                                      re.M | re.S).group(1))
conan_switches = set(options) - {"shared", "fPIC"}
features = set(manifest.get("features", {}))
if features != conan_switches:
    fail(f"vcpkg features {sorted(features)} != Conan options {sorted(conan_switches)}")
feature_to_cmake = dict(re.findall(r"^\s+(\w+) (REDIS_LOCK_\w+)\)?$", portfile, re.M))
if set(feature_to_cmake) != features:
    fail(f"portfile.cmake maps features {sorted(feature_to_cmake)}, vcpkg.json has {sorted(features)}")
for feature, variable in feature_to_cmake.items():
    if f'"{variable}"' not in recipe:
        fail(f"conanfile.py does not set {variable} (vcpkg's {feature} feature does)")
    if variable not in top + read("cmake/prometheus.cmake"):
        fail(f"{variable} is not a CMake option of the project")
default_features = dep_names(manifest.get("default-features", []))
for switch in sorted(conan_switches):
    if bool(defaults.get(switch)) != (switch in default_features):
        fail(f"{switch}: on by default in {'Conan' if defaults.get(switch) else 'vcpkg'} only")
if "shared" not in options or "fPIC" not in options:
    fail("conanfile.py lacks the shared/fPIC options (the CMake package builds both)")

# ---- targets --------------------------------------------------------------------------------
targets = {"redis_lock::redis_lock"}
if "EXPORT redis_lock_prometheusTargets" in install_rules:
    targets.add("redis_lock::prometheus")
for target in sorted(targets):
    if target not in usage:
        fail(f"the port's usage does not name {target}")
    if f'"cmake_target_name", "{target}"' not in recipe:
        fail(f"conanfile.py has no component with the target {target}")
if "find_package(redis_lock CONFIG REQUIRED)" not in usage:
    fail("the port's usage does not show find_package(redis_lock CONFIG REQUIRED)")

# ---- the version ----------------------------------------------------------------------------
if manifest.get("version-semver") != version:
    fail(f"vcpkg.json version {manifest.get('version-semver')} != {version}")
pattern = re.search(r're\.search\(r"(.+?)", text\)', recipe).group(1)
found = re.search(pattern, top)
if not found or found.group(1) != version:
    fail(f"conanfile.py reads version {found and found.group(1)} != {version}")

# ---- vcpkg's conventions --------------------------------------------------------------------
for needed, why in (("vcpkg_cmake_configure(", "configure with vcpkg-cmake"),
                    ("vcpkg_cmake_install()", "install with vcpkg-cmake"),
                    ("vcpkg_cmake_config_fixup(PACKAGE_NAME redis_lock CONFIG_PATH lib/cmake/redis_lock)",
                     "move the CMake package to share/redis_lock"),
                    ("vcpkg_install_copyright(FILE_LIST", "install the copyright"),
                    ('"${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}"',
                     "install the usage file"),
                    ("vcpkg_check_features(", "turn features into CMake options"),
                    ('"${CURRENT_PACKAGES_DIR}/debug/include"', "remove the debug headers"),
                    ('"${CURRENT_PACKAGES_DIR}/debug/share"', "remove the debug share")):
    if needed not in portfile:
        fail(f"portfile.cmake does not {why} ({needed})")
for deprecated in ("vcpkg_configure_cmake", "vcpkg_install_cmake", "vcpkg_build_cmake",
                   "vcpkg_fixup_cmake_targets", "RENAME copyright", "PREFER_NINJA"):
    if deprecated in portfile:
        fail(f"portfile.cmake uses {deprecated}, deprecated by vcpkg")
hosts = {d["name"] for d in manifest["dependencies"] if isinstance(d, dict) and d.get("host")}
for helper in ("vcpkg-cmake", "vcpkg-cmake-config"):
    if helper not in hosts:
        fail(f"vcpkg.json lacks the host dependency {helper}")
for feature, body in manifest.get("features", {}).items():
    if not body.get("description"):
        fail(f"vcpkg.json's feature {feature} has no description")
if not manifest.get("description"):
    fail("vcpkg.json has no description")
license_text = read("LICENSE")
conan_license = re.search(r'license = "([^"]+)"', recipe).group(1)
if manifest.get("license") != conan_license or not license_text.startswith(conan_license):
    fail(f"licenses disagree: vcpkg {manifest.get('license')}, Conan {conan_license}, "
         f"LICENSE starts {license_text[:20]!r}")
if manifest.get("supports") != "linux" or 'self.settings.os != "Linux"' not in recipe:
    fail("vcpkg.json's supports and conanfile.py's validate() must both say Linux")
if "cli" in features and "vcpkg_copy_tools(TOOL_NAMES redis-lock" not in portfile:
    fail("portfile.cmake does not install the redis-lock tool (vcpkg_copy_tools)")

for failure in failures:
    print("FAILED:", failure)
print("recipes agree with version", version if not failures else "-- no")
sys.exit(1 if failures else 0)
