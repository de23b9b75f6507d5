// SPDX-License-Identifier: MIT
// Runs the peer workloads for one npm lock library against one redis-server and prints JSON:
//   node node_peers.js --port P --lib redlock|redis-semaphore|redis-semaphore-semaphore [--quick]
// redis-semaphore-semaphore is that library's Semaphore (a permit): latency and throughput
// with a limit of 1000 (never contended), the hand-off with a limit of 1, as bench/kinds_bench
// measures redis_lock's async_acquire_permit.
// Workloads (the same as bench/lock_bench's (a)-(c)):
//   latency     one client, one uncontended acquire+release at a time: p50/p99 in us
//   throughput  1, 8, 64, 256 acquire+release chains in flight on one client: pairs/s
//   handoff     2, 8, 64 waiters contending for one key, each with its own connection (as
//               lock_bench gives each waiter its own manager), each acquiring (with the
//               library's own waiting) and releasing at once: us per hand-off, client commands
//               per acquisition (SLOWLOG at threshold 0, script-internal entries filtered out)
// Each library runs with its defaults, except: no automatic refresh timers (plain acquire and
// release, as the other side does) and unlimited retries while waiting (so that a waiter
// never gives up during the hand-off run; the default retry pacing is kept).
'use strict';
const Redis = require('ioredis');

const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const port = Number(arg('--port', 6379));
const lib = arg('--lib', 'redlock');
const quick = args.includes('--quick');
const run = Math.random().toString(16).slice(2, 10);
const holdMs = Number(arg('--hold-ms', 1));

function makeLocker(client) {
  if (lib === 'redlock') {
    const Redlock = require('redlock').default;
    const redlock = new Redlock([client], { retryCount: -1 });
    return {
      version: require('./node_modules/redlock/package.json').version,
      polling: true,
      async acquire(key, ttl) {
        return redlock.acquire([key], ttl);
      },
      async release(lock) {
        await lock.release();
      },
    };
  }
  if (lib === 'redis-semaphore-semaphore') {
    const { Semaphore } = require('redis-semaphore');
    return {
      version: require('./node_modules/redis-semaphore/package.json').version,
      polling: true,
      async acquire(key, ttl, limit = 1000) {
        const s = new Semaphore(client, key, limit, {
          lockTimeout: ttl, acquireTimeout: 600000, refreshInterval: 0,
        });
        await s.acquire();
        return s;
      },
      async release(s) {
        await s.release();
      },
    };
  }
  if (lib === 'redis-semaphore') {
    const { Mutex } = require('redis-semaphore');
    return {
      version: require('./node_modules/redis-semaphore/package.json').version,
      polling: true,
      async acquire(key, ttl) {
        const m = new Mutex(client, key, {
          lockTimeout: ttl, acquireTimeout: 600000, refreshInterval: 0,
        });
        await m.acquire();
        return m;
      },
      async release(m) {
        await m.release();
      },
    };
  }
  throw new Error('unknown --lib ' + lib);
}

const now = () => process.hrtime.bigint();
const us = (ns) => Number(ns) / 1000;
const percentile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

async function latency(locker, pairs) {
  const samples = [];
  for (let i = 0; i < pairs; ++i) {
    const t0 = now();
    const lock = await locker.acquire(`peer:${run}:lat:${i % 64}`, 10000);
    await locker.release(lock);
    samples.push(us(now() - t0));
  }
  samples.sort((a, b) => a - b);
  return { pairs, p50_us: percentile(samples, 0.5), p99_us: percentile(samples, 0.99) };
}

async function throughput(locker, inFlight, seconds) {
  let pairs = 0;
  const until = now() + BigInt(Math.round(seconds * 1e9));
  const chain = async (id) => {
    for (let i = 0; now() < until; ++i) {
      const lock = await locker.acquire(`peer:${run}:tp:${inFlight}:${id}:${i % 16}`, 10000);
      await locker.release(lock);
      ++pairs;
    }
  };
  const t0 = now();
  await Promise.all(Array.from({ length: inFlight }, (_, id) => chain(id)));
  return { in_flight: inFlight, pairs_per_s: pairs / (us(now() - t0) / 1e6) };
}

async function clientCommands(admin) {
  // Entries of client commands only: script-internal ones are logged as client "?:0".
  const entries = await admin.call('SLOWLOG', 'GET', '-1');
  return entries.filter((e) => e[4] !== '?:0' && !String(e[3][0]).match(/^slowlog$/i)).length;
}

// Every acquisition is a hand-off: a waiter that just released may not ask again until
// someone else has had the lock; the holder keeps it for `holdMs` (so the others' attempts
// find it held and must wait). The gap is from a release being issued to the next owner's
// acquire completing (as in bench/lock_bench).
async function handoff(admin, waiters, maxHandoffs, seconds, count) {
  const key = `peer:${run}:handoff:${waiters}`;
  const clients = Array.from({ length: waiters }, () => new Redis({ port, host: '127.0.0.1' }));
  const lockers = clients.map(makeLocker);
  await Promise.all(clients.map((c) => c.ping()));  // connected before the measurement
  if (count) {
    await admin.call('CONFIG', 'SET', 'slowlog-max-len', '1000000');
    await admin.call('CONFIG', 'SET', 'slowlog-log-slower-than', '0');
    await admin.call('SLOWLOG', 'RESET');
  }
  const until = now() + BigInt(Math.round(seconds * 1e9));
  let acquisitions = 0;
  let lastHolder = -1;
  let releasedAt = null;
  let blocked = [];
  const gaps = [];
  const waiter = async (id) => {
    while (acquisitions < maxHandoffs && now() < until) {
      if (lastHolder === id) {
        await new Promise((resolve) => blocked.push(resolve));
        continue;
      }
      const lock = await lockers[id].acquire(key, 10000, 1);  // (a semaphore: one permit)
      if (releasedAt !== null) gaps.push(us(now() - releasedAt));
      ++acquisitions;
      lastHolder = id;
      const wake = blocked;
      blocked = [];
      wake.forEach((resolve) => resolve());
      await new Promise((resolve) => setTimeout(resolve, holdMs));
      releasedAt = now();
      await lockers[id].release(lock);
    }
    // Let the others see the end too.
    blocked.splice(0).forEach((resolve) => resolve());
  };
  await Promise.all(Array.from({ length: waiters }, (_, id) => waiter(id)));
  clients.forEach((c) => c.disconnect());
  let commands = 0;
  if (count) {
    await admin.call('CONFIG', 'SET', 'slowlog-log-slower-than', '10000');
    commands = await clientCommands(admin);
    await admin.call('SLOWLOG', 'RESET');
  }
  gaps.sort((a, b) => a - b);
  return {
    waiters,
    handoffs: acquisitions,
    gap_p50_us: percentile(gaps, 0.5),
    gap_p99_us: percentile(gaps, 0.99),
    commands_per_acquisition: commands / acquisitions,
  };
}

async function main() {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: false });
  const admin = new Redis({ port, host: '127.0.0.1' });
  const locker = makeLocker(client);
  const result = { library: `npm ${lib}`, version: locker.version, runtime: `node ${process.version}` };
  result.latency = await latency(locker, quick ? 300 : 3000);
  result.throughput = [];
  for (const n of [1, 8, 64, 256]) result.throughput.push(await throughput(locker, n, quick ? 0.5 : 2));
  result.handoff = [];
  // Gaps timed without the slow log (at threshold 0 it logs every command a script runs,
  // which slows scripts down); commands counted in a shorter run of their own.
  for (const w of [2, 8, 64]) {
    const timed = await handoff(admin, w, quick ? 100 : 400, quick ? 3 : 10, false);
    const counted = await handoff(admin, w, quick ? 50 : 200, quick ? 3 : 10, true);
    timed.commands_per_acquisition = counted.commands_per_acquisition;
    result.handoff.push(timed);
  }
  console.log(JSON.stringify(result));
  client.disconnect();
  admin.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
