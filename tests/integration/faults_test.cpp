// SPDX-License-Identifier: MIT
// Mutual exclusion under real faults: a holder killed with SIGKILL, a stale holder whose lease
// expired, and two managers racing for one resource.
#include "live.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

extern char** environ;

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

/// Runs tests/integration/lock_holder.cpp, which takes a lock and hangs.
class HolderProcess {
 public:
  HolderProcess(std::uint16_t port, const std::string& resource, std::chrono::milliseconds ttl) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::string port_s = std::to_string(port), ttl_s = std::to_string(ttl.count());
    std::string path = REDIS_LOCK_HOLDER_PATH;
    std::string res = resource;
    char* argv[] = {path.data(), port_s.data(), res.data(), ttl_s.data(), nullptr};
    if (posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv, environ) != 0) {
      throw std::runtime_error("posix_spawn");
    }
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~HolderProcess() {
    kill9();
    if (out_) std::fclose(out_);
  }
  /// Blocks until the holder reports its fencing token (0 on failure).
  std::uint64_t fencing_token() {
    unsigned long long fence = 0;
    if (std::fscanf(out_, "%llu", &fence) != 1) return 0;
    return fence;
  }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

}  // namespace

TEST(Faults, HolderKilledWithSigkillLosesTheLeaseAtItsTtl) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  HolderProcess holder(cfg.port, resource, 800ms);
  const auto holder_fence = holder.fencing_token();
  ASSERT_GT(holder_fence, 0u);
  holder.kill9();  // no destructor, no release: only the ttl frees the lease
  const auto killed_at = std::chrono::steady_clock::now();

  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, busy] = co_await locks.async_acquire(resource, {.ttl = 5s},
                                                   asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec);
    EXPECT_FALSE(busy) << "the dead holder's lease is still live";
    auto g = co_await locks.async_acquire(resource, {.ttl = 5s, .wait = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(g);
    EXPECT_GT(g.fencing_token(), holder_fence);
    EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 3s);
    co_await g.async_release(asio::use_awaitable);
  }());
}

TEST(Faults, StaleHolderCannotTouchTheNewOwnersLease) {
  auto cfg = shared_server_config();
  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto stale = co_await a.async_acquire(resource, {.ttl = 200ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(stale);
    // B waits for the lease to lapse (A is "paused" and never renews).
    auto fresh = co_await b.async_acquire(resource, {.ttl = 10s, .wait = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(fresh);
    EXPECT_GT(fresh.fencing_token(), stale.fencing_token());
    // A wakes up and acts on its old guard.
    EXPECT_FALSE(co_await stale.async_extend(10s, asio::use_awaitable));
    EXPECT_FALSE(co_await stale.async_release(asio::use_awaitable));
    EXPECT_EQ(redis_command(cfg.port, {"GET", lease_key(resource)}), fresh.token());
    const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", lease_key(resource)}));
    EXPECT_GT(pttl, 9000);
    EXPECT_TRUE(co_await fresh.async_release(asio::use_awaitable));
  }());
}

TEST(Faults, TwoManagersRacingNeverBothWin) {
  auto cfg = shared_server_config();
  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  const auto resource = unique_resource();
  int a_wins = 0, b_wins = 0;
  for (int round = 0; round < 200; ++round) {
    LockGuard ga, gb;
    int done = 0;
    a.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      ga = std::move(g);
      ++done;
    });
    b.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec);
      gb = std::move(g);
      ++done;
    });
    io.restart();
    io.run_for(5s);
    ASSERT_EQ(done, 2);
    ASSERT_NE(ga.owns_lock(), gb.owns_lock()) << "round " << round;
    (ga ? a_wins : b_wins)++;
    ga = LockGuard{};
    gb = LockGuard{};
    io.restart();
    io.run_for(5s);  // the releases
  }
  EXPECT_EQ(a_wins + b_wins, 200);
}
