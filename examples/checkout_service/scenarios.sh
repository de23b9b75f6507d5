#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The checkout example end to end, each scenario with servers of its own on loopback (started
# here, stopped on exit): the lock's redis-server (no persistence, as a cache-like lock server
# is often run), the ledger's redis-server (appendfsync always, noeviction, on a Unix socket),
# the fake payment provider, and checkout_service workers sharing one port. Every scenario ends
# with checkout_load's verdict from the provider's own records: each order charged exactly
# once, recorded once in the ledger, and every client told that one outcome.
#
#   scenarios.sh SCENARIO CHECKOUT_SERVICE CHECKOUT_LOAD PAYMENT_PROVIDER
# Scenarios:
#   storm                 CHECKOUT_WORKERS (4) workers, CHECKOUT_REQUESTS (400) concurrent
#                         requests for CHECKOUT_ORDERS (50) orders, duplicates included
#   stale_holder          a holder whose lease runs out mid-charge (no renewal)
#   decline               a declined card: 402, replayed; another amount: 422
#   kill9                 kill -9 of the worker that is calling the provider
#   sigterm               SIGTERM to a worker whose charge outlasts its provider deadline
#   dropped_response      the provider charges and drops the connection without an answer
#   sigstop               a worker paused (SIGSTOP) past its lease, renewal on
#   ledger_restart        the ledger's Redis killed and restarted from its append-only file
#   kill9_after_charge    kill -9 of a worker after the provider charged, before the worker
#                         could record the result in the ledger
#   ledger_fails_at_record  the ledger's Redis killed while a worker calls the provider: the
#                         result cannot be recorded; the ledger restarts from its file
#   sigterm_grace_runs_out  SIGTERM to a worker whose charge outlasts its shutdown grace
#   provider_errors       the provider refuses a charge for good (400) and fails another for
#                         a while (503)
#   provider_outage       the provider fails (503) four times in a row: the reconciler backs
#                         off, then the order is charged once
#   lock_server_restart   the lock's Redis killed and restarted empty mid-charge: fencing
#                         tokens keep rising across it
#   ledger_failover       the ledger's replica promoted without the newest order: its retry
#                         gets the first charge back (the key is derived from the order)
#   ledger_replicas       --ledger-replicas 1: a write the replica does not acknowledge is a
#                         503 and nothing is charged later; too few replicas: refused
#   descriptors_run_out   300 slow clients against a 256-descriptor limit: connections capped,
#                         the idlest shed, accept backs off; /healthz and checkouts still work
#   ledger_forgets        the ledger flushed after a charge: the retry gets the same charge
#   unavailable_is_true   a 503 (no provider permit in time) leaves nothing to charge later
#   crash_before_send     kill -9 between the pending record and the provider call: the
#                         reconciler voids the attempt, the client's retry is charged once
#   slow_provider         a charge slower than the lock's ttl: looked up, never sent again
#   key_window            the outcome unknown past half the provider's key window: escalated,
#                         listed, resolved by a person; the key never sent again
#   integration_errors    a 401 (rotated API key) and a 408: 503, never a final 402; charged
#                         once the key is fixed
#   error_after_charge    a 500 after the money moved: found by reference, recorded, no new
#                         attempt
#   ledger_not_durable    a ledger without appendfsync always or with eviction: refused
#   no_lock               the storm with and without the order lock: what the lock saves
#   provider_bound        the storm with --provider-concurrency 3 and a provider that takes
#                         25 ms per charge: never more than 3 charges in flight at once
#                         (the provider's own count), and 3 reached
#   metrics               the storm scraped by a real Prometheus (PROMETHEUS, else on PATH;
#                         exit 77 without one): its query API agrees with the load generator
#                         and the workers; the rules of docs/operations.md
#                         (REDIS_LOCK_RULES_DIR) produce series
#   demo                  the storm (with at most 4 provider calls at once), then a fault round (a worker killed mid-charge, the lock
#                         server restarted, a dropped provider response) on fresh orders
set -euo pipefail
scenario=$1 service=$2 load=$3 provider=$4
here=$(cd "$(dirname "$0")" && pwd)

dir=$(mktemp -d)
pids=()
cleanup() {
  # Children first (the service's workers, a paused one included), then what we started.
  for p in "${pids[@]}"; do pkill -KILL -P "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAILED ($scenario): $*" >&2; for f in "$dir"/*.log; do echo "--- $f"; tail -n 30 "$f"; done >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_for DESCRIPTION COMMAND...: polls every 20 ms for at most 10 s
wait_for() {
  local what=$1; shift
  for _ in $(seq 500); do "$@" >/dev/null 2>&1 && return 0; sleep 0.02; done
  fail "timed out waiting for $what"
}

lock_port=$(free_port)
lock_pid=
start_lock_server() {
  redis-server --port "$lock_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir" --logfile "$dir/lock-redis.log" &
  lock_pid=$!
  pids+=("$lock_pid")
  wait_for "the lock server" redis-cli -p "$lock_port" ping
  # It answers as the process just started, not as whatever held the port before.
  [ "$(redis-cli -p "$lock_port" info server | tr -d '\r' | sed -n 's/^process_id://p')" = "$lock_pid" ] ||
    fail "port $lock_port answered from another process"
}
restart_lock_server() {
  kill -9 "$lock_pid"; wait "$lock_pid" 2>/dev/null || true
  start_lock_server
}
lock_key_gone() { [ "$(redis-cli -p "$lock_port" exists "checkout:lock:{order:$1}")" = 0 ]; }

ledger_pid=
ledger_sock="$dir/ledger.sock"  # the ledger the service is started on
# start_ledger [redis-server options...]: the ledger on $dir/ledger.sock, durable as required
start_ledger() {
  redis-server --port 0 --unixsocket "$dir/ledger.sock" --unixsocketperm 700 --appendonly yes \
    --appendfsync always --maxmemory-policy noeviction --save '' --dir "$dir" \
    --logfile "$dir/ledger-redis.log" "$@" &
  ledger_pid=$!
  pids+=("$ledger_pid")
  wait_for "the ledger server" redis-cli -s "$dir/ledger.sock" ping
}
ledger() { redis-cli -s "$ledger_sock" "$@"; }
# record ORDER FIELD [SOCKET]: a field of ORDER's record in the ledger (on SOCKET, by default
# the service's), as the service shows it (--show: state pending/void/final/escalated/none,
# attempt, fence, charge_id, expires_ms)
record() {
  "$service" --ledger-url "unix://${3:-$ledger_sock}" --show "$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}
# state_is ORDER STATE: the ledger's record of ORDER is in STATE (for wait_for, which needs a
# command it can run again, not a value computed once)
state_is() { [ "$(record "$1" state)" = "$2" ]; }

provider_port=
start_provider() {
  # CHECKOUT_PROVIDER_ARGS: more options (--success-status 201 runs these scenarios against
  # a service older than the strict provider)
  # shellcheck disable=SC2086
  "$provider" --journal "$dir/provider.journal" --port 0 ${CHECKOUT_PROVIDER_ARGS:-} "$@" \
    >"$dir/provider.log" 2>&1 &
  pids+=($!)
  wait_for "the provider" grep -q 'listening on' "$dir/provider.log"
  provider_port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$dir/provider.log")
}
# arm ORDER ACTION [DELAY_MS] [STATUS] [TIMES]: the provider's next TIMES (1) charges for
# ORDER misbehave
arm() {
  local body="{\"reference\": \"$1\", \"action\": \"$2\", \"delay_ms\": ${3:-0}, \"status\": ${4:-0}, \"times\": ${5:-1}}"
  python3 - "$provider_port" "$body" <<'EOF' || fail "could not arm a provider fault"
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/faults", data=sys.argv[2].encode(),
                             headers={"Content-Type": "application/json"}, method="POST")
urllib.request.urlopen(req, timeout=5).read()
EOF
}

service_port=$(free_port)
service_pid=
service_wrapper=()  # a command the service is started under (e.g. a lower descriptor limit)
# start_service WORKERS [checkout_service options...]
start_service() {
  local workers=$1; shift
  ${service_wrapper[@]+"${service_wrapper[@]}"} "$service" --url "redis://127.0.0.1:$lock_port" \
    --ledger-url "unix://$ledger_sock" \
    --provider "127.0.0.1:$provider_port" --port "$service_port" --workers "$workers" \
    "$@" >"$dir/service.log" 2>&1 &
  service_pid=$!
  pids+=("$service_pid")
  wait_for "$workers workers" listening "$workers"
}
listening() { [ "$(grep -c 'listening on' "$dir/service.log")" -ge "$1" ]; }
# The workers' /metrics addresses (--metrics-port 0), as they printed them.
metrics_targets() { sed -n 's|^checkout worker .* serves /metrics on \(.*\)$|\1|p' "$dir/service.log"; }
serving_metrics() { [ "$(metrics_targets | wc -l)" -ge "$1" ]; }
# The pid of the worker that first called the provider for ORDER (waits for it).
caller_of() {
  wait_for "a call to the provider for $1" grep -q "calling the provider for $1\$" "$dir/service.log"
  grep -m1 "calling the provider for $1\$" "$dir/service.log" | sed -n 's/.*(pid \([0-9]*\)).*/\1/p'
}
# tokens_of ORDER: the fencing token of each holder of ORDER's lock, in the order they took it
tokens_of() { sed -n "s/^checkout worker .* holds $1 with fencing token \([0-9]*\)\$/\1/p" "$dir/service.log"; }
holders_at_least() { [ "$(tokens_of "$1" | wc -l)" -ge "$2" ]; }

# storm RUN_ID ORDERS REQUESTS: the load generator's storm and checks (its exit status)
storm() {
  "$load" --port "$service_port" --provider "127.0.0.1:$provider_port" \
    --ledger-url "unix://$ledger_sock" --run-id "$1" --orders "$2" --requests "$3" "${@:4}"
}
order() { echo "run$1-order-$2"; }
# The ledger as a primary (TCP and $dir/ledger.sock) with an asynchronous replica
# ($dir/replica.sock, pid $replica_pid), both durable as required, the replica in sync.
start_replicated_ledger() {
  local ledger_port replica_port
  ledger_port=$(free_port) replica_port=$(free_port)
  kill -9 "$ledger_pid"; wait "$ledger_pid" 2>/dev/null || true
  rm -f "$dir/ledger.sock"
  start_ledger --port "$ledger_port" --bind 127.0.0.1 --repl-diskless-sync-delay 0
  mkdir -p "$dir/replica"
  redis-server --port "$replica_port" --bind 127.0.0.1 --unixsocket "$dir/replica.sock" \
    --unixsocketperm 700 --appendonly yes --appendfsync always --maxmemory-policy noeviction \
    --save '' --dir "$dir/replica" --logfile "$dir/replica-redis.log" \
    --replicaof 127.0.0.1 "$ledger_port" &
  replica_pid=$!
  pids+=("$replica_pid")
  # Synced as the master counts it (state=online: what WAIT and the service's check count),
  # which comes a moment after the replica itself reports its link up.
  wait_for "the replica to sync" sh -c \
    "redis-cli -s '$dir/ledger.sock' info replication | grep -q '^slave0:.*state=online'"
}
# lock_value WITH WITHOUT ORDERS: from two storms' outputs (the same sizes, with the order lock
# and without it), the provider calls the lock saved; fails if it saved none
lock_value() {
  local with_charges with_lookups without_charges without_lookups
  read -r with_charges with_lookups <<<"$(provider_calls "$1")"
  read -r without_charges without_lookups <<<"$(provider_calls "$2")"
  [ -n "$with_charges" ] && [ -n "$without_charges" ] || fail "no provider counts"
  echo "the lock's measured value: $((without_charges + without_lookups - with_charges - with_lookups)) provider calls saved for $3 orders: $((with_charges + with_lookups)) with it ($with_charges charge requests, $with_lookups lookups), $((without_charges + without_lookups)) without ($without_charges charge requests, $without_lookups lookups)"
  [ $((without_charges + without_lookups)) -gt $((with_charges + with_lookups)) ]
}
provider_calls() {
  sed -n 's/^provider calls: \([0-9]*\) charge requests ([0-9]* answered .key in use., [0-9]* replayed), \([0-9]*\) lookups$/\1 \2/p' "$1"
}
# strike_mid_charge RUN ORDERS REQUESTS SIGNAL [CHARGE_MS]: the storm in the background, and
# SIGNAL for the worker that calls the provider for the run's order 0 (a charge of CHARGE_MS,
# 1500 by default), which must still be pending then. Sets $victim.
strike_mid_charge() {
  arm "$(order "$1" 0)" delay "${5:-1500}"
  storm_in_background "$1" "$2" "$3"
  victim=$(caller_of "$(order "$1" 0)")
  kill -"$4" "$victim"
  still_pending "$(order "$1" 0)"
}
# The same in the background while a scenario does its damage; storm_result waits for it.
storm_in_background() { storm "$@" >"$dir/storm.out" & storm_pid=$!; pids+=("$storm_pid"); }
# still_pending ORDER: the ledger has a pending attempt for ORDER, not a final result yet
still_pending() {
  [ "$(record "$1" state)" = pending ] ||
    fail "$1 was no longer pending when the fault struck (the fault came too late to test anything)"
}
storm_result() { wait "$storm_pid" || { cat "$dir/storm.out"; fail "$1"; }; cat "$dir/storm.out"; }
# logged TEXT: the service log holds TEXT within 5 s (a worker logs after it writes the ledger)
logged() {
  for _ in $(seq 250); do grep -q -- "$1" "$dir/service.log" && return 0; sleep 0.02; done
  return 1
}
# heard_provider PID ORDER: worker PID logged the provider's answer (or its absence) for ORDER
charged_once() { [ "$(provider_results "$1" succeeded)" = 1 ]; }
heard_provider() { grep -q "(pid $1) provider answered [0-9]* for $2\$" "$dir/service.log"; }
gone() { ! kill -0 "$1" 2>/dev/null; }
# provider_results REFERENCE STATUS: how many of the provider's results for REFERENCE have STATUS
provider_results() {
  python3 - "$provider_port" "$1" "$2" <<'EOF'
import json, sys, urllib.request
results = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/charges", timeout=5))["results"]
print(sum(1 for r in results if r["reference"] == sys.argv[2] and r["status"] == sys.argv[3]))
EOF
}

start_lock_server
start_ledger
if [ "$scenario" = provider_bound ]; then start_provider --latency-ms 25; else start_provider; fi

case "$scenario" in
  storm)
    workers=${CHECKOUT_WORKERS:-4}
    start_service "$workers"
    echo "checkout_service: $workers worker processes on 127.0.0.1:$service_port (SO_REUSEPORT)"
    "$load" --port "$service_port" --probe-bad-input || fail "bad input was not refused"
    storm "s$RANDOM$RANDOM" "${CHECKOUT_ORDERS:-50}" "${CHECKOUT_REQUESTS:-400}" || fail "the storm"
    ;;

  stale_holder)
    # A's lease (300 ms, not renewed) would run out while the provider takes 1.2 s, but A's
    # provider deadline is kept inside its lease: A gives up at 200 ms and tells its client
    # "pending" (202) instead of waiting past its lease. B takes the order, finds A's pending
    # attempt and calls with the same idempotency key (the provider says "in progress" until
    # its first call ends, then replays it): one charge, and every client learns it.
    start_service 1 --lock-ttl-ms 300 --no-renew --provider-timeout-ms 200
    run="h$RANDOM$RANDOM"; x=$(order "$run" 0)
    arm "$x" delay 1200
    "$load" --port "$service_port" --one "$x" --amount 1000 >"$dir/a.out" &
    a=$!
    pids+=("$a")
    caller_of "$x" >/dev/null
    wait_for "A's lease to run out" lock_key_gone "$x"
    storm "$run" 1 3 || fail "after the stale holder"
    wait "$a"
    grep -q '^202 .*"pending"' "$dir/a.out" || fail "A was not told 'pending': $(cat "$dir/a.out")"
    echo "A: $(cat "$dir/a.out")"
    ;;

  decline)
    start_service 1
    x="decline-$RANDOM$RANDOM"
    arm "$x" decline
    "$load" --port "$service_port" --one "$x" --amount 700 >"$dir/a.out"
    "$load" --port "$service_port" --one "$x" --amount 700 >"$dir/b.out"
    "$load" --port "$service_port" --one "$x" --amount 800 >"$dir/c.out"
    cat "$dir/a.out" "$dir/b.out" "$dir/c.out"
    grep -q '^402 {"status":"declined"' "$dir/a.out" || fail "no 402"
    [ "$(cut -d' ' -f3- "$dir/b.out")" = "$(cut -d' ' -f2- "$dir/a.out")" ] &&
      grep -q '^402 replayed ' "$dir/b.out" || fail "the decline was not replayed byte for byte"
    grep -q '^422 .*"order_mismatch"' "$dir/c.out" || fail "another amount was not refused with 422"
    [ "$(provider_results "$x" succeeded)" = 0 ] || fail "the provider charged a declined order"
    ;;

  provider_errors)
    # Answers that are neither a charge, a decline nor silence. A 400 is the provider refusing
    # the request for good (it keeps that answer for the key): the order is decided as failed,
    # 402 {"status": "failed"}, replayed, nothing charged, the provider not called again. A
    # 503 is not known (it could follow a charge): the client hears 202, the attempt stays
    # pending, and the retry with the same key is charged, once.
    start_service 1
    x="refused-$RANDOM$RANDOM"
    arm "$x" error 0 400
    "$load" --port "$service_port" --one "$x" --amount 1200 >"$dir/a.out"
    "$load" --port "$service_port" --one "$x" --amount 1200 >"$dir/b.out"
    cat "$dir/a.out" "$dir/b.out"
    grep -q '^402 {"status":"failed",.*"failure_code":"payment_refused"' "$dir/a.out" ||
      fail "a refused charge was not a final 402 'failed'"
    [ "$(cut -d' ' -f3- "$dir/b.out")" = "$(cut -d' ' -f2- "$dir/a.out")" ] &&
      grep -q '^402 replayed ' "$dir/b.out" || fail "the refusal was not replayed byte for byte"
    [ "$(record "$x" state)" = final ] ||
      fail "the refused order is not final in the ledger"
    [ "$(provider_results "$x" succeeded)" = 0 ] || fail "the provider charged a refused order"
    [ "$(grep -c "calling the provider for $x\$" "$dir/service.log")" = 1 ] ||
      fail "the provider was called more than once for a refused order"
    run="u$RANDOM$RANDOM"; y=$(order "$run" 0)
    arm "$y" error 0 503
    storm "$run" 1 3 >"$dir/storm.out" || { cat "$dir/storm.out"; fail "after a 503"; }
    cat "$dir/storm.out"
    grep -q "^payment_provider: refused $y (503" "$dir/provider.log" || fail "no 503 for $y"
    grep -qE '^ +202 Accepted .* 1$' "$dir/storm.out" || fail "the 503 was not told as 202 (pending)"
    ;;

  provider_outage)
    # The provider answers 503 four times in a row. The client hears 202; the reconciler
    # keeps the pending order and asks again later each time, each time under the order's
    # next key once it found no charge (lock ttl 500 ms, backoff capped at 1 s beyond it:
    # the calls come 0.5, 1, 1.5 and 1.5 s apart: the component's first look, then twice as
    # late each time, counted across the order's attempts), then the order is charged once
    # and the client's retry gets the stored 201. The delays come from the record's look
    # count, so the log shows them exactly; without the backoff every retry would be 0.5 s
    # apart, and the charge would come after about 2 s instead of 4.5 s.
    start_service 1 --lock-ttl-ms 500 --provider-timeout-ms 400 --reconcile-ms 100 \
      --reconcile-max-backoff-ms 1000
    y="outage-$RANDOM$RANDOM"
    arm "$y" error 0 503 4
    began=$(date +%s%N)
    "$load" --port "$service_port" --one "$y" --amount 700 >"$dir/a.out"
    cat "$dir/a.out"
    grep -q '^202 ' "$dir/a.out" || fail "a 503 from the provider was not told as 202"
    for _ in $(seq 500); do [ "$(provider_results "$y" succeeded)" = 1 ] && break; sleep 0.02; done
    [ "$(provider_results "$y" succeeded)" = 1 ] || fail "not charged exactly once after the outage"
    # The four calls after the first came 0.5, 1, 1.5 and 1.5 s apart by the ledger's clock
    # (4.5 s; 2 s without the backoff). Scheduling can only add to that.
    took=$(( ($(date +%s%N) - began) / 1000000 ))
    [ "$took" -ge 3000 ] || fail "charged $took ms after the first call: the retries did not back off"
    [ "$(grep -c "calling the provider for $y\$" "$dir/service.log")" = 5 ] ||
      fail "the provider was not called exactly 5 times (4 refused, 1 charged)"
    for n in 1 2 3; do
      expected=$((500 << n)); [ "$expected" -gt 1500 ] && expected=1500
      grep -q "$y still pending after reconcile retry $n; next in about $expected ms\$" \
        "$dir/service.log" || fail "retry $n was not scheduled $expected ms later"
    done
    wait_for "the order final in the ledger" state_is "$y" final
    "$load" --port "$service_port" --one "$y" --amount 700 >"$dir/b.out"
    cat "$dir/b.out"
    grep -q '^201 replayed ' "$dir/b.out" || fail "the client's retry did not get the stored 201"
    ;;

  ledger_failover)
    # The ledger as a primary with an asynchronous replica. An order is charged and
    # replicated; the replica is promoted; a second order is charged on the old primary only;
    # the service is pointed at the new primary and the old one dies. The second order's
    # retry finds no record, calls the provider with the key derived from the order, and gets
    # the first charge back: one charge, the retry told it as a replay.
    start_replicated_ledger
    start_service 1
    run="fo$RANDOM$RANDOM"; one=$(order "$run" 1) two=$(order "$run" 2)
    "$load" --port "$service_port" --one "$one" --amount 1000 >"$dir/a.out"
    grep -q '^201 {"status":"charged"' "$dir/a.out" || fail "the first order: $(cat "$dir/a.out")"
    [ "$(ledger wait 1 5000)" = 1 ] || fail "the first order did not reach the replica"
    redis-cli -s "$dir/replica.sock" replicaof no one >/dev/null
    echo "promoted the replica (REPLICAOF NO ONE)"
    "$load" --port "$service_port" --one "$two" --amount 2000 >"$dir/b.out"
    grep -q '^201 {"status":"charged"' "$dir/b.out" || fail "the second order: $(cat "$dir/b.out")"
    charge=$(sed -n 's/.*"charge_id":"\([^"]*\)".*/\1/p' "$dir/b.out")
    [ "$(record "$two" state "$dir/replica.sock")" = none ] ||
      fail "the second order reached the new primary (nothing to fail over from)"
    kill -TERM "$service_pid"; wait "$service_pid" || true
    kill -9 "$ledger_pid"; wait "$ledger_pid" 2>/dev/null || true
    ledger_sock="$dir/replica.sock"
    start_service 1
    echo "the service now runs on the promoted replica; the old primary is dead"
    "$load" --port "$service_port" --one "$two" --amount 2000 >"$dir/c.out"
    cat "$dir/b.out" "$dir/c.out"
    grep -q "^201 replayed {\"status\":\"charged\".*\"charge_id\":\"$charge\"" "$dir/c.out" ||
      fail "the retry after the failover was not the first charge, replayed"
    [ "$(provider_results "$two" succeeded)" = 1 ] || fail "$two was charged $(provider_results "$two" succeeded) times"
    [ "$(provider_results "$one" succeeded)" = 1 ] || fail "$one was not charged once"
    echo "after the failover: $two charged once ($charge), the retry told it as a replay"
    ;;

  ledger_replicas)
    # --ledger-replicas 1: every ledger write waits for the replica. More replicas asked for
    # than connected: the service refuses to start. The replica stopped: an order gets 503
    # (its pending record was not acknowledged; nothing is sent) and is not charged later:
    # the replica back, the reconciler voids the attempt; the retry is charged once.
    start_replicated_ledger
    status=0
    timeout 20 "$service" --url "redis://127.0.0.1:$lock_port" --ledger-url "unix://$ledger_sock" \
      --provider "127.0.0.1:$provider_port" --port "$service_port" --ledger-replicas 2 \
      >"$dir/refused.out" 2>&1 || status=$?
    cat "$dir/refused.out"
    [ "$status" = 2 ] && grep -q '1 replica(s) connected, 2 asked for' "$dir/refused.out" ||
      fail "the service started with fewer replicas than asked for (exit $status)"
    start_service 1 --ledger-replicas 1 --lock-ttl-ms 1000 --provider-timeout-ms 800 \
      --reconcile-ms 100
    run="rp$RANDOM$RANDOM"; one=$(order "$run" 1) two=$(order "$run" 2)
    "$load" --port "$service_port" --one "$one" --amount 1000 >"$dir/a.out"
    grep -q '^201 {"status":"charged"' "$dir/a.out" || fail "the first order: $(cat "$dir/a.out")"
    # (read on the replica itself: the component's reads go through the master; its record is
    # the hash <prefix>idem:{s<shard>}<order>, docs/guide.md)
    [ "$(redis-cli -s "$dir/replica.sock" hget \
          "$(redis-cli -s "$dir/replica.sock" --scan --pattern "checkout:idem:{s*}$one")" state)" = decided ] ||
      fail "the answered order is not on the replica"
    kill -STOP "$replica_pid"
    "$load" --port "$service_port" --one "$two" --amount 1000 >"$dir/b.out"
    cat "$dir/b.out"
    grep -q '^503 ' "$dir/b.out" || fail "a write the replica did not acknowledge was not a 503"
    ! grep -q "calling the provider for $two\$" "$dir/service.log" || fail "$two was sent"
    # (the reconciler's own writes wait for the replica too: it voids the attempt once the
    # replica is back, and never sends it)
    kill -CONT "$replica_pid"
    wait_for "the reconciler to void $two" state_is "$two" void
    ! grep -q "calling the provider for $two\$" "$dir/service.log" || fail "$two was sent"
    "$load" --port "$service_port" --one "$two" --amount 1000 >"$dir/c.out"
    cat "$dir/c.out"
    grep -q '^201 {"status":"charged"' "$dir/c.out" || fail "the retry was not charged"
    [ "$(provider_results "$two" succeeded)" = 1 ] || fail "$two was not charged exactly once"
    ;;

  descriptors_run_out)
    # Under a limit of 256 descriptors, 300 clients each open a connection and trickle one
    # header line a second, never finishing a request. The service caps its connections
    # (96 here), closes the one idle longest to let a new one in, and backs off when accept
    # runs out of descriptors: /healthz keeps answering, the worker does not spin, and a
    # checkout still goes through.
    service_wrapper=(bash -c 'ulimit -n 256 && exec "$@"' limited)
    start_service 1
    grep -q 'listening on .* (at most 96 connections)$' "$dir/service.log" ||
      fail "the connection cap was not derived from the descriptor limit"
    worker=$(sed -n 's/.*(pid \([0-9]*\)) listening on.*/\1/p' "$dir/service.log")
    python3 - "$service_port" 300 12 >"$dir/trickle.out" 2>&1 <<'PY' &
import socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
conns = []
for _ in range(count):
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        c.sendall(b"POST /checkout HTTP/1.1\r\nHost: x\r\n")
        conns.append(c)
    except OSError:
        pass
end = time.time() + seconds
while time.time() < end:
    for c in conns:
        try:
            c.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass
    time.sleep(1)
print(len(conns), "connections opened")
PY
    trickler=$!
    pids+=("$trickler")
    sleep 2  # (the tricklers' connections are open by now: nothing signals "all 300 opened")
    cpu() { awk '{print $14 + $15}' "/proc/$worker/stat"; }
    before=$(cpu)
    for i in 1 2 3 4 5; do
      started=$(date +%s%N)
      python3 - "$service_port" <<'PY' || fail "/healthz was not answered within 2 s (probe $i)"
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=2).read()
PY
      echo "/healthz answered in $(( ($(date +%s%N) - started) / 1000000 )) ms"
      sleep 1
    done
    ticks=$(( $(cpu) - before ))
    hz=$(getconf CLK_TCK)
    echo "the worker used $((ticks * 1000 / hz)) ms of CPU in about 6 s with 300 trickling clients"
    [ $((ticks * 1000 / hz)) -lt 1500 ] || fail "the worker spun: $((ticks * 1000 / hz)) ms of CPU in 6 s"
    "$load" --port "$service_port" --one "fd-$RANDOM$RANDOM" --amount 500 >"$dir/a.out"
    cat "$dir/a.out"
    grep -q '^201 {"status":"charged"' "$dir/a.out" || fail "a checkout did not go through"
    wait "$trickler" || true
    cat "$dir/trickle.out"
    service_wrapper=()
    ;;

  ledger_forgets)
    # An order's record is kept for good (no expiry), and when the ledger loses it all the
    # same (FLUSHALL: a restore from an old backup, an empty replica promoted), the retry
    # calls the provider with the same derived key and gets the first charge back.
    start_service 1
    x="forget-$RANDOM$RANDOM"
    "$load" --port "$service_port" --one "$x" --amount 1500 >"$dir/a.out"
    grep -q '^201 {"status":"charged"' "$dir/a.out" || fail "no charge: $(cat "$dir/a.out")"
    [ "$(record "$x" expires_ms)" = -1 ] || fail "the order's record expires"
    charge=$(sed -n 's/.*"charge_id":"\([^"]*\)".*/\1/p' "$dir/a.out")
    ledger flushall >/dev/null
    echo "the ledger forgot everything (FLUSHALL)"
    "$load" --port "$service_port" --one "$x" --amount 1500 >"$dir/b.out"
    cat "$dir/a.out" "$dir/b.out"
    grep -q "^201 replayed {\"status\":\"charged\".*\"charge_id\":\"$charge\"" "$dir/b.out" ||
      fail "the retry was not the first charge, replayed"
    [ "$(provider_results "$x" succeeded)" = 1 ] || fail "$x was charged $(provider_results "$x" succeeded) times"
    [ "$(record "$x" charge_id)" = "$charge" ] ||
      fail "the ledger did not record the charge again"
    ;;

  unavailable_is_true)
    # A 503 means nothing will be charged unless the client retries. One order holds the only
    # provider permit for 5 s; another cannot get it within its patience: 503, and its attempt
    # is void (no pending record for the reconciler to charge later). Its retry, once the
    # permit is free, is charged once.
    start_service 1 --provider-concurrency 1 --lock-ttl-ms 4000 --provider-timeout-ms 3000 \
      --reconcile-ms 100
    run="v$RANDOM$RANDOM"; a=$(order "$run" 1) b=$(order "$run" 2)
    arm "$a" delay 5000
    "$load" --port "$service_port" --one "$a" --amount 1000 >"$dir/a.out" &
    pids+=($!)
    caller_of "$a" >/dev/null
    "$load" --port "$service_port" --one "$b" --amount 1000 >"$dir/b.out"
    cat "$dir/b.out"
    grep -q '^503 retry-after=[0-9]* {"error":"temporarily_unavailable"' "$dir/b.out" ||
      fail "no 503 while the permit was taken"
    [ "$(record "$b" state)" = void ] ||
      fail "the 503 left the attempt $(record "$b" state), not void (still pending?)"
    wait_for "the first order to be charged" charged_once "$a"
    "$load" --port "$service_port" --one "$b" --amount 1000 >"$dir/c.out"
    cat "$dir/c.out"
    grep -q '^201 {"status":"charged"' "$dir/c.out" || fail "the retry was not charged"
    [ "$(provider_results "$b" succeeded)" = 1 ] || fail "$b was not charged exactly once"
    ;;

  crash_before_send)
    # A worker dies (kill -9) after writing its pending attempt and before calling the
    # provider (it waits for the only permit). Its client heard nothing. The reconciler finds
    # the provider never saw the attempt's key and voids it instead of charging late; the
    # client's retry is charged, once.
    start_service 2 --provider-concurrency 1 --lock-ttl-ms 4000 --provider-timeout-ms 3000 \
      --reconcile-ms 100
    run="c$RANDOM$RANDOM"; a=$(order "$run" 1) b=$(order "$run" 2)
    arm "$a" delay 6000
    "$load" --port "$service_port" --one "$a" --amount 1000 >"$dir/a.out" &
    pids+=($!)
    caller_of "$a" >/dev/null
    "$load" --port "$service_port" --one "$b" --amount 1000 >"$dir/b.out" &
    pids+=($!)
    wait_for "$b pending behind the permit" state_is "$b" pending
    victim=$(grep -m1 "holds $b with" "$dir/service.log" | sed -n 's/.*(pid \([0-9]*\)).*/\1/p')
    ! grep -q "calling the provider for $b\$" "$dir/service.log" ||
      fail "$b was sent before the crash (the kill came too late)"
    kill -9 "$victim"
    echo "killed worker $victim (kill -9) between $b's pending record and its provider call"
    wait_for "the reconciler to void $b" state_is "$b" void
    # The worker logs the void after writing it to the ledger: wait for the line.
    logged "$b attempt 1 void: the provider never saw its key" ||
      fail "$b was voided by someone other than the reconciler"
    [ "$(provider_results "$b" succeeded)" = 0 ] || fail "$b was charged by the reconciler"
    wait_for "the first order to be charged" charged_once "$a"
    "$load" --port "$service_port" --one "$b" --amount 1000 >"$dir/c.out"
    cat "$dir/c.out"
    grep -q '^201 {"status":"charged"' "$dir/c.out" || fail "the client's retry was not charged"
    [ "$(provider_results "$b" succeeded)" = 1 ] || fail "$b was not charged exactly once"
    ;;

  slow_provider)
    # A charge that takes 6 s, a lock ttl of 1 s: the call times out, the client hears 202
    # with a Retry-After, and every later look (the client's retries, the reconciler) asks the
    # provider for the key's result instead of sending the charge again: one charge request.
    start_service 2 --lock-ttl-ms 1000 --provider-timeout-ms 800 --reconcile-ms 100 \
      --reconcile-max-backoff-ms 1000
    run="w$RANDOM$RANDOM"; x=$(order "$run" 0)
    arm "$x" delay 6000
    storm "$run" 1 3 >"$dir/storm.out" || { cat "$dir/storm.out"; fail "after a slow provider"; }
    cat "$dir/storm.out"
    calls=$(grep -c "calling the provider for $x\$" "$dir/service.log")
    [ "$calls" = 1 ] || fail "the charge was sent $calls times, not once"
    grep -q '^provider calls: 1 charge requests' "$dir/storm.out" ||
      fail "the provider got more than one charge request"
    ;;

  key_window)
    # The provider keeps a key for 6 s here (24 h at real ones). A charge is made, its answer
    # lost, and the provider unreachable for longer than the key's life: it freezes itself
    # (drop_and_freeze) at the instant the answer is lost, so that the reconciler cannot ask
    # it in between (a SIGSTOP sent from here after the 202 came too late under load, and
    # the reconciler learnt the charge). The reconciler, unable to learn the outcome within
    # half the key window, escalates the order instead of sending the key again after the
    # provider could have forgotten it (that would charge a second time); a person lists
    # it, finds the charge, and resolves it.
    kill -9 "${pids[2]}"; wait "${pids[2]}" 2>/dev/null || true  # the default provider
    start_provider --key-ttl-ms 6000
    start_service 1 --lock-ttl-ms 1000 --provider-timeout-ms 800 --reconcile-ms 100 \
      --reconcile-max-backoff-ms 1000 --provider-key-window-ms 6000
    x="window-$RANDOM$RANDOM"
    arm "$x" drop_and_freeze 6500
    "$load" --port "$service_port" --one "$x" --amount 900 >"$dir/a.out"
    grep -q '^202 ' "$dir/a.out" || fail "a dropped answer was not 202: $(cat "$dir/a.out")"
    echo "the provider charged $x, its answer was lost, and it stopped answering for 6.5 s"
    wait_for "$x to be escalated" state_is "$x" escalated
    logged ": $x escalated: attempt 1 (key checkout:$x/1) undecided" || fail "no escalation logged"
    # The provider back after its key is gone: nothing may send the key again.
    wait_for "the provider to answer again" python3 -c "import sys, urllib.request
urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}/healthz', timeout=1).read()" "$provider_port"
    key_status=$(python3 - "$provider_port" "checkout:$x/1" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/keys/{sys.argv[2]}", timeout=5)
    print(200)
except urllib.error.HTTPError as e:
    print(e.code)
PY
)
    [ "$key_status" = 404 ] || fail "the provider still knows the key ($key_status): the window was not passed"
    charge=$(python3 - "$provider_port" "$x" <<'PY'
import json, sys, urllib.request
r = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/charges", timeout=5))["results"]
print(next(c["id"] for c in r if c["reference"] == sys.argv[2]))
PY
)
    "$load" --port "$service_port" --one "$x" --amount 900 >"$dir/b.out"
    cat "$dir/b.out"
    grep -q '^202 retry-after=600 {"status":"under_review"' "$dir/b.out" ||
      fail "the escalated order's retry was not told 'under review'"
    "$service" --ledger-url "unix://$ledger_sock" --list-escalated >"$dir/escalated.out"
    cat "$dir/escalated.out"
    grep -q "\"order_id\":\"$x\"" "$dir/escalated.out" || fail "$x is not listed as escalated"
    "$service" --ledger-url "unix://$ledger_sock" --resolve "$x" --charge-id "$charge"
    "$load" --port "$service_port" --one "$x" --amount 900 >"$dir/c.out"
    cat "$dir/c.out"
    grep -q "^201 replayed {\"status\":\"charged\".*\"charge_id\":\"$charge\"" "$dir/c.out" ||
      fail "the resolved order was not replayed as charged"
    [ "$(provider_results "$x" succeeded)" = 1 ] || fail "$x was charged $(provider_results "$x" succeeded) times"
    grep -q "calling the provider for $x\$" "$dir/service.log" &&
      [ "$(grep -c "calling the provider for $x\$" "$dir/service.log")" = 1 ] ||
      fail "the charge was sent again"
    ;;

  integration_errors)
    # The provider refuses the merchant's credentials (401: a rotated API key) and times a
    # request out (408): neither ran, neither is the customer's fault. The client hears 503
    # (nothing charged, nothing left pending), never a final 402; once the key is fixed the
    # same order is charged, once.
    kill -9 "${pids[2]}"; wait "${pids[2]}" 2>/dev/null || true  # the default provider
    PAYMENT_PROVIDER_API_KEY=sk_current start_provider
    CHECKOUT_PROVIDER_API_KEY=sk_rotated_away start_service 1
    x="auth-$RANDOM$RANDOM"
    "$load" --port "$service_port" --one "$x" --amount 1100 >"$dir/a.out"
    cat "$dir/a.out"
    grep -q '^503 retry-after=[0-9]* {"error":"provider_unavailable"' "$dir/a.out" ||
      fail "a 401 from the provider was not a 503"
    [ "$(record "$x" state)" = void ] || fail "the 401 left the attempt pending"
    kill -TERM "$service_pid"; wait "$service_pid" || true
    CHECKOUT_PROVIDER_API_KEY=sk_current start_service 1
    "$load" --port "$service_port" --one "$x" --amount 1100 >"$dir/b.out"
    cat "$dir/b.out"
    grep -q '^201 {"status":"charged"' "$dir/b.out" || fail "not charged once the key was fixed"
    y="timeout-$RANDOM$RANDOM"
    arm "$y" error 0 408
    "$load" --port "$service_port" --one "$y" --amount 1100 >"$dir/c.out"
    "$load" --port "$service_port" --one "$y" --amount 1100 >"$dir/d.out"
    cat "$dir/c.out" "$dir/d.out"
    grep -q '^503 ' "$dir/c.out" || fail "a 408 from the provider was not a 503"
    grep -q '^201 {"status":"charged"' "$dir/d.out" || fail "the retry after a 408 was not charged"
    for o in "$x" "$y"; do
      [ "$(provider_results "$o" succeeded)" = 1 ] || fail "$o was not charged exactly once"
    done
    ;;

  error_after_charge)
    # The provider moves the money, then answers 500 (and keeps that 500 for the key, as real
    # ones do). The reconciler looks the order up by reference before it makes a new attempt,
    # finds the charge and records it: one charge, never a second under a new key.
    start_service 1 --lock-ttl-ms 500 --provider-timeout-ms 400 --reconcile-ms 100
    x="err500-$RANDOM$RANDOM"
    python3 - "$provider_port" "$x" <<'PY' || fail "could not arm a provider fault"
import json, sys, urllib.request
body = json.dumps({"reference": sys.argv[2], "action": "error", "status": 500, "charged": True}).encode()
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/faults", data=body,
                       headers={"Content-Type": "application/json"}, method="POST"), timeout=5).read()
PY
    "$load" --port "$service_port" --one "$x" --amount 1300 >"$dir/a.out"
    grep -q '^202 ' "$dir/a.out" || fail "a 500 was not 202: $(cat "$dir/a.out")"
    wait_for "the reconciler to record $x" state_is "$x" final
    "$load" --port "$service_port" --one "$x" --amount 1300 >"$dir/b.out"
    cat "$dir/a.out" "$dir/b.out"
    grep -q '^201 replayed {"status":"charged"' "$dir/b.out" || fail "the charge was not recorded"
    [ "$(provider_results "$x" succeeded)" = 1 ] || fail "$x was charged $(provider_results "$x" succeeded) times"
    [ "$(record "$x" attempt)" = 1 ] || fail "a second attempt was made"
    ;;

  ledger_not_durable)
    # A ledger that could lose an answered write (appendfsync everysec) or evict a record
    # (allkeys-lru): the service refuses to start, and says what is missing.
    ledger config set appendfsync everysec >/dev/null
    ledger config set maxmemory-policy allkeys-lru >/dev/null
    status=0
    # (bounded: a service that starts anyway must fail the test, not hang it)
    timeout 20 "$service" --url "redis://127.0.0.1:$lock_port" --ledger-url "unix://$ledger_sock" \
      --provider "127.0.0.1:$provider_port" --port "$service_port" >"$dir/refused.out" 2>&1 ||
      status=$?
    cat "$dir/refused.out"
    [ "$status" = 2 ] || fail "the service started on a ledger that is not durable (exit $status)"
    grep -q 'appendfsync is everysec, needs always' "$dir/refused.out" || fail "appendfsync not named"
    grep -q 'maxmemory-policy is allkeys-lru, needs noeviction' "$dir/refused.out" ||
      fail "the eviction policy not named"
    ledger config set appendfsync always >/dev/null
    ledger config set maxmemory-policy noeviction >/dev/null
    start_service 1  # and on a durable one it starts
    ;;

  no_lock)
    # What the lock is worth here, measured: the same storm (fresh orders, the same sizes)
    # with the order lock and without it (--no-lock). Exactly-once holds both times (the key
    # and the ledger give it); without the lock, concurrent duplicates reach the provider.
    workers=${CHECKOUT_WORKERS:-4}
    orders=${CHECKOUT_ORDERS:-50} requests=${CHECKOUT_REQUESTS:-400}
    start_service "$workers"
    storm "l$RANDOM$RANDOM" "$orders" "$requests" >"$dir/with.out" ||
      { cat "$dir/with.out"; fail "the storm with the lock"; }
    kill -TERM "$service_pid"; wait "$service_pid" || true
    start_service "$workers" --no-lock
    storm "n$RANDOM$RANDOM" "$orders" "$requests" --no-ledger >"$dir/without.out" ||
      { cat "$dir/without.out"; fail "the storm without the lock"; }
    echo "== with the lock:"; cat "$dir/with.out"
    echo "== without it:"; cat "$dir/without.out"
    lock_value "$dir/with.out" "$dir/without.out" "$orders" ||
      fail "the storm without the lock cost the provider no more calls: nothing was measured"
    ;;

  kill9)
    # The worker calling the provider dies with kill -9; its lease lapses (1 s); a retry or
    # the other worker's reconciler resumes the pending attempt with the same key.
    start_service 2 --lock-ttl-ms 1500 --provider-timeout-ms 1200
    strike_mid_charge "k$RANDOM$RANDOM" 4 12 KILL
    echo "killed worker $victim (kill -9) while it was calling the provider"
    storm_result "after kill -9"
    ;;

  sigterm)
    # SIGTERM to the worker calling the provider, whose charge (1.5 s) outlasts its provider
    # deadline (1 s): it stops accepting, its call times out, its client hears 202, and it
    # exits; the pending attempt is finished by a retry or the other worker's reconciler.
    start_service 2 --lock-ttl-ms 2000 --provider-timeout-ms 1000
    strike_mid_charge "t$RANDOM$RANDOM" 4 12 TERM
    wait_for "worker $victim to exit" sh -c "! kill -0 $victim"
    grep -q "(pid $victim): " "$dir/service.log" || fail "worker $victim did not exit gracefully"
    storm_result "after SIGTERM"
    ;;

  dropped_response)
    start_service 2
    run="d$RANDOM$RANDOM"
    arm "$(order "$run" 0)" drop_response
    storm "$run" 4 12 || fail "after a dropped response"
    ;;

  sigstop)
    # Paused past its lease with renewal on: the lease lapses, another worker takes the
    # order, finds the pending attempt and looks its key up at the provider (which is still
    # charging it, or has); the paused worker wakes, its provider deadline has passed, and
    # its answer is at most "pending".
    start_service 2 --lock-ttl-ms 1000 --provider-timeout-ms 800
    run="p$RANDOM$RANDOM"; x=$(order "$run" 0)
    strike_mid_charge "$run" 4 12 STOP
    wait_for "the paused worker's lease to lapse" lock_key_gone "$x"
    wait_for "another holder of $x" holders_at_least "$x" 2
    kill -CONT "$victim"
    storm_result "after SIGSTOP"
    ;;

  ledger_restart)
    # The ledger's redis-server killed (kill -9) and restarted from its append-only file: no
    # answered write is lost, pooled connections are replaced, decided orders are replayed.
    start_service 2
    run="l$RANDOM$RANDOM"
    storm "$run" 8 24 || fail "before the ledger restart"
    kill -9 "$ledger_pid"; wait "$ledger_pid" 2>/dev/null || true
    start_ledger
    echo "restarted the ledger (kill -9, then from its append-only file)"
    storm "$run" 8 24 >"$dir/storm.out" || { cat "$dir/storm.out"; fail "after the ledger restart"; }
    cat "$dir/storm.out"
    grep -qE '^ +201 Created +\(replayed: charged before\) +24$' "$dir/storm.out" ||
      fail "the orders were not all replayed from the restarted ledger"
    ;;

  kill9_after_charge)
    # The provider charges at once and holds its answer for 3 s, past the caller's deadline
    # (2.5 s); the caller dies (kill -9) once the charge is in the provider's journal: money
    # moved, and the ledger still says pending. A retry or the other worker's reconciler calls
    # with the same key and gets that charge back (a replay), not a second one.
    start_service 2 --lock-ttl-ms 3000 --provider-timeout-ms 2500
    run="a$RANDOM$RANDOM"; x=$(order "$run" 0)
    arm "$x" delay_response 3000
    storm_in_background "$run" 4 12
    wait_for "the provider to charge $x" grep -q "^payment_provider: charged $x (200" "$dir/provider.log"
    victim=$(caller_of "$x")  # logged before it called
    kill -KILL "$victim"
    wait_for "worker $victim to die" gone "$victim"
    still_pending "$x"
    ! heard_provider "$victim" "$x" ||
      fail "worker $victim had its call's outcome before it was killed (the kill came too late)"
    echo "killed worker $victim (kill -9) after the provider charged $x, before it was recorded"
    storm_result "after kill -9 between the charge and its record"
    ;;

  ledger_fails_at_record)
    # The ledger's redis-server dies (kill -9) while a worker calls the provider (a 2 s
    # charge): the worker gets the charge, cannot record it, and tells its client the outcome
    # all the same (the provider's answer is the order's one outcome). The ledger comes back
    # from its append-only file with the attempt still pending; a retry or the reconciler
    # calls again with the same key and records the very response the client was given.
    start_service 2 --lock-ttl-ms 3000 --provider-timeout-ms 2500
    run="e$RANDOM$RANDOM"; x=$(order "$run" 0)
    arm "$x" delay 2000
    storm_in_background "$run" 4 12
    victim=$(caller_of "$x")
    kill -9 "$ledger_pid"; wait "$ledger_pid" 2>/dev/null || true
    wait_for "worker $victim to fail at recording $x (did the ledger die too late?)" \
      grep -q "(pid $victim) could not record the answer for $x:" "$dir/service.log"
    grep -q "(pid $victim) provider answered 200 for $x\$" "$dir/service.log" ||
      fail "worker $victim failed at the ledger without a charge to record"
    echo "the ledger died (kill -9) while worker $victim recorded $x's charge"
    # (not checked for "pending" now: a retry may already be finishing it)
    start_ledger
    echo "restarted the ledger from its append-only file"
    storm_result "after the ledger failed at the record"
    ;;

  sigterm_grace_runs_out)
    # SIGTERM to the worker calling the provider, with a shutdown grace (200 ms) shorter than
    # its charge (3 s) and its provider deadline (2.5 s): the grace runs out and the worker
    # leaves as a crash would, the attempt still pending; a retry or the other worker's
    # reconciler finishes it with the same key once the dead worker's lease (3 s) lapses.
    start_service 2 --lock-ttl-ms 3000 --provider-timeout-ms 2500 --shutdown-grace-ms 200
    run="g$RANDOM$RANDOM"; x=$(order "$run" 0)
    strike_mid_charge "$run" 4 12 TERM 3000
    wait_for "worker $victim to exit" gone "$victim"
    grep -q "(pid $victim): shutdown grace ran out; exiting\$" "$dir/service.log" ||
      fail "worker $victim did not leave by its grace running out"
    ! heard_provider "$victim" "$x" ||
      fail "worker $victim had its call's outcome before its grace ran out"
    still_pending "$x"
    echo "worker $victim: SIGTERM during a 3 s charge, its 200 ms grace ran out, $x still pending"
    storm_result "after the shutdown grace ran out"
    ;;

  provider_bound)
    workers=${CHECKOUT_WORKERS:-4}
    start_service "$workers" --provider-concurrency 3
    echo "== the storm with at most 3 charges in flight at once, from $workers workers together"
    storm "p$RANDOM$RANDOM" "${CHECKOUT_ORDERS:-50}" "${CHECKOUT_REQUESTS:-400}" \
      --provider-concurrency 3 >"$dir/storm.out" || { cat "$dir/storm.out"; fail "the storm"; }
    cat "$dir/storm.out"
    # Reached, not only respected: 50 orders at 25 ms each would run many more at once.
    grep -q '^provider: at most 3 charges in flight at once (bound 3): within it$' "$dir/storm.out" ||
      fail "the provider never had 3 charges at once: the bound was not what held it back"
    ;;

  lock_server_restart|demo)
    workers=${CHECKOUT_WORKERS:-4}
    bound=()
    [ "$scenario" = demo ] && bound=(--provider-concurrency 4)
    # The lease (8 s) must outlast what the fault round does between the kill and the restart
    # (two --show reads of the ledger, slow in a sanitizer build on a busy machine: with 2 s
    # the killed holder's lease lapsed first and a retry took the order before the restart).
    ttl=(--lock-ttl-ms 8000)
    start_service "$workers" "${ttl[@]}" --provider-timeout-ms 1500 ${bound[@]+"${bound[@]}"}
    orders=${CHECKOUT_ORDERS:-50} requests=${CHECKOUT_REQUESTS:-400}
    [ "$scenario" = demo ] || { orders=8 requests=24; }
    echo "== the duplicate storm: $requests concurrent requests for $orders orders, $workers workers"
    [ "$scenario" = demo ] && echo "   (at most 4 provider calls in flight at once, from all workers together)"
    storm "r$RANDOM$RANDOM" "$orders" "$requests" ${bound[@]+"${bound[@]}"} >"$dir/with.out" ||
      { cat "$dir/with.out"; fail "the storm"; }
    cat "$dir/with.out"
    if [ "$scenario" = demo ]; then
      echo "== the same storm on fresh orders without the order lock (--no-lock), to measure it"
      kill -TERM "$service_pid"; wait "$service_pid" || true
      start_service "$workers" "${ttl[@]}" --provider-timeout-ms 1500 --no-lock "${bound[@]}"
      storm "n$RANDOM$RANDOM" "$orders" "$requests" --no-ledger "${bound[@]}" >"$dir/without.out" ||
        { cat "$dir/without.out"; fail "the storm without the lock"; }
      grep -E '^(provider|ledger)' "$dir/without.out"
      lock_value "$dir/with.out" "$dir/without.out" "$orders" >"$dir/value.out" || true
      cat "$dir/value.out"
      kill -TERM "$service_pid"; wait "$service_pid" || true
      start_service "$workers" "${ttl[@]}" --provider-timeout-ms 1500 "${bound[@]}" \
        --metrics-port 0
    fi
    echo "== the fault round: a worker killed mid-charge, the lock server restarted empty, a"
    echo "   provider response dropped; every unfinished order retried as a client would"
    run="f$RANDOM$RANDOM"; x=$(order "$run" 0)
    arm "$(order "$run" 1)" drop_response
    strike_mid_charge "$run" "$orders" "$requests" KILL
    # The killed holder's token, from its pending attempt, while the lock server still has it
    # (the killed worker's lease keeps everyone else off the order until the restart).
    before=$(record "$x" fence)
    [ "$before" = "$(tokens_of "$x" | head -n 1)" ] ||
      fail "the pending attempt's token ($before) is not the one worker $victim took: $(tokens_of "$x")"
    echo "   killed worker $victim (kill -9) while it was calling the provider"
    [ "$(tokens_of "$x" | wc -l)" = 1 ] ||
      fail "$x changed hands before the lock server's restart (its lease lapsed first): $(tokens_of "$x")"
    restart_lock_server
    echo "   restarted the lock server (kill -9, no persistence)"
    # The next holder takes the order's lock from the restarted, empty server: its token must
    # be above the killed holder's (checked here, before the ledger, which refuses a lower
    # token, could turn a token gone back into a stuck order).
    wait_for "a holder of $x after the restart" holders_at_least "$x" 2
    after=$(tokens_of "$x" | sed -n 2p)
    [ "$after" -gt "$before" ] ||
      fail "fencing token went back across the restart: $before (killed holder), then $after"
    storm_result "the fault round"
    for t in $(tokens_of "$x" | tail -n +2); do
      [ "$t" -gt "$before" ] || fail "a later holder of $x got token $t, not above $before"
    done
    echo "fencing tokens kept rising across the lock server's restart: $before (killed holder), then $after"
    if [ "$scenario" = demo ]; then
      python3 "$here/metrics_summary.py" $(metrics_targets) || fail "no worker served /metrics"
    fi
    ;;

  metrics)
    # A real Prometheus scrapes every worker's /metrics (every second) through the storm;
    # what its HTTP query API answers must be what the load generator counted (answers by
    # status, charges, 409s as order locks not acquired) and what the workers' pages say, and
    # the rules of docs/operations.md must have produced series.
    prom=${PROMETHEUS:-$(command -v prometheus || true)}
    if [ -z "$prom" ] || ! [ -x "$prom" ]; then
      echo "SKIPPED: no prometheus program (Debian's prometheus package; ./scripts/test fetches it)"
      exit 77
    fi
    [ -n "${REDIS_LOCK_RULES_DIR:-}" ] || fail "REDIS_LOCK_RULES_DIR (the rules of docs/operations.md) is not set"
    workers=${CHECKOUT_WORKERS:-4}
    start_service "$workers" --metrics-port 0
    wait_for "$workers metrics ports" serving_metrics "$workers"
    prom_port=$(free_port)
    {
      # (a scrape may take a while in a sanitizer build with both cores busy)
      echo "global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}"
      echo "rule_files: ['$REDIS_LOCK_RULES_DIR/*.rules.yml']"
      echo "scrape_configs:"
      echo "  - job_name: checkout"
      echo "    static_configs:"
      echo "      - targets: [$(metrics_targets | sed "s/.*/'&'/" | paste -sd, -)]"
    } >"$dir/prometheus.yml"
    "$prom" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
      --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
    pids+=($!)
    wait_for "prometheus" python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$prom_port/-/ready', timeout=1)"
    orders=${CHECKOUT_ORDERS:-50}
    storm "m$RANDOM$RANDOM" "$orders" "${CHECKOUT_REQUESTS:-400}" >"$dir/storm.out" ||
      { cat "$dir/storm.out"; fail "the storm"; }
    cat "$dir/storm.out"
    python3 "$here/prometheus_check.py" "$prom_port" "$dir/storm.out" "$orders" $(metrics_targets) ||
      fail "Prometheus does not agree"
    ;;

  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac

# Stop the workers gracefully and show what each one did.
kill -TERM "$service_pid"
status=0
wait "$service_pid" || status=$?
[ "$status" = 0 ] || [ "$scenario" != storm ] || fail "checkout_service exited with $status"
echo "per worker:"
grep -E '^checkout worker [0-9]+ \(pid [0-9]+\): ' "$dir/service.log" | sed 's/^/  /'
if [ "$scenario" = demo ]; then
  cat "$dir/value.out"
  echo "== the fault round, from the provider's own records and from the ledger:"
  grep -E '^(provider|ledger): ' "$dir/storm.out"
fi
