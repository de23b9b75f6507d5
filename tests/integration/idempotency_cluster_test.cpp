// SPDX-License-Identifier: MIT
// IdempotentRequests on a Redis Cluster: each record and its shard's indexes share one slot
// (every transition is one script), the shards spread over the masters, the key's lock is in
// a slot of its own; the durability check asks the node of every shard.
#include "live.hpp"
#include "redis_cluster.hpp"

#include <redis_lock/idempotency.hpp>

#include <boost/asio/as_tuple.hpp>

#include <set>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Kind = RunResult::Kind;

TEST(Cluster, IdempotentRequestsRunOnceReplayAndReconcileAcrossTheMasters) {
  RedisCluster cluster(3, 0);
  asio::io_context io;
  LockManager locks(io.get_executor(), cluster.config());
  int works = 0, resolves = 0;
  IdempotencyOptions options;
  options.unchecked_store = true;
  options.first_look = 200ms;
  IdempotentRequests requests(
      locks,
      [&](const Attempt& a, AttemptHandler done) {
        ++resolves;
        done(AttemptOutcome::decided({201, "found " + a.downstream_key, ""}));
      },
      options);
  const auto tuple = asio::as_tuple(asio::use_awaitable);
  std::set<std::string> nodes_used;
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 24; ++i) {
          const auto key = unique_resource("k" + std::to_string(i));
          // Every third key's outcome is unknown: the reconciler resolves it.
          const bool unknown = i % 3 == 0;
          auto [ec, first] = co_await requests.async_run(
              key, "fp",
              [&](const Attempt& a, AttemptHandler done) {
                ++works;
                done(unknown ? AttemptOutcome::unknown()
                             : AttemptOutcome::decided({201, "charged " + a.downstream_key, ""}));
              },
              tuple);
          EXPECT_FALSE(ec) << ec.message();
          EXPECT_EQ(first.kind, unknown ? Kind::pending : Kind::executed);
          if (unknown) continue;
          auto [ec2, again] = co_await requests.async_run(
              key, "fp",
              [&](const Attempt&, AttemptHandler done) {
                ++works;
                done(AttemptOutcome::unknown());
              },
              tuple);
          EXPECT_EQ(again.kind, Kind::replayed);
          EXPECT_EQ(again.response.body, "charged " + key + "/1");
        }
        asio::steady_timer t(io, 300ms);
        co_await t.async_wait(asio::use_awaitable);
        auto [ec, report] = co_await requests.async_reconcile(tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(report.looked, 8u);
        EXPECT_EQ(report.decided, 8u);
        EXPECT_EQ(report.failed, 0u);
      }(),
      30s);
  EXPECT_EQ(works, 24) << "nothing ran twice";
  EXPECT_EQ(resolves, 8);
  // The records are spread over the masters by their shards (16 slots, 3 masters).
  int masters_with_records = 0;
  for (std::size_t m = 0; m < 3; ++m) {
    masters_with_records += cluster.node(m).command({"KEYS", "lock:idem:{s*"}) != "";
  }
  EXPECT_GE(masters_with_records, 2);

  // A checked store: every shard's node is asked, and the cluster is not durable.
  IdempotencyOptions checked = options;
  checked.unchecked_store = false;
  IdempotentRequests refused(
      locks, [](const Attempt&, AttemptHandler done) { done(AttemptOutcome::unknown()); }, checked);
  std::optional<error_code> said;
  refused.async_run(
      "k", "fp", [](const Attempt&, AttemptHandler done) { done(AttemptOutcome::unknown()); },
      [&](error_code ec, RunResult) { said = ec; });
  ASSERT_TRUE(run_until(io, [&] { return said.has_value(); }));
  EXPECT_EQ(*said, error::store_not_durable);
  EXPECT_NE(refused.store_problem().find("appendonly is no, needs yes"), std::string::npos)
      << refused.store_problem();
}
