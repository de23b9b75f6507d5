// SPDX-License-Identifier: MIT
// Regression tests of the correctness pass (issue 12), each made to fail before its fix with a
// real server and a real fault: completions on the user's executor for guards that hold
// nothing, acquires given back after a protocol error, the lost signal on time while a
// renewal is resent, min_replicas kept by renewals and extensions, a connect attempt for a
// command queued during a long reconnect backoff, and Redlock resends that own their bytes.
#include "live.hpp"
#include "tcp_proxy.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>

#include <thread>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

/// Runs `io` on a thread of its own (while the test polls a server) until destroyed.
class RunInBackground {
 public:
  explicit RunInBackground(asio::io_context& io)
      : thread_([this, &io] {
          while (!stop_) {
            io.restart();
            io.run_for(20ms);
          }
        }) {}
  ~RunInBackground() {
    stop_ = true;
    thread_.join();
  }
  RunInBackground(const RunInBackground&) = delete;
  RunInBackground& operator=(const RunInBackground&) = delete;

 private:
  std::atomic<bool> stop_{false};  // before thread_: set before the thread starts
  std::thread thread_;
};

/// Takes `resource` and runs `io` until the guard arrives (a failure is the test's).
LockGuard hold(LockManager& locks, asio::io_context& io, const std::string& resource,
               LockOptions options) {
  std::optional<LockGuard> held;
  locks.async_acquire(resource, options, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    held.emplace(std::move(g));
  });
  EXPECT_TRUE(run_until(io, [&] { return held.has_value(); })) << "the acquire never completed";
  return held ? std::move(*held) : LockGuard{};
}

/// Three Redlock masters, the first reached through a proxy (to slow it down).
struct SlowFirstMaster {
  SlowFirstMaster() {
    for (int i = 0; i < 3; ++i) masters.push_back(std::make_unique<RedisServer>());
    slow = std::make_unique<TcpProxy>(masters[0]->port());
  }
  ConnectionConfig config() const {
    ConnectionConfig cfg;
    cfg.topology = Topology::redlock;
    cfg.nodes.push_back({"127.0.0.1", slow->port()});
    for (std::size_t i = 1; i < masters.size(); ++i) {
      cfg.nodes.push_back({"127.0.0.1", masters[i]->port()});
    }
    return cfg;
  }
  std::vector<std::unique_ptr<RedisServer>> masters;
  std::unique_ptr<TcpProxy> slow;
};

/// A completion that records whether it ran inside io.run() on the test's thread.
struct Seen {
  int calls = 0;
  bool on_thread = true;
  void hit(asio::io_context& io, std::thread::id thread) {
    ++calls;
    on_thread = on_thread && std::this_thread::get_id() == thread &&
                io.get_executor().running_in_this_thread();
  }
};

/// Polls (there is no signal from the server) until `key` no longer exists, within `limit`.
bool key_gone(const RedisServer& server, const std::string& key, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (server.command({"EXISTS", key}) != "0") {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

// Item 1: every operation on a guard that holds nothing completes inside the user's
// io_context::run(), on its thread, never on Asio's system executor.
TEST(Correctness, EmptyGuardsCompleteOnTheManagersExecutor) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  const auto me = std::this_thread::get_id();
  const auto resource = unique_resource();

  LockGuard held = hold(locks, io, resource, {.ttl = 5s});
  ASSERT_TRUE(held);
  LockGuard& guard = held;

  Seen release, released_again, extend, wait_lost, moved_extend, moved_release, manager;
  guard.async_release([&](error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    EXPECT_TRUE(ok);
    release.hit(io, me);
  });
  // The guard is empty now (async_release moved its lease out).
  ASSERT_FALSE(guard);
  guard.async_release([&](error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    EXPECT_FALSE(ok);
    released_again.hit(io, me);
  });
  guard.async_extend(1s, [&](error_code ec, bool ok) {
    EXPECT_FALSE(ec);
    EXPECT_FALSE(ok);
    extend.hit(io, me);
  });
  guard.async_wait_lost([&](error_code ec) {
    EXPECT_EQ(ec, asio::error::operation_aborted);
    wait_lost.hit(io, me);
  });
  LockGuard moved_to(std::move(guard));
  guard.async_extend(1s, [&](error_code, bool ok) {
    EXPECT_FALSE(ok);
    moved_extend.hit(io, me);
  });
  guard.async_release([&](error_code, bool ok) {
    EXPECT_FALSE(ok);
    moved_release.hit(io, me);
  });
  LockManager moved_manager(std::move(locks));
  locks.async_acquire(resource, {.ttl = 5s}, [&](error_code ec, LockGuard g) {
    EXPECT_EQ(ec, error::invalid_argument);
    EXPECT_FALSE(g);
    manager.hit(io, me);
  });

  // Nothing may have run yet: completions never run inside the initiating call.
  EXPECT_EQ(released_again.calls + extend.calls + wait_lost.calls + moved_extend.calls +
                moved_release.calls + manager.calls,
            0);
  for (Seen* s :
       {&release, &released_again, &extend, &wait_lost, &moved_extend, &moved_release, &manager}) {
    ASSERT_TRUE(run_until(
        io, [&] { return s->calls > 0; }, 5s))
        << "a completion never ran";
    EXPECT_EQ(s->calls, 1);
    EXPECT_TRUE(s->on_thread) << "a completion ran outside io.run() on the test's thread";
  }
}

// Item 3: a link that fails with a protocol error after an acquire ran on the server must
// give that acquire back: otherwise its lease belongs to nobody until the ttl.
TEST(Correctness, AnAcquireLostToAProtocolErrorIsGivenBack) {
  RedisServer server;
  TcpProxy proxy(server.port());
  auto cfg = server.config();
  cfg.unix_socket.clear();
  cfg.port = proxy.port();
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  // A first lock connects and loads the scripts.
  auto warm = acquire_once(locks, io, unique_resource("warm"));
  ASSERT_FALSE(warm.ec) << warm.ec.message();

  const auto resource = unique_resource();
  proxy.corrupt_next_reply();  // the acquire runs on the server; its reply is garbage
  std::optional<error_code> result;
  locks.async_acquire(resource, {.ttl = 60s}, [&](error_code ec, LockGuard g) {
    result = ec;
    EXPECT_FALSE(g);
  });
  ASSERT_TRUE(run_until(io, [&] { return result.has_value(); }));
  EXPECT_EQ(*result, error::protocol_error) << result->message();
  // The give-back goes out on a fresh link.
  bool gone = false;
  {
    RunInBackground running(io);
    gone = key_gone(server, lease_key(resource), 5s);
  }
  EXPECT_TRUE(gone) << "the lease of an acquire that failed with protocol_error was left behind";
}

// Item 5: the lost signal fires at valid_until() at the latest, also when the renewal in
// flight is resent (here: NOSCRIPT after SCRIPT FLUSH, behind a slow link), which restarts
// its command deadline.
TEST(Correctness, LostSignalIsOnTimeWhileARenewalIsResent) {
  RedisServer server;
  TcpProxy proxy(server.port());
  auto cfg = server.config();
  cfg.unix_socket.clear();
  cfg.port = proxy.port();
  cfg.command_timeout = 2000ms;
  asio::io_context io;
  // EVALSHA, so that SCRIPT FLUSH makes the renewal meet NOSCRIPT (Functions.* has FCALL's).
  LockManager locks(io.get_executor(), cfg, {.use_functions = false});
  const auto resource = unique_resource();
  LockGuard held =
      hold(locks, io, resource, {.ttl = 2500ms, .auto_renew = true, .renew_every = 100ms});
  ASSERT_TRUE(held);
  // The first renewal (due in 100 ms) meets NOSCRIPT after 1.8 s and is resent with the
  // body, whose reply would come 1.8 s later: after valid_until().
  EXPECT_EQ(server.command({"SCRIPT", "FLUSH"}), "OK");
  proxy.set_delay(900ms);
  const auto valid_until = held.valid_until();
  std::optional<Clock::time_point> lost_at;
  held.async_wait_lost([&](error_code ec) {
    EXPECT_EQ(ec, error::lock_lost);
    lost_at = Clock::now();
  });
  ASSERT_TRUE(run_until(
      io, [&] { return lost_at.has_value(); }, 10s));
  EXPECT_TRUE(held.lost());
  EXPECT_LE(*lost_at - valid_until, 500ms)
      << "lost reported "
      << std::chrono::duration_cast<std::chrono::milliseconds>(*lost_at - valid_until).count()
      << " ms after valid_until()";
  proxy.set_delay(0ms);
}

// Item 6: min_replicas covers renewals and extensions too. A replica that stops replicating
// makes them count as not extended: the lease is lost at valid_until() and async_extend
// reports not_replicated.
TEST(Correctness, MinReplicasHoldsForRenewalsAndExtensions) {
  RedisServer master({"--repl-diskless-sync-delay", "0"});
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  ASSERT_TRUE(wait_until_linked(replica));
  asio::io_context io;
  // WAIT blocks the connection it runs on: a command queued behind a renewal's WAIT spends
  // up to the 1 s replication timeout of its command deadline waiting (with the default 1 s
  // deadline, an extension sent behind a renewal's WAIT timed out once in a flake hunt).
  auto cfg = master.config();
  cfg.command_timeout = 3s;
  LockManager locks(io.get_executor(), cfg);
  LockGuard held =
      hold(locks, io, "replicated",
           {.ttl = 3s, .auto_renew = true, .min_replicas = 1, .replication_timeout = 1s});
  ASSERT_TRUE(held);
  // With the replica still there, an extension is confirmed by WAIT.
  std::optional<std::pair<error_code, bool>> extended;
  held.async_extend(3s, [&](error_code ec, bool ok) { extended.emplace(ec, ok); });
  ASSERT_TRUE(run_until(io, [&] { return extended.has_value(); }));
  EXPECT_FALSE(extended->first) << extended->first.message();
  EXPECT_TRUE(extended->second);

  // The replica stops replicating: no renewal or extension can be confirmed any more.
  EXPECT_EQ(replica.command({"REPLICAOF", "NO", "ONE"}), "OK");
  extended.reset();
  held.async_extend(3s, [&](error_code ec, bool ok) { extended.emplace(ec, ok); });
  ASSERT_TRUE(run_until(io, [&] { return extended.has_value(); }));
  EXPECT_EQ(extended->first, error::not_replicated) << extended->first.message();
  EXPECT_FALSE(extended->second);

  std::optional<Clock::time_point> lost_at;
  held.async_wait_lost([&](error_code ec) {
    EXPECT_EQ(ec, error::lock_lost);
    lost_at = Clock::now();
  });
  const auto valid_until = held.valid_until();
  ASSERT_TRUE(run_until(
      io, [&] { return lost_at.has_value(); }, 5s))
      << "renewals without a replica kept the lease as if replicated";
  EXPECT_LE(*lost_at - valid_until, 500ms);
}

// Item 10: a command queued while the link waits out a long reconnect backoff still gets a
// connect attempt within its command timeout, instead of failing with `timeout` while the
// server is back.
TEST(Correctness, ACommandQueuedDuringBackoffStillConnects) {
  RedisServer server;
  auto cfg = server.config();
  // Below the longest backoff (1 s), so that waiting it out fails the command; half of it
  // (400 ms) is left for the connect, the handshake and the acquire.
  cfg.command_timeout = 800ms;
  cfg.connect_timeout = 300ms;
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  ASSERT_FALSE(acquire_once(locks, io, "warm").ec);
  server.kill();
  // Each failed connect doubles the backoff, up to its maximum (1 s).
  for (int i = 0; i < 8; ++i) {
    auto out = acquire_once(locks, io, "down");
    EXPECT_TRUE(out.ec);
  }
  server.restart();
  auto out = acquire_once(locks, io, "back");
  EXPECT_FALSE(out.ec) << out.ec.message();
  EXPECT_TRUE(out.owned);
}

// Item 2: a Redlock command resent with its body after NOSCRIPT owns every byte it sends.
// Each attempt has its own token; a slow master's NOSCRIPT reply to an earlier attempt used
// to resend from the freed token of that attempt (ASan: heap-use-after-free).
TEST(Correctness, RedlockResendsAfterNoscriptOwnTheirBytes) {
  SlowFirstMaster setup;
  auto& masters = setup.masters;
  setup.slow->set_delay(60ms);
  const auto cfg = setup.config();
  asio::io_context io;
  // EVALSHA, so that a flushed cache makes each master answer NOSCRIPT.
  LockManager holder(io.get_executor(), cfg, {.use_functions = false});
  LockManager contender(io.get_executor(), cfg, {.use_functions = false});
  const auto resource = unique_resource();
  LockGuard held = hold(holder, io, resource, {.ttl = 20s});
  ASSERT_TRUE(held);

  // The slow master forgets its scripts again and again while the contender's attempts,
  // refused by the two fast masters, follow each other with fresh tokens.
  std::atomic<bool> stop{false};
  std::thread flusher([&] {
    while (!stop) {
      redis_command(masters[0]->port(), {"SCRIPT", "FLUSH"});
      std::this_thread::sleep_for(5ms);
    }
  });
  int contended = 0;
  for (int round = 0; round < 3; ++round) {
    std::optional<std::pair<error_code, bool>> out;
    contender.async_acquire(resource, {.ttl = 5s, .wait = 600ms},
                            [&](error_code ec, LockGuard g) { out.emplace(ec, g.owns_lock()); });
    ASSERT_TRUE(run_until(io, [&] { return out.has_value(); }));
    EXPECT_FALSE(out->first) << out->first.message();
    EXPECT_FALSE(out->second) << "the contender took a lock that is held";
    ++contended;
  }
  stop = true;
  flusher.join();
  EXPECT_EQ(contended, 3);
  // Let the slow master's late replies arrive, then the holder still holds on a majority
  // and, once it releases, nothing is left on any master.
  std::optional<bool> released;
  held.async_release([&](error_code ec, bool ok) {
    EXPECT_FALSE(ec) << ec.message();
    released = ok;
  });
  ASSERT_TRUE(run_until(io, [&] { return released.has_value(); }));
  EXPECT_TRUE(*released);
  // Late answers of the slow master may still grant an attempt that failed (a resend that
  // arrives after the release): each is given back, which needs the io_context running.
  RunInBackground running(io);
  for (auto& m : masters) {
    EXPECT_TRUE(key_gone(*m, lease_key(resource), 3s)) << "a lease was left on a master";
  }
}

// Item 7: a Redlock grant that arrives after its command timed out did not count in the
// vote, so it is not part of the lease: it is given back on that master, also when the
// acquire succeeded on the others.
TEST(Correctness, RedlockGrantAfterATimeoutIsGivenBackOnThatMaster) {
  SlowFirstMaster setup;
  auto& masters = setup.masters;
  auto& slow = *setup.slow;
  auto cfg = setup.config();
  cfg.command_timeout = 300ms;
  cfg.connect_timeout = 3s;
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  ASSERT_FALSE(acquire_once(locks, io, unique_resource("warm")).ec);  // links up, scripts loaded
  slow.set_delay(400ms);  // master 0 answers after the command timeout
  const auto resource = unique_resource();
  LockGuard held = hold(locks, io, resource, {.ttl = 30s});
  ASSERT_TRUE(held) << "two fast masters of three make a majority";
  // The slow master's grant arrives ~800 ms after it was sent; then it is given back there.
  RunInBackground running(io);
  // The acquire reaches the slow master 400 ms after it was sent: the grant is there first.
  const auto until = Clock::now() + 5s;
  bool granted = false;
  while (!granted && Clock::now() < until) {
    granted = masters[0]->command({"GET", lease_key(resource)}) == held.token();
    if (!granted) std::this_thread::sleep_for(2ms);
  }
  // The slow master recovers (a link slower than the command timeout can carry nothing):
  // the give-back, sent when the late grant arrives, now reaches it.
  slow.set_delay(0ms);
  const bool gone = granted && key_gone(*masters[0], lease_key(resource), 5s);
  EXPECT_TRUE(granted) << "the slow master never granted the late acquire";
  EXPECT_TRUE(gone) << "a late grant outside the lease stayed on the slow master";
  EXPECT_EQ(masters[1]->command({"GET", lease_key(resource)}), held.token());
  EXPECT_EQ(masters[2]->command({"GET", lease_key(resource)}), held.token());
}
