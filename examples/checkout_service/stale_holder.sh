#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fencing at work: a holder whose lease runs out mid-charge cannot write.
# One checkout_service with a 300 ms lock and no renewal, charging for 1.2 s. Request A takes
# order X and starts charging; 0.6 s later (A's lease has expired) request B takes X with a
# higher fencing token. A's commit is refused as stale (409 stale_lock); B charges (201); the
# ledger holds exactly one charge, B's.
#   stale_holder.sh CHECKOUT_SERVICE CHECKOUT_LOAD FIXTURE_STATE_FILE
set -euo pipefail
service=$1 load=$2
url="redis://127.0.0.1:$(cut -d' ' -f1 "$3")"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp) a=$(mktemp) b=$(mktemp)
"$service" --url "$url" --port "$port" --lock-ttl-ms 300 --no-renew --charge-ms 1200 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log" "$a" "$b"' EXIT
for _ in $(seq 200); do grep -q 'listening on' "$log" && break; sleep 0.05; done
grep -q 'listening on' "$log" || { cat "$log"; exit 1; }

order="stale-$RANDOM$RANDOM"
"$load" --port "$port" --one "$order" --amount 700 >"$a" &
first=$!
sleep 0.6   # the scenario itself: A's 300 ms lease must have run out
"$load" --port "$port" --one "$order" --amount 700 >"$b"
wait $first
echo "A: $(cat "$a")"
echo "B: $(cat "$b")"
grep -q '^409 .*"stale_lock"' "$a" || { echo "A was not refused as stale"; exit 1; }
grep -q '^201 ' "$b" || { echo "B did not charge"; exit 1; }
charges=$(redis-cli -p "$(cut -d' ' -f1 "$3")" LRANGE checkout:charges 0 -1 | grep -c "^$order\$" || true)
[ "$charges" = 1 ] || { echo "ledger has $charges charges for $order"; exit 1; }
echo "ledger: exactly one charge for $order, by the newer holder"
