# SPDX-License-Identifier: MIT
# Shared by the README's commands: find or install what the build needs.

# Boost >= 1.81 (the build needs System and URL; the CLI Program_options, the tests Context,
# the checkout example JSON), as the distribution packages it.
REDIS_LOCK_BOOST_MIN=1.81
REDIS_LOCK_BOOST_COMPONENTS=(url json context program-options)

# version_ge A B: A >= B as dotted versions.
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]; }

# Prints the Boost packages to ask for, one per line: the Boost >= 1.81 already installed if
# there is one (libboostX.Y-dev: its components must be the same version); else the
# distribution's default packages (libboost-dev, libboost-url-dev, ...) when that default is
# new enough and has every component (Ubuntu 24.04: 1.83); else the newest versioned Boost
# >= 1.81 it has (Debian 12: libboost1.81-dev beside a default of 1.74). Nothing (and a
# warning) when it has none: then install Boost where CMake finds it.
boost_packages() {
  local version="" v c
  # 1. Installed.
  for v in $(dpkg-query -W -f='${Package} ${Status}\n' 'libboost[0-9]*-dev' 2>/dev/null |
             sed -n 's/^libboost\([0-9][0-9.]*\)-dev .* installed$/\1/p' | sort -V); do
    version_ge "$v" "$REDIS_LOCK_BOOST_MIN" && version=$v
  done
  if [ -z "$version" ] && command -v apt-cache >/dev/null; then
    # 2. The distribution's default (the candidate of libboost-dev, e.g. 1.83.0.1ubuntu2).
    v=$(apt-cache policy libboost-dev 2>/dev/null | sed -n 's/^ *Candidate: \([0-9]*\.[0-9]*\).*/\1/p')
    if [ -n "$v" ] && version_ge "$v" "$REDIS_LOCK_BOOST_MIN"; then
      local all=yes
      for c in "${REDIS_LOCK_BOOST_COMPONENTS[@]}"; do
        apt-cache show "libboost-$c-dev" >/dev/null 2>&1 || all=no
      done
      if [ $all = yes ]; then
        echo libboost-dev
        for c in "${REDIS_LOCK_BOOST_COMPONENTS[@]}"; do echo "libboost-$c-dev"; done
        return 0
      fi
      version=$v
    else
      # 3. The newest versioned Boost the distribution has.
      for v in $(apt-cache pkgnames libboost 2>/dev/null |
                 sed -n 's/^libboost\([0-9][0-9.]*\)-dev$/\1/p' | sort -V); do
        version_ge "$v" "$REDIS_LOCK_BOOST_MIN" && version=$v
      done
    fi
  fi
  if [ -z "$version" ]; then
    log "no Boost >= $REDIS_LOCK_BOOST_MIN packaged here: install it where CMake finds it"
    return 0
  fi
  echo "libboost$version-dev"
  for c in "${REDIS_LOCK_BOOST_COMPONENTS[@]}"; do echo "libboost-$c$version-dev"; done
}

# Debian/Ubuntu packages the build, the tests and the examples need (and Boost, above).
REDIS_LOCK_PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  libhiredis-dev libfmt-dev libssl-dev openssl doxygen valgrind libgtest-dev libbenchmark-dev
  prometheus-cpp-dev
  python3-yaml python3-requests python3-colorama python3-patch-ng python3-fasteners
  python3-distro python3-jinja2 python3-dateutil python3-urllib3
  redis-server redis-tools python3
  clang libclang-rt-dev
)

# Tests run as many at a time as the machine has cores (the presets hard-code no count;
# the heavy topologies take turns through a ctest resource lock whatever the count).
export CTEST_PARALLEL_LEVEL="${CTEST_PARALLEL_LEVEL:-$(nproc)}"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Installs missing packages with apt-get when root; otherwise prints the exact command.
ensure_packages() {
  if ! command -v dpkg-query >/dev/null; then
    log "not a Debian-based system: install the equivalents of ${REDIS_LOCK_PACKAGES[*]}" \
        "and Boost >= $REDIS_LOCK_BOOST_MIN (${REDIS_LOCK_BOOST_COMPONENTS[*]})"
    return 0
  fi
  local missing=() pkg boost
  boost=$(boost_packages 2>/dev/null)
  if [ -z "$boost" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq >/dev/null  # a fresh container's package lists are empty
  fi
  [ -n "$boost" ] || boost=$(boost_packages)
  for pkg in "${REDIS_LOCK_PACKAGES[@]}" $boost; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "Missing packages: ${missing[*]}" >&2
    echo "Install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

# Prometheus and promtool for the metrics tests (docs/operations.md's rules, the checkout
# example's scrape). Used from PATH when there; else Debian's prometheus package is fetched
# (apt-get download: no root needed, nothing installed, no service started) and its two
# programs extracted into build/tools/prometheus, where the build looks for them. Without
# apt, those tests say so and are skipped.
ensure_prometheus() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  local into=build/tools/prometheus tmp
  [ -x "$into/usr/bin/prometheus" ] && [ -x "$into/usr/bin/promtool" ] && return 0
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    log "no prometheus here and no apt-get: the metrics tests will be skipped"
    return 0
  fi
  log "fetching Debian's prometheus package for its programs (into $into; nothing is installed)"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    # A fresh container's package lists are empty.
    [ "$(id -u)" -eq 0 ] && apt-get update -qq >/dev/null 2>&1
    (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || {
      log "could not download the prometheus package: the metrics tests will be skipped"
      rm -rf "$tmp"
      return 0
    }
  fi
  mkdir -p "$into"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$into"
  rm -rf "$tmp"
}

# Valkey 8.0.1, the second server the live suites run on, built once per checkout from
# ../shared/tools (beside the project's root) into build/tools/valkey: its bin/ holds
# valkey-server, valkey-sentinel and valkey-cli and, as Valkey installs them, the names
# redis-server, redis-sentinel and redis-cli, so that a PATH with it first makes every test,
# script and example run on Valkey. Sets VALKEY_BIN to that bin/ directory; returns 1 where
# the tarball is absent; a failed build ends the script. (Call it directly, not in $(...):
# its exit must end the script.)
VALKEY_VERSION=8.0.1
VALKEY_BIN=
ensure_valkey() {
  local tarball="../shared/tools/valkey-$VALKEY_VERSION.tar.gz" into="$PWD/build/tools/valkey"
  local stamp="$into/built-$VALKEY_VERSION"
  if [ ! -f "$tarball" ]; then
    log "$tarball is absent: the live suites run on Redis only"
    return 1
  fi
  if [ ! -f "$stamp" ]; then
    log "building Valkey $VALKEY_VERSION from $tarball (once, into $into)"
    # TLS as Debian's redis-server has it: the TLS suites run on both servers.
    if ! { rm -rf "$into" && mkdir -p "$into/src" &&
           tar -xzf "$tarball" -C "$into/src" --strip-components=1; } ||
       ! make -C "$into/src" -j2 BUILD_TLS=yes >"$into/build.log" 2>&1 ||
       ! make -C "$into/src" PREFIX="$into" BUILD_TLS=yes install >>"$into/build.log" 2>&1; then
      tail -n 30 "$into/build.log" >&2
      log "building Valkey failed (log: $into/build.log)"
      exit 1
    fi
    touch "$stamp"
  fi
  VALKEY_BIN="$into/bin"
  if ! "$VALKEY_BIN/redis-server" --version | grep -q "v=$VALKEY_VERSION"; then
    log "$VALKEY_BIN/redis-server is not Valkey $VALKEY_VERSION"
    exit 1
  fi
}

# The peers of ./scripts/bench: Node.js with npm (for redlock and redis-semaphore, installed
# from bench/peers/package-lock.json) and Debian's python3-redis.
ensure_bench_peers() {
  local missing=()
  command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
  /usr/bin/python3 -c 'import redis' 2>/dev/null || missing+=(python3-redis)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
      log "installing ${missing[*]}"
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      echo "Install them with: sudo apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
  (cd bench/peers && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}
