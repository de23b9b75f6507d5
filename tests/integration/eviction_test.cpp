// SPDX-License-Identifier: MIT
// A lock server that evicts keys (maxmemory with a policy other than noeviction) could drop a
// held lease and let another holder in. Each connect reads the server's INFO memory: such a
// server is refused with `server_evicts` before any lock command is sent (and
// last_server_error() names the policy), unless ManagerOptions::accept_evicting_server, which
// goes on and says so once (Observer::on_server_notice). Each test runs its own server, whose
// configuration it changes (never the shared one's). The ACL cases (an INFO the user may not
// run) are in least_privilege_test.cpp, beside the documented user.
#include "live.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

/// What an observer heard, in order: the notices, and which came before which acquire.
class Heard final : public Observer {
 public:
  struct Notice {
    std::string address;
    ServerNoticeKind kind;
    std::string text;
  };
  void on_server_notice(const ServerNotice& n) noexcept override {
    notices.push_back({std::string(n.address), n.kind, std::string(n.text)});
    order.push_back("notice");
  }
  void on_acquire(const AcquireEvent& e) noexcept override {
    order.push_back(e.error ? std::string("acquire:") + e.error.message() : "acquire");
  }
  std::vector<Notice> notices;
  std::vector<std::string> order;
};

struct Attempt {
  error_code ec;
  bool owned = false;
  std::chrono::steady_clock::duration took{};
};

/// One acquire that would wait 5 s for a held lock: a server refused at connect must fail it
/// at once, not be retried until the wait runs out. Its guard is dropped (released) after.
Attempt acquire(LockManager& locks, asio::io_context& io, const std::string& resource) {
  std::optional<Attempt> got;
  const auto start = std::chrono::steady_clock::now();
  locks.async_acquire(resource, {.ttl = 5s, .wait = 5s}, [&](error_code ec, LockGuard g) {
    got = Attempt{ec, g.owns_lock(), std::chrono::steady_clock::now() - start};
  });
  EXPECT_TRUE(run_until(
      io, [&] { return got.has_value(); }, 10s))
      << "the acquire did not complete";
  return got.value_or(Attempt{error::timeout});
}

/// The lock commands the server ran (INFO commandstats), or what they wrote: none when it
/// was refused at connect. (The handshake's FCALL of the library's probe, pipelined before
/// INFO memory is answered, reads nothing and writes nothing.)
bool ran_lock_commands(const RedisServer& server) {
  const auto stats = server.command({"INFO", "commandstats"});
  return stats.find("cmdstat_eval") != std::string::npos ||
         stats.find("cmdstat_set:") != std::string::npos || server.command({"DBSIZE"}) != "0";
}

void set_policy(const RedisServer& server, const std::string& maxmemory,
                const std::string& policy) {
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", maxmemory}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", policy}), "OK");
}

std::string address_of(const RedisServer& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

}  // namespace

TEST(Eviction, AnEvictingServerIsRefusedBeforeAnythingIsWritten) {
  RedisServer server;
  for (const std::string policy : {"volatile-lru", "allkeys-lru"}) {
    SCOPED_TRACE(policy);
    set_policy(server, "100mb", policy);
    ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
    auto heard = std::make_shared<Heard>();
    asio::io_context io;
    LockManager locks(io.get_executor(), server.config(), {.observer = heard});
    const auto r = acquire(locks, io, unique_resource(policy));
    EXPECT_EQ(r.ec, error::server_evicts) << r.ec.message();
    EXPECT_FALSE(r.owned);
    EXPECT_LT(r.took, 2s) << "a refused server is not waited out";
    const auto said = locks.last_server_error();
    EXPECT_NE(said.find("maxmemory-policy " + policy + ", maxmemory 104857600"), std::string::npos)
        << said;
    EXPECT_NE(said.find("set maxmemory-policy noeviction, or "
                        "ManagerOptions::accept_evicting_server"),
              std::string::npos)
        << said;
    EXPECT_EQ(server.command({"DBSIZE"}), "0") << "nothing is written";
    EXPECT_FALSE(ran_lock_commands(server)) << server.command({"INFO", "commandstats"});
    EXPECT_TRUE(heard->notices.empty()) << "a refusal is an error, not a notice";
    EXPECT_EQ(heard->order, std::vector<std::string>{"acquire:" + r.ec.message()});
  }
}

TEST(Eviction, AcceptedTheLockIsGrantedAndTheObserverHearsItOnce) {
  RedisServer server;
  set_policy(server, "100mb", "volatile-lru");
  auto heard = std::make_shared<Heard>();
  asio::io_context io;
  LockManager locks(io.get_executor(), server.config(),
                    {.observer = heard, .accept_evicting_server = true});
  const auto resource = unique_resource();
  // The notice comes when the connection is ready, before the acquire is answered.
  std::optional<LockGuard> held;
  locks.async_acquire(resource, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    held = std::move(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return held.has_value(); }));
  EXPECT_TRUE(held->owns_lock());
  ASSERT_EQ(heard->notices.size(), 1u);
  EXPECT_EQ(heard->order, (std::vector<std::string>{"notice", "acquire"}));
  const auto& notice = heard->notices.front();
  EXPECT_EQ(notice.kind, ServerNoticeKind::evicting_policy);
  EXPECT_EQ(notice.address, address_of(server));
  EXPECT_EQ(notice.text,
            "the lock server evicts keys (maxmemory-policy volatile-lru, maxmemory 104857600): a "
            "lease could vanish while held (accepted: ManagerOptions::accept_evicting_server)");
  EXPECT_EQ(locks.last_server_error(), notice.text);

  // Another connection to the same server (a waiter's subscription) and a reconnect find
  // the same, and say nothing more.
  std::optional<error_code> waited;
  locks.async_acquire(resource, {.ttl = 5s, .wait = 1s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(g.owns_lock()) << "held by this test";
    waited = ec;
  });
  EXPECT_TRUE(run_until(io, [&] {
    return server.command({"CLIENT", "LIST"}).find("name=redis_lock:sub") != std::string::npos;
  })) << "the waiter never subscribed";
  ASSERT_TRUE(run_until(io, [&] { return waited.has_value(); }));
  EXPECT_FALSE(*waited) << waited->message();
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  const auto again = acquire(locks, io, unique_resource());
  EXPECT_FALSE(again.ec) << again.ec.message();
  EXPECT_TRUE(again.owned);
  EXPECT_EQ(heard->notices.size(), 1u) << "said once per manager and server";

  // A change of policy is news: the next connect says it.
  set_policy(server, "100mb", "allkeys-random");
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  EXPECT_TRUE(acquire(locks, io, unique_resource()).owned);
  ASSERT_EQ(heard->notices.size(), 2u);
  EXPECT_NE(heard->notices.back().text.find("maxmemory-policy allkeys-random"), std::string::npos)
      << heard->notices.back().text;
}

TEST(Eviction, NoevictionOrNoLimitIsGrantedWithoutANotice) {
  RedisServer server;
  const std::pair<std::string, std::string> safe[] = {
      {"100mb", "noeviction"},  // writes fail with OOM at the limit; nothing is evicted
      {"0", "allkeys-lru"},     // no limit: nothing is ever evicted, whatever the policy
      {"0", "volatile-lru"}};
  for (const auto& [maxmemory, policy] : safe) {
    SCOPED_TRACE(maxmemory + " " + policy);
    set_policy(server, maxmemory, policy);
    auto heard = std::make_shared<Heard>();
    asio::io_context io;
    LockManager locks(io.get_executor(), server.config(), {.observer = heard});
    const auto r = acquire(locks, io, unique_resource());
    EXPECT_FALSE(r.ec) << r.ec.message() << " / " << locks.last_server_error();
    EXPECT_TRUE(r.owned);
    EXPECT_TRUE(heard->notices.empty());
    EXPECT_EQ(locks.last_server_error(), "");
  }
}

TEST(Eviction, TheCheckIsMadeAtEachConnect) {
  RedisServer server;
  set_policy(server, "100mb", "volatile-lru");
  asio::io_context io;
  {
    LockManager refused(io.get_executor(), server.config());
    EXPECT_EQ(acquire(refused, io, unique_resource()).ec, error::server_evicts);
    // Back to noeviction: the same manager's next acquire connects again, and is granted.
    set_policy(server, "100mb", "noeviction");
    const auto r = acquire(refused, io, unique_resource());
    EXPECT_FALSE(r.ec) << r.ec.message();
    EXPECT_TRUE(r.owned);
  }
  {
    LockManager fresh(io.get_executor(), server.config());
    EXPECT_TRUE(acquire(fresh, io, unique_resource()).owned) << "a new manager is granted";
    // The policy changed under a connected manager: nothing is noticed until it reconnects
    // (a restart, a lost link), and then it is refused.
    set_policy(server, "100mb", "volatile-ttl");
    EXPECT_TRUE(acquire(fresh, io, unique_resource()).owned) << "the link is not re-checked";
    server.command({"CLIENT", "KILL", "TYPE", "normal"});
    const auto r = acquire(fresh, io, unique_resource());
    EXPECT_EQ(r.ec, error::server_evicts) << r.ec.message();
    EXPECT_NE(fresh.last_server_error().find("volatile-ttl"), std::string::npos)
        << fresh.last_server_error();
  }
}

TEST(Eviction, RedlockSaysSoWhenEvictingMastersKeepAMajorityOutOfReach) {
  // Three masters, two of them evicting: no majority can be had, and the reason is their
  // policy, not an outage. With one evicting master of three the other two are a majority:
  // the lock is granted (an evicting master counts as a failed one).
  std::vector<std::unique_ptr<RedisServer>> masters;
  ConnectionConfig cfg;
  cfg.topology = Topology::redlock;
  for (int i = 0; i < 3; ++i) {
    masters.push_back(std::make_unique<RedisServer>());
    cfg.nodes.push_back({"127.0.0.1", masters.back()->port()});
  }
  set_policy(*masters[0], "100mb", "allkeys-lru");
  set_policy(*masters[1], "100mb", "volatile-lru");
  asio::io_context io;
  {
    LockManager locks(io.get_executor(), cfg);
    const auto r = acquire(locks, io, unique_resource("two"));
    EXPECT_EQ(r.ec, error::server_evicts) << r.ec.message();
    EXPECT_LT(r.took, 2s);
    EXPECT_NE(locks.last_server_error().find("evicts keys"), std::string::npos)
        << locks.last_server_error();
  }
  set_policy(*masters[1], "100mb", "noeviction");
  {
    LockManager locks(io.get_executor(), cfg);
    const auto r = acquire(locks, io, unique_resource("one"));
    EXPECT_FALSE(r.ec) << r.ec.message();
    EXPECT_TRUE(r.owned);
  }
}
