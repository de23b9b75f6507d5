// SPDX-License-Identifier: MIT
// One round of an election on any topology (a single server, a Cluster, Sentinel): a leader,
// an observer that sees it, a queued candidate that inspect counts, the hand-off to it on
// resignation (observed, with its term), force-release of the new leader (its guard learns
// the loss at its next renewal, the observer sees nobody lead).
#pragma once

#include "live.hpp"

#include <redis_lock/election.hpp>

namespace redis_lock::test {

inline void election_round(asio::io_context& io, const ConnectionConfig& config) {
  LockManager a(io.get_executor(), config, {.holder_label = "node-a"});
  LockManager b(io.get_executor(), config, {.holder_label = "node-b"});
  LockManager watcher(io.get_executor(), config);
  const auto name = unique_resource("election");
  Election ea(a, name), eb(b, name), observer(watcher, name);
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        auto first = co_await ea.async_campaign("a", {.ttl = 10s}, asio::use_awaitable);
        CO_ASSERT_TRUE(first.owns_lock());
        const auto term1 = first.fencing_token();
        auto now = co_await observer.async_observe(0, asio::use_awaitable);
        CO_ASSERT_TRUE(now.has_value());
        EXPECT_EQ(now->value, "a");
        EXPECT_EQ(now->term, term1);

        // A second candidate queues; inspect sees the leader and the queue.
        std::optional<LockGuard> second;
        eb.async_campaign("b", {.ttl = 3s, .wait = 8s},
                          [&](boost::system::error_code ec, LockGuard g) {
                            EXPECT_FALSE(ec) << ec.message();
                            second = std::move(g);
                          });
        LockInfo info;
        for (int i = 0; i < 300 && info.waiters == 0; ++i) {
          info = co_await watcher.async_inspect(ea.resource(), asio::use_awaitable);
          if (info.waiters == 0) co_await sleep_for(10ms);
        }
        EXPECT_TRUE(info.held);
        EXPECT_EQ(info.holder, "node-a");
        EXPECT_EQ(info.fencing_token, term1);
        EXPECT_EQ(info.waiters, 1u);

        // Resigning hands the leadership to the queued candidate: observed, term larger.
        std::optional<std::optional<Leader>> next;
        observer.async_observe(term1, [&](boost::system::error_code ec, std::optional<Leader> l) {
          EXPECT_FALSE(ec) << ec.message();
          next = std::move(l);
        });
        co_await sleep_for(50ms);  // (observing term1 or later: either order is right)
        EXPECT_TRUE(co_await first.async_release(asio::use_awaitable));
        for (int i = 0; i < 300 && (!second || !next); ++i) co_await sleep_for(10ms);
        CO_ASSERT_TRUE(second.has_value() && second->owns_lock());
        CO_ASSERT_TRUE(next.has_value() && next->has_value());
        EXPECT_EQ((*next)->value, "b");
        EXPECT_EQ((*next)->term, second->fencing_token());
        EXPECT_GT(second->fencing_token(), term1);

        // Force-release: nobody leads (observed), and the evicted leader learns it.
        std::optional<std::optional<Leader>> after;
        observer.async_observe(second->fencing_token(),
                               [&](boost::system::error_code ec, std::optional<Leader> l) {
                                 EXPECT_FALSE(ec) << ec.message();
                                 after = std::move(l);
                               });
        EXPECT_TRUE(co_await watcher.async_force_release(ea.resource(), asio::use_awaitable));
        auto [lost] = co_await second->async_wait_lost(asio::as_tuple(asio::use_awaitable));
        EXPECT_EQ(lost, error::lock_lost);
        for (int i = 0; i < 300 && !after; ++i) co_await sleep_for(10ms);
        CO_ASSERT_TRUE(after.has_value());
        EXPECT_FALSE(after->has_value()) << "nobody leads after the force-release";
      }(),
      20s);
}

}  // namespace redis_lock::test
