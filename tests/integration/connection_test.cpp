// SPDX-License-Identifier: MIT
// The connection layer on real servers: Unix sockets, AUTH/ACL, SELECT, one pipelined
// connection, deadlines, reconnection, NOSCRIPT recovery, and garbage from a fake server.
#include "live.hpp"

#include "background.hpp"
#include "client_list.hpp"
#include "tcp_proxy.hpp"

#include <hiredis/hiredis.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(Connection, UnixSocket) {
  RedisServer server;
  asio::io_context io;
  auto cfg = *ConnectionConfig::from_url("unix://" + server.unix_socket());
  LockManager locks(io.get_executor(), cfg);
  auto r = acquire_once(locks, io, unique_resource());
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.owned);
}

TEST(Connection, PasswordAndAclUsers) {
  RedisServer server({"--requirepass", "s3cret"});
  asio::io_context io;
  auto base = server.config();

  {  // no password at all
    LockManager locks(io.get_executor(), base);
    auto r = acquire_once(locks, io, "r");
    EXPECT_EQ(r.ec, error::not_authenticated) << r.ec.message();
    EXPECT_FALSE(r.owned);
  }
  {  // wrong password
    auto cfg = base;
    cfg.password = "wrong";
    LockManager locks(io.get_executor(), cfg);
    auto r = acquire_once(locks, io, "r");
    EXPECT_EQ(r.ec, error::auth_failed) << r.ec.message();
  }
  {  // right password
    auto cfg =
        *ConnectionConfig::from_url("redis://:s3cret@127.0.0.1:" + std::to_string(server.port()));
    LockManager locks(io.get_executor(), cfg);
    auto r = acquire_once(locks, io, "r");
    EXPECT_FALSE(r.ec) << r.ec.message();
    EXPECT_TRUE(r.owned);
  }
  // ACL users: one with what an uncontended acquire and release need, one that may not run
  // scripts.
  const auto run_admin = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"ACL", "SETUSER"});
    return redis_command(server.port(), args, "s3cret");
  };
  // Enough to take and release a lock that nobody else holds; not the full least-privilege
  // list (waiting also needs +subscribe): that one is in docs/security.md and exercised by
  // Connection.LeastPrivilegeUserCanWaitRenewAndWaitForReplicas.
  ASSERT_EQ(run_admin({"locker",   "on",
                       ">pw1",     "~lock:*",
                       "&lock:*",  "+evalsha",
                       "+eval",    "+set",
                       "+incr",    "+del",
                       "+get",     "+pttl",
                       "+pexpire", "+publish",
                       "+exists",  "+time",
                       "+zadd",    "+zrem",
                       "+zrange",  "+zrangebyscore",
                       "+zscore",  "+client|setname",
                       "+ping",    "+script|load"}),
            "OK");
  // The same without the two optional rights: the connection is unnamed, and a flushed
  // script cache is refilled by resending the body.
  ASSERT_EQ(
      run_admin({"lean",    "on",    ">pw4",  "~lock:*", "&lock:*", "+evalsha",       "+eval",
                 "+set",    "+incr", "+del",  "+get",    "+pttl",   "+pexpire",       "+publish",
                 "+exists", "+time", "+zadd", "+zrem",   "+zrange", "+zrangebyscore", "+zscore",
                 "+ping"}),
      "OK");
  ASSERT_EQ(
      run_admin({"scripter", "on", ">pw3", "~lock:*", "&lock:*", "+evalsha", "+eval", "+ping"}),
      "OK");
  ASSERT_EQ(run_admin({"reader", "on", ">pw2", "~*", "+get"}), "OK");
  {
    auto cfg = *ConnectionConfig::from_url("redis://locker:pw1@127.0.0.1:" +
                                           std::to_string(server.port()));
    LockManager locks(io.get_executor(), cfg);
    auto r = acquire_once(locks, io, "acl-resource");
    EXPECT_FALSE(r.ec) << r.ec.message() << " / " << locks.last_server_error();
    EXPECT_TRUE(r.owned);
  }
  {
    auto cfg =
        *ConnectionConfig::from_url("redis://lean:pw4@127.0.0.1:" + std::to_string(server.port()));
    LockManager locks(io.get_executor(), cfg);
    redis_command(server.port(), {"SCRIPT", "FLUSH"}, "s3cret");
    auto r = acquire_once(locks, io, "acl-resource-lean");
    EXPECT_FALSE(r.ec) << r.ec.message() << " / " << locks.last_server_error();
    EXPECT_TRUE(r.owned);
  }
  {
    auto cfg = *ConnectionConfig::from_url("redis://reader:pw2@127.0.0.1:" +
                                           std::to_string(server.port()));
    LockManager locks(io.get_executor(), cfg);
    auto r = acquire_once(locks, io, "acl-resource-2");
    EXPECT_EQ(r.ec, error::no_permission) << r.ec.message();
    EXPECT_NE(locks.last_server_error().find("NOPERM"), std::string::npos);
  }
  {  // may run scripts, but not the commands inside them
    auto cfg = *ConnectionConfig::from_url("redis://scripter:pw3@127.0.0.1:" +
                                           std::to_string(server.port()));
    LockManager locks(io.get_executor(), cfg);
    auto r = acquire_once(locks, io, "acl-resource-3");
    EXPECT_EQ(r.ec, error::no_permission) << r.ec.message() << " / " << locks.last_server_error();
  }
}

TEST(Connection, SelectsTheDatabase) {
  asio::io_context io;
  auto cfg = shared_server_config();
  cfg.database = 5;
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  std::string token;
  locks.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec);
    token = g.token();
    EXPECT_EQ(redis_command(cfg.port, {"GET", lease_key(resource)}), "(nil)");  // db 0
    g.async_release(asio::detached);
  });
  io.run_for(5s);
  ASSERT_FALSE(token.empty());
}

TEST(Connection, ManyRequestsShareOnePipelinedConnection) {
  asio::io_context io;
  auto cfg = shared_server_config();
  ManagerOptions opts;
  opts.client_name = "pipelined" + std::to_string(std::random_device{}() % 100000);
  LockManager locks(io.get_executor(), cfg, opts);
  const auto resource = unique_resource();
  int winners = 0, empty = 0, failed = 0;
  std::vector<LockGuard> held;
  for (int i = 0; i < 200; ++i) {
    locks.async_acquire(resource, {.ttl = 10s}, [&](error_code ec, LockGuard g) {
      if (ec)
        ++failed;
      else if (g)
        ++winners, held.push_back(std::move(g));
      else
        ++empty;
      if (winners + empty + failed == 200) {
        EXPECT_EQ(clients_named(cfg.port, opts.client_name), 1);
      }
    });
  }
  io.run_for(10s);
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(empty, 199);
  EXPECT_EQ(failed, 0);
}

TEST(Connection, RefusedFailsFast) {
  asio::io_context io;
  ConnectionConfig cfg;
  cfg.port = free_port();
  cfg.connect_timeout = 2s;
  LockManager locks(io.get_executor(), cfg);
  const auto start = std::chrono::steady_clock::now();
  auto r = acquire_once(locks, io, "r");
  EXPECT_EQ(r.ec, error::connect_failed) << r.ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST(Connection, UnresolvableHostFails) {
  asio::io_context io;
  ConnectionConfig cfg;
  cfg.host = "no-such-host.invalid";  // RFC 6761: never resolves
  LockManager locks(io.get_executor(), cfg);
  auto r = acquire_once(locks, io, "r");
  // A resolver without a reachable DNS server may take longer than the connect deadline.
  EXPECT_TRUE(r.ec == error::connect_failed || r.ec == error::connect_timeout) << r.ec.message();
}

TEST(Connection, StoppedServerHitsTheConnectDeadline) {
  RedisServer server;
  server.pause();  // the kernel still accepts, but the handshake never gets a reply
  asio::io_context io;
  auto cfg = server.config();
  cfg.connect_timeout = 300ms;
  LockManager locks(io.get_executor(), cfg);
  const auto start = std::chrono::steady_clock::now();
  auto r = acquire_once(locks, io, "r");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.ec, error::connect_timeout) << r.ec.message();
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 1500ms);
  server.resume();
}

namespace {

/// Polls with PINGs that may wait 50 ms each until one is not answered in time (the server
/// is blocked), within `limit`.
bool wait_until_asleep(std::uint16_t port, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    const timeval connect_limit{1, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, connect_limit);
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return false;
    }
    const timeval reply_limit{0, 50'000};
    redisSetTimeout(c, reply_limit);
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    const bool asleep = reply == nullptr;
    if (reply) freeReplyObject(reply);
    redisFree(c);
    if (asleep) return true;
  }
  return false;
}

}  // namespace

TEST(Connection, CommandDeadlineAndBestEffortRelease) {
  RedisServer server;
  asio::io_context io;
  auto cfg = server.config();
  cfg.command_timeout = 200ms;
  LockManager locks(io.get_executor(), cfg);
  // Connect first, so the timeout hits the command, not the handshake.
  ASSERT_TRUE(acquire_once(locks, io, "warmup").owned);

  std::thread sleeper([&] { server.command({"DEBUG", "SLEEP", "1"}); });
  // The server is asleep once a PING goes unanswered for 50 ms (it answers within 1 ms
  // otherwise): then the acquire below certainly queues behind DEBUG SLEEP.
  ASSERT_TRUE(wait_until_asleep(server.port(), 900ms)) << "DEBUG SLEEP never began";
  const auto start = std::chrono::steady_clock::now();
  std::optional<error_code> result;
  locks.async_acquire("slow", {.ttl = 30s}, [&](error_code ec, LockGuard g) {
    result = ec;
    EXPECT_FALSE(g);
  });
  io.restart();
  io.run_for(10s);  // runs on until the best-effort release has been answered too
  sleeper.join();
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, error::timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // The acquire did run once the server woke up; the best-effort release removed it.
  EXPECT_EQ(server.command({"EXISTS", lease_key("slow")}), "0");
}

/// calls=N of `command` in the server's INFO commandstats (0 when never called).
long long command_calls(const RedisServer& server, const std::string& command) {
  const auto stats = server.command({"INFO", "commandstats"});
  const auto at = stats.find("cmdstat_" + command + ":calls=");
  if (at == std::string::npos) return 0;
  return std::stoll(stats.substr(at + std::string("cmdstat_:calls=").size() + command.size()));
}

long long connections_received(const RedisServer& server) {
  const auto stats = server.command({"INFO", "stats"});
  const std::string field = "total_connections_received:";
  return std::stoll(stats.substr(stats.find(field) + field.size()));
}

TEST(Connection, AnAcquireThatWaitsRidesOutACommandTimeout) {
  // A server too busy to answer within the command timeout (a storm of handshakes, here
  // DEBUG SLEEP): an acquire that allows a wait gets the lock when the server answers,
  // within its wait, from the one attempt it sent (nothing sent beside it to add to the load).
  RedisServer server;
  asio::io_context io;
  auto cfg = server.config();
  cfg.command_timeout = 200ms;
  LockManager locks(io.get_executor(), cfg);
  ASSERT_TRUE(acquire_once(locks, io, "warmup").owned);
  const auto resource = unique_resource();
  const auto calls_before = command_calls(server, "fcall") + command_calls(server, "evalsha");

  std::thread sleeper([&] { server.command({"DEBUG", "SLEEP", "1"}); });
  ASSERT_TRUE(wait_until_asleep(server.port(), 900ms)) << "DEBUG SLEEP never began";
  const auto start = std::chrono::steady_clock::now();
  std::optional<error_code> result;
  LockGuard held;
  locks.async_acquire(resource, {.ttl = 30s, .wait = 5s}, [&](error_code ec, LockGuard g) {
    result = ec;
    held = std::move(g);
  });
  io.restart();
  io.run_for(6s);
  sleeper.join();
  ASSERT_TRUE(result) << "the acquire never completed";
  EXPECT_FALSE(*result) << result->message();
  EXPECT_TRUE(held);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);  // it did wait the sleep out
  EXPECT_GT(held.fencing_token(), 0u);
  // One attempt: the one that timed out, answered late.
  EXPECT_EQ(command_calls(server, "fcall") + command_calls(server, "evalsha") - calls_before, 1);
  EXPECT_EQ(server.command({"EXISTS", lease_key(resource)}), "1");
}

TEST(Connection, ACommandQueuedPastItsDeadlineInASlowHandshakeIsAConnectTimeout) {
  // Every byte 400 ms late each way: the handshake takes longer than the command timeout
  // (300 ms), but less than the connect deadline (5 s). A command that waited in the queue
  // for it was never written: connect_timeout (an outage), not timeout (which says it may
  // have run). An acquire without a wait ends with it; one with a wait rides it out, on the
  // same connection: the handshake under way is not given up and done again.
  RedisServer server;
  TcpProxy proxy(server.port());
  proxy.set_delay(400ms);
  auto cfg = server.config();
  cfg.port = proxy.port();
  cfg.command_timeout = 300ms;
  cfg.connect_timeout = 5s;
  {
    asio::io_context io;
    LockManager locks(io.get_executor(), cfg);
    const auto r = acquire_once(locks, io, unique_resource());
    EXPECT_EQ(r.ec, error::connect_timeout) << r.ec.message();
    EXPECT_FALSE(r.owned);
  }
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto connections_before = connections_received(server);
  std::optional<error_code> result;
  LockGuard held;
  locks.async_acquire(unique_resource(), {.ttl = 30s, .wait = 10s},
                      [&](error_code ec, LockGuard g) {
                        result = ec;
                        held = std::move(g);
                      });
  io.run_for(12s);
  ASSERT_TRUE(result) << "the acquire never completed";
  EXPECT_FALSE(*result) << result->message();
  EXPECT_TRUE(held);
  // One connection of ours (and the one that read the stats).
  EXPECT_EQ(connections_received(server) - connections_before, 2);
}

TEST(Connection, ReconnectsAfterServerRestart) {
  RedisServer server;
  asio::io_context io;
  LockManager locks(io.get_executor(), server.config());
  auto first = acquire_once(locks, io, "a");
  ASSERT_TRUE(first.owned);
  server.kill();
  server.restart();
  // The idle connection died with the server; the next command must not pay for it.
  auto second = acquire_once(locks, io, "b");
  EXPECT_FALSE(second.ec) << second.ec.message();
  EXPECT_TRUE(second.owned);
}

TEST(Connection, AReleaseThatTimesOutIsAnsweredByItsLateReply) {
  // The server stalls past the command timeout while the holder releases: the release was
  // written and runs when the server wakes; the caller hears what it did ("released"), not
  // a timeout that leaves it guessing, since the lease was still valid meanwhile.
  RedisServer server;
  Background bg;
  auto cfg = server.config();
  cfg.command_timeout = 200ms;
  LockManager locks(bg.io.get_executor(), cfg);
  const auto resource = unique_resource();
  auto held = locks.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  std::thread sleeper([&] { server.command({"DEBUG", "SLEEP", "1"}); });
  ASSERT_TRUE(wait_until_asleep(server.port(), 900ms)) << "DEBUG SLEEP never began";
  const auto start = std::chrono::steady_clock::now();
  auto released = held.async_release(asio::use_future);
  ASSERT_EQ(released.wait_for(5s), std::future_status::ready);
  sleeper.join();
  EXPECT_TRUE(released.get()) << "not answered by the late reply";
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);  // past the command timeout
  EXPECT_EQ(server.command({"EXISTS", lease_key(resource)}), "0");
}

TEST(Connection, AReleaseThatCannotConnectIsSentAgainWhileTheLeaseMayBeValid) {
  // The server restarts (its lease kept in an fsynced AOF) while the holder releases: the
  // release is never written while the server is down (connect_failed), so it is sent again
  // until it lands, instead of leaving the lease to its ttl (10 s) and the caller an error.
  RedisServer server({"--appendonly", "yes", "--appendfsync", "always"});
  Background bg;
  LockManager locks(bg.io.get_executor(), server.config());
  const auto resource = unique_resource();
  auto held = locks.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  server.kill(SIGKILL);
  // The manager must have seen its link close before the release is sent: one written to
  // the dead socket before the close is read is "connection lost", which a caller who waits
  // is rightly told (it may have run). An inspect completes only once the loss is seen.
  auto looked = std::make_shared<std::promise<error_code>>();
  auto seen = looked->get_future();
  locks.async_inspect(unique_resource(),
                      [looked](error_code ec, LockInfo) { looked->set_value(ec); });
  ASSERT_EQ(seen.wait_for(10s), std::future_status::ready) << "the inspect never completed";
  ASSERT_TRUE(seen.get()) << "an inspect answered by a killed server";
  auto released = held.async_release(asio::use_future);
  std::this_thread::sleep_for(300ms);  // the down time the release must ride out
  EXPECT_NE(released.wait_for(0s), std::future_status::ready) << "it gave up at once";
  server.restart();
  ASSERT_EQ(released.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(released.get()) << "the lease was not released";
  EXPECT_EQ(server.command({"EXISTS", lease_key(resource)}), "0");
}

TEST(Connection, ServerKilledWithRequestsInFlight) {
  RedisServer server;
  asio::io_context io;
  auto cfg = server.config();
  cfg.command_timeout = 5s;
  LockManager locks(io.get_executor(), cfg);
  ASSERT_TRUE(acquire_once(locks, io, "warmup").owned);
  server.pause();
  std::map<int, int> completions;
  int errors = 0;
  for (int i = 0; i < 50; ++i) {
    locks.async_acquire("r" + std::to_string(i), {.ttl = 5s}, [&, i](error_code ec, LockGuard g) {
      ++completions[i];
      if (ec) ++errors;
      EXPECT_FALSE(g);
    });
  }
  io.restart();
  io.poll();  // everything written, nothing answered
  server.kill();
  io.run_for(10s);
  EXPECT_EQ(completions.size(), 50u);
  for (auto& [i, n] : completions) EXPECT_EQ(n, 1) << "request " << i;
  EXPECT_EQ(errors, 50);
  // And the manager recovers when the server is back.
  server.restart();
  auto after = acquire_once(locks, io, "after");
  EXPECT_FALSE(after.ec) << after.ec.message();
  EXPECT_TRUE(after.owned);
}

TEST(Connection, LoadsItsScriptsInTheHandshakeAndRecoversFromScriptFlush) {
  // The scripts as scripts (use_functions off, or a user who may not load the library;
  // Functions.* has the library's own flush).
  RedisServer server;
  asio::io_context io;
  LockManager locks(io.get_executor(), server.config(), {.use_functions = false});
  for (int i = 0; i < 2; ++i) {
    auto r = acquire_once(locks, io, "flushed");  // acquire, then the guard's release
    EXPECT_FALSE(r.ec) << r.ec.message();
    EXPECT_TRUE(r.owned);
    io.restart();
    io.run_for(5s);
  }
  // A fresh server, yet no NOSCRIPT: the handshake loaded every script (acquire, release,
  // extend, their lease-set forms and the group acquire), and every use hit the cache, which
  // also proves our embedded SHA1 is the one Redis computes.
  const auto stats = server.command({"INFO", "commandstats"});
  EXPECT_NE(stats.find("cmdstat_script|load:calls=7,"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("cmdstat_eval:"), std::string::npos) << stats;
  EXPECT_NE(stats.find("cmdstat_evalsha:calls=4,"), std::string::npos) << stats;
  EXPECT_EQ(server.command({"INFO", "errorstats"}).find("NOSCRIPT"), std::string::npos);
  // Flushed under a live connection: EVALSHA -> NOSCRIPT -> EVAL with the body.
  server.command({"SCRIPT", "FLUSH"});
  auto r = acquire_once(locks, io, "flushed");
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.owned);
  EXPECT_NE(server.command({"INFO", "commandstats"}).find("cmdstat_eval:calls=2,"),
            std::string::npos);
}

TEST(Connection, GarbageFromTheServerIsAProtocolError) {
  // No real Redis sends garbage: a fake server is the only way to show this. It answers the
  // handshake (HELLO and INFO memory as Redis 7.0 would, CLIENT SETNAME and each SCRIPT LOAD
  // refused, which the client tolerates), then meets the
  // acquire with bytes that are not RESP: the error must come from the reply parser, not
  // from a failed handshake.
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  std::optional<asio::ip::tcp::socket> peer;
  std::string seen;
  std::array<char, 4096> buf{};
  std::size_t answered = 0;
  bool garbage_sent = false;
  std::function<void()> read_more = [&] {
    peer->async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t n) {
      if (ec) return;
      seen.append(buf.data(), n);
      auto out = std::make_shared<std::string>();
      // The handshake's steps, answered in order: HELLO with a version, INFO memory with no
      // limit, CLIENT SETNAME and one SCRIPT LOAD per script refused (the client takes locks
      // without them).
      const std::map<std::string, std::string> answers = {
          {"\r\nHELLO\r\n",
           "*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"},
          {"\r\nINFO\r\n", "$42\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n\r\n"},
          {"\r\nLOAD\r\n", "-ERR not allowed\r\n"},
          {"\r\nFCALL_RO\r\n", "-ERR Function not found\r\n"},
          {"\r\nSETNAME\r\n", "-ERR not allowed\r\n"}};
      std::map<std::size_t, std::string> steps;  // by position in what was seen
      for (const auto& [step, answer] : answers) {
        for (auto at = seen.find(step); at != std::string::npos; at = seen.find(step, at + 1)) {
          steps[at] = answer;
        }
      }
      std::size_t i = 0;
      for (const auto& [at, reply] : steps) {
        if (i++ >= answered) *out += reply;
      }
      answered = steps.size();
      if (!garbage_sent && seen.find("EVALSHA") != std::string::npos) {
        *out += "?this is not RESP\r\n";
        garbage_sent = true;
      }
      if (!out->empty()) {
        asio::async_write(*peer, asio::buffer(*out), [out](error_code, std::size_t) {});
      }
      read_more();
    });
  };
  acceptor.async_accept([&](error_code ec, asio::ip::tcp::socket s) {
    if (ec) return;
    peer.emplace(std::move(s));
    read_more();
  });
  ConnectionConfig cfg;
  cfg.port = acceptor.local_endpoint().port();
  LockManager locks(io.get_executor(), cfg);
  std::optional<Outcome> r;
  // (A short ttl: the acquire may have run, so it is given back, and that give-back is
  // tried again while nothing listens any more, until the lease would have expired.)
  locks.async_acquire("r", {.ttl = 1s}, [&](error_code ec, LockGuard g) {
    r = Outcome{ec, g.owns_lock(), g.fencing_token()};
    acceptor.close();
    if (peer) peer->close();
  });
  io.run_for(5s);
  ASSERT_TRUE(r) << "the acquire never completed";
  EXPECT_TRUE(garbage_sent) << "the acquire never reached the fake server";
  EXPECT_EQ(r->ec, error::protocol_error) << r->ec.message();
  EXPECT_FALSE(r->owned);
}

TEST(Connection, LeastPrivilegeUserCanWaitRenewAndWaitForReplicas) {
  // docs/security.md "Least privilege": exactly the documented rights (and +wait, for
  // min_replicas) are enough for every feature of a standalone lock user: taking a lock,
  // waiting for it (queue, hand-off published to the waiter's channel, which it subscribed
  // to), auto-renewal, extension, and min_replicas. The server's ACL LOG must stay empty:
  // a denied command (a SUBSCRIBE, say) that the library survived by polling would show there.
  RedisServer master({"--repl-diskless-sync-delay", "0"});
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  ASSERT_TRUE(wait_until_linked(replica));
  // The library loaded as an administrator would (docs/security.md): the lock user may call
  // it, not load it.
  {
    asio::io_context io;
    LockManager admin(io.get_executor(), master.config());
    ASSERT_TRUE(acquire_once(admin, io, unique_resource("load")).owned);
  }
  // The list of docs/security.md, word for word, + wait.
  ASSERT_EQ(master.command({"ACL",
                            "SETUSER",
                            "locker",
                            "on",
                            ">pw",
                            "~lock:*",
                            "&lock:*",
                            "+fcall",
                            "+fcall_ro",
                            "+evalsha",
                            "+eval",
                            "+set",
                            "+get",
                            "+del",
                            "+exists",
                            "+incr",
                            "+pttl",
                            "+pexpire",
                            "+pexpireat",
                            "+type",
                            "+time",
                            "+zadd",
                            "+zrem",
                            "+zrange",
                            "+zrangebyscore",
                            "+zrevrangebyscore",
                            "+zscore",
                            "+zcard",
                            "+zcount",
                            "+zrank",
                            "+zremrangebyscore",
                            "+publish",
                            "+subscribe",
                            "+unsubscribe",
                            "+ping",
                            "+client|setname",
                            "+script|load",
                            "+info",
                            "+wait"}),
            "OK");
  ASSERT_EQ(master.command({"ACL", "LOG", "RESET"}), "OK");
  auto cfg = master.config();
  cfg.username = "locker";
  cfg.password = "pw";
  asio::io_context io;
  LockManager holder(io.get_executor(), cfg);
  LockManager waiter(io.get_executor(), cfg);
  const auto resource = unique_resource();
  const auto durable = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, held] = co_await holder.async_acquire(resource, {.ttl = 600ms, .auto_renew = true},
                                                    asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec) << ec.message() << " / " << holder.last_server_error();
    CO_ASSERT_TRUE(held.owns_lock());
    // The waiter queues and subscribes while the holder renews past its first ttl.
    bool waited = false;
    waiter.async_acquire(resource, {.ttl = 5s, .wait = 10s}, [&](error_code wec, LockGuard g) {
      EXPECT_FALSE(wec) << wec.message() << " / " << waiter.last_server_error();
      EXPECT_TRUE(g.owns_lock());
      waited = true;
    });
    co_await sleep_for(900ms);
    EXPECT_FALSE(held.lost()) << "renewal failed";
    EXPECT_FALSE(waited);
    auto [eec, extended] = co_await held.async_extend(5s, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(eec) << eec.message();
    EXPECT_TRUE(extended);
    auto [rec, released] = co_await held.async_release(asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(released);
    for (int i = 0; i < 100 && !waited; ++i) co_await sleep_for(10ms);
    EXPECT_TRUE(waited) << "the waiter did not get the lock it was handed";

    auto [dec, g] = co_await holder.async_acquire(durable,
                                                  {.ttl = 5s,
                                                   .auto_renew = true,
                                                   .renew_every = 100ms,
                                                   .min_replicas = 1,
                                                   .replication_timeout = 2s},
                                                  asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(dec) << dec.message() << " / " << holder.last_server_error();
    CO_ASSERT_TRUE(g.owns_lock());
    co_await sleep_for(300ms);  // renewals, each confirmed by WAIT
    auto [xec, ok] = co_await g.async_extend(5s, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(xec) << xec.message() << " / " << holder.last_server_error();
    EXPECT_TRUE(ok);
    EXPECT_FALSE(g.lost());
  }());
  EXPECT_EQ(master.command({"ACL", "LOG"}), "") << "a command was denied";
}
