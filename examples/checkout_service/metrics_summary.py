#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# A few lines an operator's Prometheus would show, read straight from the checkout workers'
# /metrics pages (scenarios.sh demo): order locks by outcome, time to acquire, leases lost,
# charges, provider latency.
#   metrics_summary.py TARGET...      (TARGET: host:port of a worker's /metrics)
import sys
import urllib.request

def scrape(targets, skip_unreachable):
    """Every series of the workers' pages, summed over them: ({(name, frozenset of labels):
    value}, how many workers answered). An unreachable worker is skipped or raises."""
    sums, answered = {}, 0
    for target in targets:
        try:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            if not skip_unreachable:
                raise
            continue  # a worker that is gone (killed in the fault round) took its counts along
        answered += 1
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            series, value = line.rsplit(" ", 1)
            name, _, rest = series.partition("{")
            labels = frozenset(tuple(p.split("=", 1)) for p in rest.rstrip("}").split(",") if p)
            labels = frozenset((k, v.strip('"')) for k, v in labels)
            sums[(name, labels)] = sums.get((name, labels), 0.0) + float(value)
    return sums, answered


def total(totals, name, **want):
    return sum(v for (n, labels), v in totals.items()
               if n == name and all((k, w) in labels for k, w in want.items()))


def quantile(totals, q, name, **want):
    """histogram_quantile() over the summed buckets, in ms."""
    buckets = {}
    for (n, labels), v in totals.items():
        d = dict(labels)
        if n == name + "_bucket" and all(d.get(k) == w for k, w in want.items()):
            le = float("inf") if d["le"] == "+Inf" else float(d["le"])
            buckets[le] = buckets.get(le, 0.0) + v
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] == 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for b in bounds:
        if buckets[b] >= rank:
            if b == float("inf"):
                return lower * 1000
            return (lower + (b - lower) * (rank - below) / max(buckets[b] - below, 1e-12)) * 1000
        lower, below = b, buckets[b]
    return None


def ms(v):
    return "n/a" if v is None else f"{v:.1f} ms"


def main():
    totals, reached = scrape(sys.argv[1:], skip_unreachable=True)
    print(f"== what an operator's Prometheus would read (GET /metrics of the {reached} workers alive "
          "now; a killed worker's counts went with it):")
    acq = {o: int(total(totals, "redis_lock_acquisitions_total", group="order", outcome=o))
           for o in ("acquired", "not_acquired", "error", "cancelled")}
    print(f"   order locks: {acq['acquired']} acquired, {acq['not_acquired']} not acquired (held by "
          f"another request: 409), {acq['error']} failed, {acq['cancelled']} cancelled")
    print("   time to acquire an order lock: p50 "
          f"{ms(quantile(totals, 0.5, 'redis_lock_acquire_duration_seconds', group='order'))}, p99 "
          f"{ms(quantile(totals, 0.99, 'redis_lock_acquire_duration_seconds', group='order'))}")
    errors = {dict(labels).get("error"): v for (n, labels), v in totals.items()
              if n == "redis_lock_errors_total" and v}
    print(f"   leases lost: {int(total(totals, 'redis_lock_leases_lost_total'))}; lock errors by kind: "
          + (", ".join(f"{k} {int(v)}" for k, v in sorted(errors.items())) or "none"))
    print(f"   charges recorded: {int(total(totals, 'checkout_charges_total', via='request'))} by a request, "
          f"{int(total(totals, 'checkout_charges_total', via='reconciler'))} by the reconciler; provider "
          f"charge calls p99 {ms(quantile(totals, 0.99, 'checkout_provider_request_duration_seconds', call='charge'))}")
    sys.exit(0 if reached else 1)


if __name__ == "__main__":
    main()
