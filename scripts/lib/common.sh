# SPDX-License-Identifier: MIT
# Shared by the README's commands: find or install what the build needs.

# Debian/Ubuntu packages the build, the tests and the examples need.
REDIS_LOCK_PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  libboost1.81-dev libboost-url1.81-dev libboost-json1.81-dev libboost-context1.81-dev
  libboost-program-options1.81-dev
  libhiredis-dev libfmt-dev libssl-dev openssl doxygen valgrind libgtest-dev libbenchmark-dev
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
    log "not a Debian-based system: install the equivalents of ${REDIS_LOCK_PACKAGES[*]}"
    return 0
  fi
  local missing=() pkg
  for pkg in "${REDIS_LOCK_PACKAGES[@]}"; do
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
