#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The metrics scenario's checks (scenarios.sh metrics): a real Prometheus scraped the checkout
# workers during a storm; what it answers through its HTTP query API must agree with what the
# load generator counted and with what the workers' /metrics pages say now.
#   prometheus_check.py PROMETHEUS_PORT STORM_OUTPUT ORDERS TARGET...
# TARGET: a worker's /metrics address (host:port). Exit status 0 when everything agrees.
import json
import re
import sys
import time
import urllib.parse
import urllib.request

from metrics_summary import scrape  # the same reading of the workers' pages

prom_port, storm_output, orders = sys.argv[1], sys.argv[2], int(sys.argv[3])
targets = sys.argv[4:]
failures = []
at = None  # every query reads this one instant (Prometheus' time), once settled


def query(expr):
    """The instant vector of `expr` (at `at`, once set) as a list of (labels, value)."""
    params = {"query": expr}
    if at is not None:
        params["time"] = at
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def scalar(expr):
    result = query(expr)
    return result[0][1] if result else None


def check(what, got, expected):
    print(f"  {what}: prometheus {got}, expected {expected}")
    if got != expected:
        failures.append(f"{what}: prometheus says {got}, expected {expected}")


def direct_sums():
    """Each metric's sum over the workers' own pages, scraped now (every worker must answer)."""
    sums = {}
    for (name, _), value in scrape(targets, skip_unreachable=False)[0].items():
        sums[name] = sums.get(name, 0.0) + value
    return sums


# What the load generator heard: "every answer (status, r: replayed): 201=50 201r=30 409=55".
# (Status 0, no answer, is the client's alone: the service never counted it.)
text = open(storm_output).read()
m = re.search(r"every answer \(status, r: replayed\):((?: \d+r?=\d+)*)", text)
if not m:
    sys.exit("the storm's output has no 'every answer' line")
answers = {}
for item in m.group(1).split():
    key, n = item.split("=")
    answers[(key.rstrip("r"), "true" if key.endswith("r") else "false")] = int(n)
unanswered = sum(n for (code, _), n in answers.items() if code == "0")
answers = {k: n for k, n in answers.items() if k[0] != "0"}
if unanswered:
    print(f"  ({unanswered} requests got no answer: not the service's to count)")
total = sum(answers.values())

# Settled: Prometheus' latest scrape of every worker (each second) holds the storm's last
# answer, and no lease is held or waited for (a reconciler may release a lease just after a
# client heard the order's outcome from the ledger). Waited for together, bounded; then every
# query reads that same instant.
SETTLED = ("(sum(checkout_responses_total) == bool {total})"
           " * (count(up == 1) == bool {workers})"
           " * (sum(redis_lock_leases_held) == bool 0)"
           " * (sum(redis_lock_acquisitions_waiting) == bool 0)")
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    now = time.time()
    at = now
    if scalar(SETTLED.format(total=total, workers=len(targets))) == 1:
        break
    at = None
    time.sleep(0.25)
print(f"prometheus at 127.0.0.1:{prom_port}, {len(targets)} workers, read at {at}")
check("workers up", scalar("count(up == 1)"), len(targets))
check("answers to POST /checkout", scalar("sum(checkout_responses_total)"), total)

# Each status the load generator heard, as the workers counted it.
by_code = {(s["code"], s["replayed"]): v
           for s, v in query("sum by (code, replayed) (checkout_responses_total)")}
for key in sorted(set(answers) | {k for k, v in by_code.items() if v}):
    check(f"answers {key[0]}{' replayed' if key[1] == 'true' else ''}",
          by_code.get(key, 0.0), answers.get(key, 0))
# Charges: each order once; those a request settled are the 201s that were not replays (a
# charge the provider took too long for is settled by a reconciler: the client then hears a
# replay).
check("orders charged (checkout_charges_total)", scalar("sum(checkout_charges_total)"), orders)
check("charges settled by a request (fresh 201s)",
      scalar('sum(checkout_charges_total{via="request"})'), answers.get(("201", "false"), 0))
# The lock: every 409 is an order lock held elsewhere, unless a reconciler competed for the
# locks too (only for an order left pending: a 202) or a lease was lost (checked below).
not_acquired = scalar('sum(redis_lock_acquisitions_total{group="order",outcome="not_acquired"})')
if not any(code == "202" for code, _ in answers):
    check("order locks not acquired (409s)", not_acquired, answers.get(("409", "false"), 0))
else:
    print(f"  order locks not acquired: {not_acquired} (202s were answered: a reconciler "
          "competed for the locks too; not compared with the 409s)")
acquired = scalar('sum(redis_lock_acquisitions_total{group="order",outcome="acquired"})')
print(f"  order locks acquired: {acquired} (at least {orders})")
if acquired is None or acquired < orders:
    failures.append(f"order locks acquired: {acquired}, fewer than the {orders} orders")
check("leases held now", scalar("sum(redis_lock_leases_held)"), 0)
check("acquires waiting now", scalar("sum(redis_lock_acquisitions_waiting)"), 0)
check("leases lost", scalar("sum(redis_lock_leases_lost_total)"), 0)
check("time-to-acquire observations = acquisitions",
      scalar('sum(redis_lock_acquire_duration_seconds_count{group="order"})'), acquired)

# Prometheus' samples are what the workers' own pages say (nothing lost or doubled on the
# way). The pages are read now, Prometheus at `at`: compared again until they agree (a
# reconciler round may count something in between), bounded.
compared = ("checkout_responses_total", "checkout_charges_total", "redis_lock_acquisitions_total",
            "redis_lock_lease_commands_total", "checkout_provider_requests_total")
for attempt in range(40):
    direct = direct_sums()
    at = time.time()
    time.sleep(1.5)  # past Prometheus' next scrape of every worker (each second)
    mismatched = [n for n in compared if scalar(f"sum({n})") != direct.get(n)]
    if not mismatched:
        break
for name in compared:
    check(f"sum({name}) as the workers say", scalar(f"sum({name})"), direct.get(name))

# The rules of docs/operations.md ran on these series (a rate needs two scrapes of them; the
# rules are evaluated each second: waited for, bounded).
at = None
names = []
for attempt in range(60):
    rules = query('count by (__name__) ({__name__=~"redis_lock:.+|checkout:.+"})')
    names = sorted(s["__name__"] for s, _ in rules)
    if "redis_lock:acquisitions:rate5m" in names and "checkout:responses:rate5m" in names:
        break
    time.sleep(0.25)
print(f"  recording rules with series: {', '.join(names) or 'none'}")
for rule in ("redis_lock:acquisitions:rate5m", "checkout:responses:rate5m"):
    if rule not in names:
        failures.append(f"the recording rule {rule} has no series")

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("OK: Prometheus agrees with the load generator and with the workers")
