// SPDX-License-Identifier: MIT
// Bad input completes with invalid_argument before anything is sent; empty guards never touch
// Redis. The "server" here is a listening socket that counts connection attempts.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include <optional>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redis_lock::error;

namespace {

struct CountingListener {
  asio::io_context& io;
  asio::ip::tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
  int accepted = 0;
  std::optional<asio::ip::tcp::socket> peer;

  explicit CountingListener(asio::io_context& ctx) : io(ctx) { accept(); }
  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket s) {
      if (ec) return;
      ++accepted;
      peer.emplace(std::move(s));
    });
  }
  redis_lock::ConnectionConfig config() const {
    redis_lock::ConnectionConfig cfg;
    cfg.port = acceptor.local_endpoint().port();
    return cfg;
  }
};

}  // namespace

TEST(Validation, BadOptionsAreRejectedBeforeAnythingIsSent) {
  asio::io_context io;
  CountingListener listener(io);
  redis_lock::LockManager locks(io.get_executor(), listener.config());

  struct Case {
    std::string resource;
    redis_lock::LockOptions options;
  };
  const Case cases[] = {
      {"", {}},
      {"r", {.ttl = 0ms}},
      {"r", {.ttl = -5ms}},
      {"r", {.ttl = std::chrono::milliseconds::min()}},
      {"r", {.ttl = std::chrono::milliseconds::max()}},
      {"r", {.ttl = 1s, .wait = -1ms}},
      {"r", {.ttl = 1s, .wait = std::chrono::milliseconds::min()}},
  };
  int completed = 0;
  bool initiating = false;
  for (const auto& c : cases) {
    initiating = true;
    locks.async_acquire(c.resource, c.options,
                        [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                          EXPECT_FALSE(initiating) << "completed inside the initiating call";
                          EXPECT_EQ(ec, error::invalid_argument);
                          EXPECT_FALSE(g);
                          if (++completed == static_cast<int>(std::size(cases))) {
                            listener.acceptor.close();
                          }
                        });
    initiating = false;
  }
  io.run_for(2s);
  EXPECT_EQ(completed, static_cast<int>(std::size(cases)));
  EXPECT_EQ(listener.accepted, 0);
}

TEST(Validation, EmptyGuardCompletesWithoutRedis) {
  asio::io_context io;
  redis_lock::LockGuard empty;
  EXPECT_FALSE(empty.owns_lock());
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.fencing_token(), 0u);
  EXPECT_TRUE(empty.token().empty());

  // (use_future would complete on the system executor's thread; futures across threads are
  // covered by the integration tests, with an io_context thread.)
  std::optional<bool> extended;
  empty.async_extend(1s, asio::bind_executor(io, [&](boost::system::error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    extended = ok;
  }));
  // With a callback bound to an io_context, it runs there and not inline.
  bool called = false;
  empty.async_release(asio::bind_executor(io, [&](boost::system::error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    EXPECT_FALSE(ok);
    called = true;
  }));
  EXPECT_FALSE(called);
  io.run_for(2s);
  EXPECT_TRUE(called);
  ASSERT_TRUE(extended);
  EXPECT_FALSE(*extended);
}

TEST(Validation, TlsIsRefusedCleanlyUntilSupported) {
  asio::io_context io;
  CountingListener listener(io);
  auto cfg = listener.config();
  cfg.tls = true;
  redis_lock::LockManager locks(io.get_executor(), cfg);
  std::optional<boost::system::error_code> result;
  locks.async_acquire("r", {}, [&](boost::system::error_code ec, redis_lock::LockGuard) {
    result = ec;
    listener.acceptor.close();
  });
  io.run_for(2s);
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::connect_failed);
  EXPECT_EQ(listener.accepted, 0);
}

TEST(Validation, MovedFromManagerRefusesInsteadOfCrashing) {
  asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), redis_lock::ConnectionConfig{});
  redis_lock::LockManager other(std::move(locks));
  std::optional<boost::system::error_code> result;
  // NOLINTNEXTLINE(bugprone-use-after-move): that is the point
  locks.async_acquire("r", {}, asio::bind_executor(io, [&](boost::system::error_code ec,
                                                           redis_lock::LockGuard g) {
                        EXPECT_FALSE(g);
                        result = ec;
                      }));
  io.run_for(5s);
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::invalid_argument);
}
