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
#   provider_bound        the storm with --provider-concurrency 3 and a provider that takes
#                         25 ms per charge: never more than 3 charges in flight at once
#                         (the provider's own count), and 3 reached
#   demo                  the storm (with at most 4 provider calls at once), then a fault round (a worker killed mid-charge, the lock
#                         server restarted, a dropped provider response) on fresh orders
set -euo pipefail
scenario=$1 service=$2 load=$3 provider=$4

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
start_ledger() {
  redis-server --port 0 --unixsocket "$dir/ledger.sock" --unixsocketperm 700 --appendonly yes \
    --appendfsync always --maxmemory-policy noeviction --save '' --dir "$dir" \
    --logfile "$dir/ledger-redis.log" &
  ledger_pid=$!
  pids+=("$ledger_pid")
  wait_for "the ledger server" redis-cli -s "$dir/ledger.sock" ping
}

provider_port=
start_provider() {
  "$provider" --journal "$dir/provider.journal" --port 0 "$@" >"$dir/provider.log" 2>&1 &
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
# start_service WORKERS [checkout_service options...]
start_service() {
  local workers=$1; shift
  "$service" --url "redis://127.0.0.1:$lock_port" --ledger-url "unix://$dir/ledger.sock" \
    --provider "127.0.0.1:$provider_port" --port "$service_port" --workers "$workers" \
    "$@" >"$dir/service.log" 2>&1 &
  service_pid=$!
  pids+=("$service_pid")
  wait_for "$workers workers" listening "$workers"
}
listening() { [ "$(grep -c 'listening on' "$dir/service.log")" -ge "$1" ]; }
# The pid of the worker that first called the provider for ORDER (waits for it).
caller_of() {
  wait_for "a call to the provider for $1" grep -q "calling the provider for $1\$" "$dir/service.log"
  grep -m1 "calling the provider for $1\$" "$dir/service.log" | sed -n 's/.*(pid \([0-9]*\)).*/\1/p'
}
calls_at_least() { [ "$(grep -c "calling the provider for $1\$" "$dir/service.log")" -ge "$2" ]; }
# tokens_of ORDER: the fencing token of each holder of ORDER's lock, in the order they took it
tokens_of() { sed -n "s/^checkout worker .* holds $1 with fencing token \([0-9]*\)\$/\1/p" "$dir/service.log"; }
holders_at_least() { [ "$(tokens_of "$1" | wc -l)" -ge "$2" ]; }

# storm RUN_ID ORDERS REQUESTS: the load generator's storm and checks (its exit status)
storm() {
  "$load" --port "$service_port" --provider "127.0.0.1:$provider_port" \
    --ledger-url "unix://$dir/ledger.sock" --run-id "$1" --orders "$2" --requests "$3" "${@:4}"
}
order() { echo "run$1-order-$2"; }
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
  [ "$(redis-cli -s "$dir/ledger.sock" hget "checkout:order:$1" state)" = pending ] ||
    fail "$1 was no longer pending when the fault struck (the fault came too late to test anything)"
}
storm_result() { wait "$storm_pid" || { cat "$dir/storm.out"; fail "$1"; }; cat "$dir/storm.out"; }
# heard_provider PID ORDER: worker PID logged the provider's answer (or its absence) for ORDER
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
    [ "$(redis-cli -s "$dir/ledger.sock" hget "checkout:order:$x" state)" = final ] ||
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
    # keeps the pending order and asks again later each time (lock ttl 500 ms, backoff capped
    # at 1 s: the retries come 0.5, 0.5, 1 and 1.5 s apart), then the order is charged once
    # and the client's retry gets the stored 201. The delays come from the ledger's retry
    # count, so the log shows them exactly; without the backoff every retry would be 0.5 s
    # apart, and the charge would come after about 2 s instead of 3.5 s.
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
    # The four calls after the first came 0.5, 0.5, 1 and 1.5 s apart by the ledger's clock
    # (3.5 s; 2 s without the backoff). Scheduling can only add to that.
    took=$(( ($(date +%s%N) - began) / 1000000 ))
    [ "$took" -ge 3000 ] || fail "charged $took ms after the first call: the retries did not back off"
    [ "$(grep -c "calling the provider for $y\$" "$dir/service.log")" = 5 ] ||
      fail "the provider was not called exactly 5 times (4 refused, 1 charged)"
    for n in 1 2 3; do
      expected=$((500 + $(( (1 << (n - 1)) - 1 )) * 500)); [ "$expected" -gt 1500 ] && expected=1500
      grep -q "$y still pending after reconcile retry $n; next in about $expected ms\$" \
        "$dir/service.log" || fail "retry $n was not scheduled $expected ms later"
    done
    wait_for "the order final in the ledger" \
      test "$(redis-cli -s "$dir/ledger.sock" hget "checkout:order:$y" state)" = final
    "$load" --port "$service_port" --one "$y" --amount 700 >"$dir/b.out"
    cat "$dir/b.out"
    grep -q '^201 replayed ' "$dir/b.out" || fail "the client's retry did not get the stored 201"
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
    # order, finds the pending attempt and calls with the same key; the paused worker wakes,
    # its provider deadline has passed, and its answer is at most "pending".
    start_service 2 --lock-ttl-ms 1000 --provider-timeout-ms 800
    run="p$RANDOM$RANDOM"; x=$(order "$run" 0)
    strike_mid_charge "$run" 4 12 STOP
    wait_for "the paused worker's lease to lapse" lock_key_gone "$x"
    wait_for "another call for $x" calls_at_least "$x" 2
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
    wait_for "the provider to charge $x" grep -q "^payment_provider: charged $x (201" "$dir/provider.log"
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
    grep -q "(pid $victim) provider answered 201 for $x\$" "$dir/service.log" ||
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
    start_service "$workers" --lock-ttl-ms 2000 --provider-timeout-ms 1500 ${bound[@]+"${bound[@]}"}
    orders=${CHECKOUT_ORDERS:-50} requests=${CHECKOUT_REQUESTS:-400}
    [ "$scenario" = demo ] || { orders=8 requests=24; }
    echo "== the duplicate storm: $requests concurrent requests for $orders orders, $workers workers"
    [ "$scenario" = demo ] && echo "   (at most 4 provider calls in flight at once, from all workers together)"
    storm "r$RANDOM$RANDOM" "$orders" "$requests" ${bound[@]+"${bound[@]}"} || fail "the storm"
    echo "== the fault round: a worker killed mid-charge, the lock server restarted empty, a"
    echo "   provider response dropped; every unfinished order retried as a client would"
    run="f$RANDOM$RANDOM"; x=$(order "$run" 0)
    arm "$(order "$run" 1)" drop_response
    strike_mid_charge "$run" "$orders" "$requests" KILL
    # The killed holder's token, from its pending attempt, while the lock server still has it
    # (the killed worker's lease keeps everyone else off the order until the restart).
    before=$(redis-cli -s "$dir/ledger.sock" hget "checkout:order:$x" fence)
    [ "$before" = "$(tokens_of "$x" | head -n 1)" ] ||
      fail "the pending attempt's token ($before) is not the one worker $victim took: $(tokens_of "$x")"
    echo "   killed worker $victim (kill -9) while it was calling the provider"
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
  echo "== the fault round, from the provider's own records and from the ledger:"
  grep -E '^(provider|ledger): ' "$dir/storm.out"
fi
