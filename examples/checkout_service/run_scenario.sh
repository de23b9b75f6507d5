#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The checkout scenario: 4 checkout_service workers on one port, a storm of 400 concurrent
# requests for 50 orders (duplicates included), then the ledger is checked.
#   run_scenario.sh CHECKOUT_SERVICE CHECKOUT_LOAD FIXTURE_STATE_FILE | --url URL
set -euo pipefail
service=$1 load=$2
if [ "$3" = "--url" ]; then url=$4; else url="redis://127.0.0.1:$(cut -d' ' -f1 "$3")"; fi
workers=${CHECKOUT_WORKERS:-4}

# A free port on loopback (bind to 0 and read it back).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
"$service" --url "$url" --port "$port" --workers "$workers" --charge-ms 25 >"$log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT

# Ready when every worker said it listens (bounded: 10 s).
for _ in $(seq 200); do
  [ "$(grep -c 'listening on' "$log")" -ge "$workers" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "checkout_service died" >&2; exit 1; }
  sleep 0.05
done
[ "$(grep -c 'listening on' "$log")" -ge "$workers" ] || { cat "$log"; echo "not ready" >&2; exit 1; }
echo "checkout_service: $workers worker processes on 127.0.0.1:$port (SO_REUSEPORT)"

status=0
"$load" --port "$port" --probe-bad-input || status=1
"$load" --port "$port" --url "$url" --requests "${CHECKOUT_REQUESTS:-400}" \
  --orders "${CHECKOUT_ORDERS:-50}" || status=$?

# Stop the workers gracefully and show what each one did.
kill -TERM "$pid"
wait "$pid" || { echo "checkout_service exited with $?" >&2; status=1; }
trap 'rm -f "$log"' EXIT
echo "per worker:"
grep -E '^checkout worker [0-9]+ \(pid [0-9]+\): ' "$log" | sed 's/^/  /'
busy=$(grep -cE '^checkout worker [0-9]+ \(pid [0-9]+\): [1-9]' "$log" || true)
echo "$busy of $workers workers charged orders"
exit $status
