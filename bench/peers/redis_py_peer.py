# SPDX-License-Identifier: MIT
# The peer workloads for redis-py's Lock (Debian python3-redis) against one redis-server,
# printed as JSON like node_peers.js:
#   /usr/bin/python3 redis_py_peer.py --port P [--quick] [--hold-ms 1]
# redis-py is synchronous: "in flight" means that many threads, each with its own
# connection from one pool, running acquire+release chains (the way a Python service gets
# concurrency). The Lock runs with its defaults (blocking, sleep=0.1 s between attempts).
import argparse
import json
import platform
import random
import threading
import time

import redis

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=6379)
parser.add_argument("--quick", action="store_true")
parser.add_argument("--hold-ms", type=float, default=1.0)
args = parser.parse_args()
run = "%08x" % random.getrandbits(32)
pool = redis.ConnectionPool(host="127.0.0.1", port=args.port, max_connections=512)
client = redis.Redis(connection_pool=pool)
admin = redis.Redis(host="127.0.0.1", port=args.port)


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def latency(pairs):
    samples = []
    for i in range(pairs):
        t0 = time.perf_counter()
        lock = client.lock(f"peer:{run}:lat:{i % 64}", timeout=10)
        lock.acquire()
        lock.release()
        samples.append((time.perf_counter() - t0) * 1e6)
    return {"pairs": pairs, "p50_us": percentile(samples, 0.5), "p99_us": percentile(samples, 0.99)}


def throughput(in_flight, seconds):
    count = [0] * in_flight
    until = time.perf_counter() + seconds

    def chain(tid):
        i = 0
        while time.perf_counter() < until:
            lock = client.lock(f"peer:{run}:tp:{in_flight}:{tid}:{i % 16}", timeout=10)
            lock.acquire()
            lock.release()
            count[tid] += 1
            i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=chain, args=(t,)) for t in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"in_flight": in_flight, "pairs_per_s": sum(count) / (time.perf_counter() - t0)}


def client_commands():
    entries = admin.execute_command("SLOWLOG", "GET", "-1")
    n = 0
    for e in entries:
        addr = e[4] if len(e) > 4 else b""
        name = e[3][0] if e[3] else b""
        if addr in (b"?:0", "?:0") or name.lower() in (b"slowlog", b"config"):
            continue
        n += 1
    return n


def handoff(waiters, max_handoffs, seconds, count):
    key = f"peer:{run}:handoff:{waiters}"
    if count:
        admin.config_set("slowlog-max-len", 1000000)
        admin.config_set("slowlog-log-slower-than", 0)
        admin.slowlog_reset()
    state = {"acquisitions": 0, "last": -1, "released_at": None}
    gaps = []
    cond = threading.Condition()
    until = time.perf_counter() + seconds

    def waiter(wid):
        while True:
            with cond:
                while state["last"] == wid and state["acquisitions"] < max_handoffs and time.perf_counter() < until:
                    cond.wait(0.05)
                if state["acquisitions"] >= max_handoffs or time.perf_counter() >= until:
                    cond.notify_all()
                    return
            lock = client.lock(key, timeout=10)
            lock.acquire(blocking=True, blocking_timeout=seconds)
            if not lock.owned():
                return
            with cond:
                if state["released_at"] is not None:
                    gaps.append((time.perf_counter() - state["released_at"]) * 1e6)
                state["acquisitions"] += 1
                state["last"] = wid
                cond.notify_all()
            time.sleep(args.hold_ms / 1000)
            with cond:
                state["released_at"] = time.perf_counter()
            lock.release()

    threads = [threading.Thread(target=waiter, args=(w,)) for w in range(waiters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    commands = 0
    if count:
        admin.config_set("slowlog-log-slower-than", 10000)
        commands = client_commands()
        admin.slowlog_reset()
    n = max(1, state["acquisitions"])
    return {
        "waiters": waiters,
        "handoffs": state["acquisitions"],
        "gap_p50_us": percentile(gaps, 0.5) if gaps else None,
        "gap_p99_us": percentile(gaps, 0.99) if gaps else None,
        "commands_per_acquisition": commands / n,
    }


result = {
    "library": "redis-py Lock",
    "version": redis.__version__,
    "runtime": "python " + platform.python_version(),
    "latency": latency(300 if args.quick else 3000),
    "throughput": [throughput(n, 0.5 if args.quick else 2) for n in (1, 8, 64, 256)],
    "handoff": [],
}
# Gaps timed without the slow log (at threshold 0 it logs every command a script runs, which
# slows scripts down); commands counted in a shorter run of their own.
for w in (2, 8, 64):
    timed = handoff(w, 60 if args.quick else 200, 3 if args.quick else 10, False)
    counted = handoff(w, 30 if args.quick else 100, 3 if args.quick else 10, True)
    timed["commands_per_acquisition"] = counted["commands_per_acquisition"]
    result["handoff"].append(timed)
print(json.dumps(result))
