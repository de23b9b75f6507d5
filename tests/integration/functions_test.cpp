// SPDX-License-Identifier: MIT
// The scripts as a Redis Functions library (ManagerOptions::use_functions, the default): a
// connection asks in its handshake whether the server has this build's library, loads it
// where it is missing and the user may, and then calls the scripts with FCALL; where the
// user may not load it (docs/security.md's ACL leaves function|load out), the scripts go with
// EVALSHA, loaded ahead, and nothing fails. Each test runs its own server and reads what it
// ran from INFO commandstats.
#include "keys.hpp"
#include "live.hpp"
#include "redis_lock_scripts.hpp"
#include "redis_server.hpp"

#include <map>
#include <optional>
#include <regex>
#include <string>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

/// calls= of each command in INFO commandstats ("fcall", "evalsha", "eval", "function|load").
std::map<std::string, long long> calls(const RedisServer& server) {
  const auto stats = server.command({"INFO", "commandstats"});
  std::map<std::string, long long> out;
  const std::regex line(R"(cmdstat_([a-z|_]+):calls=(\d+))");
  for (std::sregex_iterator it(stats.begin(), stats.end(), line), end; it != end; ++it) {
    out[(*it)[1]] = std::stoll((*it)[2]);
  }
  return out;
}

long long calls_of(const RedisServer& server, const std::string& command) {
  const auto all = calls(server);
  const auto it = all.find(command);
  return it == all.end() ? 0 : it->second;
}

/// The names of the server's libraries whose name starts with redis_lock_.
std::string our_libraries(const RedisServer& server) {
  return server.command({"FUNCTION", "LIST", "LIBRARYNAME", "redis_lock_*"});
}

/// A mutex held by `a`, waited for by `b`, handed over, and released: every lock script that
/// a hand-off runs, each checked.
void hand_off(LockManager& a, LockManager& b, asio::io_context& io, const std::string& resource) {
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto use = asio::as_tuple(asio::use_awaitable);
    auto [e1, first] = co_await a.async_acquire(resource, {.ttl = 5s}, use);
    EXPECT_FALSE(e1) << e1.message() << " / " << a.last_server_error();
    CO_ASSERT_TRUE(first.owns_lock());
    // (Shared: the callback may outlive this coroutine when an assertion ends it early.)
    auto got = std::make_shared<std::optional<LockGuard>>();
    auto& second = *got;
    b.async_acquire(resource, {.ttl = 5s, .wait = 5s}, [got, &b](error_code ec, LockGuard g) {
      EXPECT_FALSE(ec) << ec.message() << " / " << b.last_server_error();
      *got = std::move(g);
    });
    // The waiter in line before the release (its place is what the release hands on).
    for (int i = 0; i < 500; ++i) {
      auto [ei, info] = co_await a.async_inspect(resource, use);
      if (!ei && info.waiters > 0) break;
      co_await sleep_for(10ms);
    }
    auto [e2, released] = co_await first.async_release(use);
    EXPECT_FALSE(e2) << e2.message();
    EXPECT_TRUE(released);
    for (int i = 0; i < 500 && !second; ++i) co_await sleep_for(10ms);
    CO_ASSERT_TRUE(second && second->owns_lock());
    EXPECT_GT(second->fencing_token(), first.fencing_token());
    auto [e3, released2] = co_await second->async_release(use);
    EXPECT_FALSE(e3) << e3.message();
    EXPECT_TRUE(released2);
  });
}

}  // namespace

TEST(Functions, AManagerLoadsTheLibraryOnceAndCallsTheScriptsWithFcall) {
  RedisServer server;
  EXPECT_EQ(our_libraries(server), "");
  asio::io_context io;
  LockManager a(io.get_executor(), server.config());
  LockManager b(io.get_executor(), server.config());
  hand_off(a, b, io, unique_resource("fn"));
  EXPECT_NE(our_libraries(server).find("redis_lock_"), std::string::npos) << our_libraries(server);
  // Loaded once (by the first connection that found it missing), each later one asked.
  EXPECT_GE(calls_of(server, "function|load"), 1);
  EXPECT_LE(calls_of(server, "function|load"), 2);  // two managers may both find it missing
  // The hand-off's acquires, join, claim, releases and inspects: FCALL, after the loads.
  ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
  hand_off(b, a, io, unique_resource("fn2"));
  EXPECT_GE(calls_of(server, "fcall"), 6);
  EXPECT_EQ(calls_of(server, "evalsha"), 0);
  EXPECT_EQ(calls_of(server, "eval"), 0);
  EXPECT_EQ(calls_of(server, "function|load"), 0);
}

TEST(Functions, AServerWithoutTheLibraryGetsItBeforeTheFirstCommandAndNoScripts) {
  // A fresh (or restarted) server: the handshake's probe finds no library, so the library is
  // loaded before any command goes (one round trip more), and every command goes with
  // FCALL. The scripts are not loaded as well: a fleet's connections meeting a restarted
  // server each sent them (about 100 KB for the server to read and hash) on top of the
  // library.
  RedisServer server;
  ASSERT_EQ(our_libraries(server), "");
  asio::io_context io;
  LockManager a(io.get_executor(), server.config());
  const auto r = acquire_once(a, io, unique_resource("fresh"));
  EXPECT_TRUE(r.owned) << r.ec.message();
  EXPECT_NE(our_libraries(server), "");
  EXPECT_EQ(calls_of(server, "function|load"), 1);
  EXPECT_EQ(calls_of(server, "script|load"), 0);
  EXPECT_GE(calls_of(server, "fcall"), 2);  // the acquire and its release
  EXPECT_EQ(calls_of(server, "evalsha"), 0);
  EXPECT_EQ(calls_of(server, "eval"), 0);
}

TEST(Functions, WithUseFunctionsOffTheScriptsGoWithEvalsha) {
  RedisServer server;
  asio::io_context io;
  LockManager a(io.get_executor(), server.config(), {.use_functions = false});
  LockManager b(io.get_executor(), server.config(), {.use_functions = false});
  hand_off(a, b, io, unique_resource("sha"));
  EXPECT_EQ(our_libraries(server), "");
  EXPECT_EQ(calls_of(server, "fcall"), 0);
  EXPECT_GE(calls_of(server, "evalsha"), 6);
}

TEST(Functions, AUserWhoMayNotLoadThemRunsTheScriptsWithEvalshaAndNothingFails) {
  RedisServer server;
  // docs/security.md's ACL leaves function|load out; here +fcall stays.
  ASSERT_EQ(server.command(
                {"ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-function|load"}),
            "OK");
  auto cfg = server.config();
  cfg.username = "nofn";
  cfg.password = "pw";
  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  hand_off(a, b, io, unique_resource("denied"));
  EXPECT_EQ(our_libraries(server), "");
  EXPECT_GE(calls_of(server, "evalsha"), 6);
  // Each connection asked for the load once: refused, it is not asked again.
  const auto refusals = server.command({"ACL", "LOG"});
  EXPECT_NE(refusals.find("function|load"), std::string::npos) << refusals;
}

TEST(Functions, LoadedByAnotherUserTheyRunForOneWhoMayOnlyCallThem) {
  RedisServer server;
  ASSERT_EQ(server.command(
                {"ACL", "SETUSER", "caller", "on", ">pw", "~*", "&*", "+@all", "-function|load"}),
            "OK");
  asio::io_context io;
  {
    // As an administrator would: any manager (or redis-lock command) of a user who may.
    LockManager admin(io.get_executor(), server.config());
    EXPECT_TRUE(acquire_once(admin, io, unique_resource("load")).owned);
  }
  ASSERT_NE(our_libraries(server), "");
  ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
  ASSERT_EQ(server.command({"ACL", "LOG", "RESET"}), "OK");
  auto cfg = server.config();
  cfg.username = "caller";
  cfg.password = "pw";
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  hand_off(a, b, io, unique_resource("caller"));
  EXPECT_GE(calls_of(server, "fcall"), 6);
  EXPECT_EQ(calls_of(server, "evalsha"), 0);
  EXPECT_EQ(calls_of(server, "function|load"), 0);
  EXPECT_EQ(server.command({"ACL", "LOG"}), "");  // nothing refused
}

TEST(Functions, ALibraryFlushedUnderAConnectionIsNoFailure) {
  RedisServer server;
  asio::io_context io;
  LockManager a(io.get_executor(), server.config());
  EXPECT_TRUE(acquire_once(a, io, unique_resource("before")).owned);
  ASSERT_NE(our_libraries(server), "");
  ASSERT_EQ(server.command({"FUNCTION", "FLUSH"}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
  // The FCALL finds no function: sent once more with the script's body, as after NOSCRIPT,
  // and the connection loads the library again (this user may) ahead of what follows.
  const auto after = acquire_once(a, io, unique_resource("after"));
  EXPECT_TRUE(after.owned) << after.ec.message();
  EXPECT_GE(calls_of(server, "eval"), 1);
  EXPECT_NE(our_libraries(server), "");
  ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
  const auto again = acquire_once(a, io, unique_resource("again"));
  EXPECT_TRUE(again.owned) << again.ec.message();
  EXPECT_GE(calls_of(server, "fcall"), 1);
  EXPECT_EQ(calls_of(server, "eval"), 0);
  EXPECT_EQ(calls_of(server, "evalsha"), 0);
}

TEST(Functions, AManagerWithThemAndOneWithoutHandOffToEachOther) {
  // The same scripts either way, on the same keys: a rolling change of the option (or a
  // build before it) shares every lock with the others.
  RedisServer server;
  asio::io_context io;
  LockManager with(io.get_executor(), server.config());
  LockManager without(io.get_executor(), server.config(), {.use_functions = false});
  hand_off(with, without, io, unique_resource("mixed1"));
  hand_off(without, with, io, unique_resource("mixed2"));
  EXPECT_GE(calls_of(server, "fcall"), 3);
  EXPECT_GE(calls_of(server, "evalsha"), 3);
}

TEST(Functions, AReleaseRunsOnAServerOutOfMemoryAndAnAcquireIsRefused) {
  RedisServer server;
  asio::io_context io;
  LockManager locks(io.get_executor(), server.config());
  const auto resource = unique_resource("oom");
  run_co(io, [&]() -> asio::awaitable<void> {
    const auto use = asio::as_tuple(asio::use_awaitable);
    auto [e1, held] = co_await locks.async_acquire(resource, {.ttl = 10s}, use);
    EXPECT_FALSE(e1) << e1.message();
    CO_ASSERT_TRUE(held.owns_lock());
    // Out of memory now: no key can be added, and no acquire may add one.
    EXPECT_EQ(server.command({"DEBUG", "POPULATE", "40000", "filler", "100"}), "OK");
    EXPECT_EQ(server.command({"CONFIG", "SET", "maxmemory", "2mb"}), "OK");
    auto [e2, other] = co_await locks.async_acquire(unique_resource("oom2"), {.ttl = 10s}, use);
    EXPECT_EQ(e2, error::out_of_memory) << e2.message() << " / " << locks.last_server_error();
    auto [e3, extended] = co_await held.async_extend(20s, use);
    EXPECT_FALSE(e3) << e3.message() << " / " << locks.last_server_error();
    EXPECT_TRUE(extended);
    auto [e4, released] = co_await held.async_release(use);
    EXPECT_FALSE(e4) << e4.message() << " / " << locks.last_server_error();
    EXPECT_TRUE(released);
  });
  EXPECT_GE(calls_of(server, "fcall"), 2);  // the extension and the release at least
  EXPECT_EQ(server.command({"EXISTS", lease_key(resource)}), "0");
}

TEST(Functions, AClaimAfterAHandOffMessageReadsTheLeaseOnceAndRenewsIt) {
  // acquire.lua's mode '2' (sent after a hand-off message): the lease a release folded our
  // token and term into is renewed after one GET; mode '1' looks at the lease and the queue
  // first. Anything else under '2' goes the usual way (here: the waiter joins the queue).
  RedisServer server;
  ASSERT_EQ(server.command({"FUNCTION", "LOAD", std::string(detail::function_library)}),
            std::string(detail::function_library_name));
  // `how`: '<mode><place ms> <member suffix>', sent as acquire.lua's three words.
  const auto call = [&](const detail::ResourceKeys& k, const std::string& token,
                        const std::string& how) {
    const auto space = how.find(' ');
    return server.command({"FCALL", std::string(detail::acquire_script.function), "5", k.lease(),
                           k.fence(), k.queue(), k.queue_expiry(), k.info(), token, "5000",
                           how.substr(0, 1), how.substr(1, space - 1), how.substr(space + 1)});
  };
  const std::string ours(32, 'a');
  const std::string theirs(32, 'b');
  for (const char mode : {'2', '1'}) {
    SCOPED_TRACE(mode);
    const auto k = detail::make_keys("lock:", unique_resource("claim"));
    ASSERT_EQ(server.command({"SET", k.lease(), ours + " @77+", "PX", "600"}), "OK");
    ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
    EXPECT_EQ(call(k, ours, std::string(1, mode) + "1200 0123456789abcdeff5000"), "1 77");
    const auto pttl = std::stoll(server.command({"PTTL", k.lease()}));
    EXPECT_GT(pttl, 4000);
    EXPECT_EQ(calls_of(server, "get"), 1);
    EXPECT_EQ(calls_of(server, "pexpire"), 1);
    EXPECT_EQ(calls_of(server, "exists"), mode == '2' ? 0 : 1);
  }
  const auto k = detail::make_keys("lock:", unique_resource("claim"));
  ASSERT_EQ(server.command({"SET", k.lease(), theirs + " @78", "PX", "5000"}), "OK");
  const auto queued = call(k, ours, "21200 0123456789abcdeff5000");
  EXPECT_EQ(queued.rfind("0 ", 0), 0u) << queued;
  EXPECT_EQ(server.command({"ZCARD", k.queue()}), "1");
  EXPECT_EQ(server.command({"GET", k.lease()}), theirs + " @78+");  // a waiter behind it
}
