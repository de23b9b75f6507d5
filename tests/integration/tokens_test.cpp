// SPDX-License-Identifier: MIT
// Ownership tokens on the wire: unique per acquisition, and the lease stores exactly them.
#include "live.hpp"

#include <set>

using namespace redis_lock;
using namespace redis_lock::test;

TEST(Tokens, EachAcquisitionHasItsOwnToken) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    std::set<std::string> tokens;
    for (int i = 0; i < 100; ++i) {
      auto g = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
      CO_ASSERT_TRUE(g);
      EXPECT_TRUE(tokens.insert(g.token()).second);
      EXPECT_EQ(redis_command(cfg.port, {"GET", lease_key(resource)}), g.token());
      co_await g.async_release(asio::use_awaitable);
    }
  }());
}
