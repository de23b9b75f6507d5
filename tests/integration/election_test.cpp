// SPDX-License-Identifier: MIT
// Leader election (Election): one leader at a time with increasing terms, a killed leader
// replaced within its ttl, observers woken by the server's messages (an idle one sends no
// command), a lost leader knowing it before anyone else is elected.
#include "live.hpp"

#include "background.hpp"
#include "child_process.hpp"
#include "lease_sets.hpp"
#include "tcp_proxy.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <future>
#include <optional>
#include <sstream>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

using Observed = std::pair<error_code, std::optional<Leader>>;

/// Starts an observe on a Background's io_context; its outcome, bounded by the caller.
std::future<Observed> observe(Election& election, std::uint64_t after_term,
                              asio::cancellation_slot slot = {}) {
  auto promise = std::make_shared<std::promise<Observed>>();
  auto result = promise->get_future();
  election.async_observe(
      after_term,
      asio::bind_cancellation_slot(slot, [promise](error_code ec, std::optional<Leader> leader) {
        promise->set_value({ec, std::move(leader)});
      }));
  return result;
}

std::string unique_name() { return unique_resource("election"); }

/// The `field=` value of each connection of the manager whose client name is `name` in
/// CLIENT LIST (its subscriber connection is `name:sub`).
std::vector<long> client_field(std::uint16_t port, const std::string& name,
                               const std::string& field) {
  std::vector<long> values;
  std::istringstream lines(redis_command(port, {"CLIENT", "LIST"}));
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" name=" + name + " ") == std::string::npos &&
        line.find(" name=" + name + ":sub ") == std::string::npos) {
      continue;
    }
    const auto at = line.find(" " + field + "=");
    if (at != std::string::npos) values.push_back(std::stol(line.substr(at + field.size() + 2)));
  }
  return values;
}

}  // namespace

TEST(Election, OneLeaderAtATimeWithIncreasingTermsAndObserversSeeEachChange) {
  auto cfg = shared_server_config();
  const auto name = unique_name();
  Background bg;
  LockManager a_mgr(bg.io.get_executor(), cfg, {.holder_label = "node-a"});
  LockManager b_mgr(bg.io.get_executor(), cfg, {.holder_label = "node-b"});
  LockManager watcher_mgr(bg.io.get_executor(), cfg);
  Election a(a_mgr, name), b(b_mgr, name), watcher(watcher_mgr, name);

  auto [ec0, none] =
      outcome<std::optional<Leader>>([&](auto h) { watcher.async_leader(std::move(h)); });
  ASSERT_FALSE(ec0);
  EXPECT_FALSE(none) << "nobody campaigned yet";

  auto leader_a = a.async_campaign("10.0.0.1:8080", {.ttl = 5s}, asio::use_future).get();
  ASSERT_TRUE(leader_a);
  EXPECT_EQ(leader_a.resource(), "election:" + name);
  auto [ec1, seen] =
      outcome<std::optional<Leader>>([&](auto h) { watcher.async_leader(std::move(h)); });
  ASSERT_FALSE(ec1);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->value, "10.0.0.1:8080");
  EXPECT_EQ(seen->term, leader_a.fencing_token()) << "the term is the leader's fencing token";

  // A second candidate cannot lead while a leads; with a wait it queues.
  auto busy = b.async_campaign("10.0.0.2:8080", {.ttl = 5s}, asio::use_future).get();
  EXPECT_FALSE(busy) << "two leaders at once";
  auto b_campaign = b.async_campaign("10.0.0.2:8080", {.ttl = 5s, .wait = 10s}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port,
                             {"ZCARD", detail::make_keys("lock:", leader_a.resource()).queue()}) ==
               "1";
      },
      5s, "b queued");

  // Observe(0) learns the current state at once; observe(term of a) waits for a change.
  auto [ec2, now] =
      outcome<std::optional<Leader>>([&](auto h) { watcher.async_observe(0, std::move(h)); });
  ASSERT_FALSE(ec2);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->term, leader_a.fencing_token());
  auto change = observe(watcher, leader_a.fencing_token());
  EXPECT_EQ(change.wait_for(300ms), std::future_status::timeout) << "no change yet";

  const auto a_term = leader_a.fencing_token();
  ASSERT_TRUE(leader_a.async_release(asio::use_future).get()) << "a resigns";
  ASSERT_EQ(b_campaign.wait_for(5s), std::future_status::ready) << "b leads after a resigned";
  auto leader_b = b_campaign.get();
  ASSERT_TRUE(leader_b);
  EXPECT_GT(leader_b.fencing_token(), a_term);
  ASSERT_EQ(change.wait_for(5s), std::future_status::ready);
  auto [ec3, next] = change.get();
  ASSERT_FALSE(ec3);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->value, "10.0.0.2:8080");
  EXPECT_EQ(next->term, leader_b.fencing_token());

  // b resigns with nobody after it: the observer of b's term hears that nobody leads.
  const auto b_term = leader_b.fencing_token();
  auto ended = observe(watcher, b_term);
  ASSERT_TRUE(leader_b.async_release(asio::use_future).get());
  ASSERT_EQ(ended.wait_for(5s), std::future_status::ready);
  auto [ec4, nobody] = ended.get();
  EXPECT_FALSE(ec4);
  EXPECT_FALSE(nobody);

  // Observing that ended term again waits for the next leader (a loop does not spin).
  auto next_leader = observe(watcher, b_term);
  EXPECT_EQ(next_leader.wait_for(300ms), std::future_status::timeout) << "nobody leads yet";
  auto again = a.async_campaign("10.0.0.1:8080", {.ttl = 5s}, asio::use_future).get();
  ASSERT_TRUE(again);
  ASSERT_EQ(next_leader.wait_for(5s), std::future_status::ready);
  auto [ec5, newest] = next_leader.get();
  ASSERT_FALSE(ec5);
  ASSERT_TRUE(newest);
  EXPECT_EQ(newest->term, again.fencing_token());
  again.async_release(asio::use_future).get();
}

TEST(Election, KilledLeaderIsReplacedWithinItsTtlWithALargerTerm) {
  auto cfg = shared_server_config();
  const auto name = unique_name();
  ChildProcess holder(
      {REDIS_LOCK_HOLDER_PATH, std::to_string(cfg.port), name, "900", "leader:killed"});
  const auto dead_term = std::stoull("0" + holder.read_line());
  ASSERT_GT(dead_term, 0u);

  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  Election election(locks, name);
  auto [ec0, seen] =
      outcome<std::optional<Leader>>([&](auto h) { election.async_leader(std::move(h)); });
  ASSERT_FALSE(ec0);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->value, "killed");
  EXPECT_EQ(seen->term, dead_term);

  // The renewing leader outlives several of its ttls while it runs.
  auto campaign = election.async_campaign("successor", {.ttl = 5s, .wait = 10s}, asio::use_future);
  auto change = observe(election, dead_term);
  EXPECT_EQ(campaign.wait_for(2s), std::future_status::timeout) << "a live leader was replaced";
  holder.kill9();
  const auto killed_at = Clock::now();
  ASSERT_EQ(campaign.wait_for(5s), std::future_status::ready);
  auto successor = campaign.get();
  ASSERT_TRUE(successor);
  const auto took = Clock::now() - killed_at;
  EXPECT_LT(took, 900ms + 500ms) << "within the ttl and one hand-off";
  EXPECT_GT(successor.fencing_token(), dead_term);
  ASSERT_EQ(change.wait_for(5s), std::future_status::ready);
  auto [ec1, next] = change.get();
  ASSERT_FALSE(ec1);
  if (!next) {
    // The observer read the state in the instant between the dead lease's end and the
    // successor's takeover: nobody led then. Observing that term again waits for the next.
    auto again = observe(election, dead_term);
    ASSERT_EQ(again.wait_for(5s), std::future_status::ready);
    auto [ec2, newest] = again.get();
    ASSERT_FALSE(ec2);
    next = newest;
  }
  ASSERT_TRUE(next);
  EXPECT_EQ(next->term, successor.fencing_token());
  EXPECT_EQ(next->value, "successor");
  successor.async_release(asio::use_future).get();
}

TEST(Election, AnIdleObserverSendsNoCommandWhileTheLeaderStays) {
  RedisServer server;  // its own: nothing else talks to it
  ConnectionConfig cfg;
  cfg.port = server.port();
  const auto name = unique_name();
  Background bg;
  LockManager leader_mgr(bg.io.get_executor(), cfg, {.client_name = "leader"});
  LockManager observer_mgr(bg.io.get_executor(), cfg, {.client_name = "observer"});
  Election leading(leader_mgr, name), watching(observer_mgr, name);
  // A short lease renewed every 100 ms: each renewal is announced; polling would show.
  auto leader = leading.async_campaign("v", {.ttl = 600ms}, asio::use_future).get();
  ASSERT_TRUE(leader);
  auto change = observe(watching, leader.fencing_token());
  wait_until(
      [&] {
        const auto subs = client_field(server.port(), "observer", "sub");
        return subs.size() >= 2 && std::count(subs.begin(), subs.end(), 1L) == 1;
      },
      5s, "the observer connected and subscribed");
  std::this_thread::sleep_for(3500ms);  // the thing measured: ~17 renewals of the leader
  EXPECT_EQ(change.wait_for(0ms), std::future_status::timeout) << "nothing changed";
  // The command connection's idle time counts from its last command (the read when it
  // subscribed); the subscriber's from the last message it was sent, so its last command
  // is what shows there.
  const auto list = redis_command(server.port(), {"CLIENT", "LIST"});
  std::istringstream lines(list);
  int seen = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" name=observer ") != std::string::npos) {
      ++seen;
      const auto idle = std::stol(line.substr(line.find(" idle=") + 6));
      EXPECT_GE(idle, 3) << "the idle observer sent a command: " << line;
    } else if (line.find(" name=observer:sub ") != std::string::npos) {
      ++seen;
      EXPECT_NE(line.find(" cmd=subscribe "), std::string::npos) << line;
    }
  }
  EXPECT_EQ(seen, 2) << list;
  EXPECT_FALSE(leader.lost());
  // And it is awake: the leader's resignation reaches it at once.
  const auto resigned_at = Clock::now();
  ASSERT_TRUE(leader.async_release(asio::use_future).get());
  ASSERT_EQ(change.wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - resigned_at, 500ms);
  auto [ec, nobody] = change.get();
  EXPECT_FALSE(ec);
  EXPECT_FALSE(nobody);
}

TEST(Election, ALostLeaderKnowsItBeforeAnotherCandidateIsElected) {
  auto cfg = shared_server_config();
  const auto name = unique_name();
  TcpProxy proxy(cfg.port);
  auto via_proxy = cfg;
  via_proxy.port = proxy.port();
  via_proxy.command_timeout = 200ms;
  Background bg;
  LockManager cut_off(bg.io.get_executor(), via_proxy);
  LockManager direct(bg.io.get_executor(), cfg);
  Election first(cut_off, name), second(direct, name), watcher(direct, name);
  auto leader = first.async_campaign("first", {.ttl = 900ms}, asio::use_future).get();
  ASSERT_TRUE(leader);
  const auto first_term = leader.fencing_token();
  std::promise<Clock::time_point> lost;
  bg.run([&] {
    leader.async_wait_lost([&](error_code ec) {
      EXPECT_EQ(ec, error::lock_lost);
      lost.set_value(Clock::now());
    });
  });
  auto change = observe(watcher, first_term);
  auto campaign = second.async_campaign("second", {.ttl = 5s, .wait = 10s}, asio::use_future);
  proxy.set_blackhole(true);  // the leader's renewals no longer reach the server
  ASSERT_EQ(campaign.wait_for(5s), std::future_status::ready);
  const auto elected_at = Clock::now();
  auto successor = campaign.get();
  ASSERT_TRUE(successor);
  EXPECT_GT(successor.fencing_token(), first_term);
  // Its own view of the leadership (no renewal confirmed since the cut) ended before the
  // successor was elected; the loss is then reported at that instant.
  const auto believed_until = leader.valid_until();
  EXPECT_LT(believed_until, elected_at)
      << "the old leader still believed it led when the new one was elected";
  auto lost_at = lost.get_future();
  ASSERT_EQ(lost_at.wait_for(2s), std::future_status::ready) << "the loss was never reported";
  EXPECT_LT(lost_at.get() - believed_until, 300ms);
  ASSERT_EQ(change.wait_for(5s), std::future_status::ready);
  auto [ec, next] = change.get();
  ASSERT_FALSE(ec);
  if (!next) {
    // The observer read the state at the old lease's end just before the successor's attempt
    // got there: "nobody leads" is a change too (Election::async_observe), and observing the
    // same term again waits for the next leader (seen once in an ASan run with both cores
    // busy).
    auto again = observe(watcher, first_term);
    ASSERT_EQ(again.wait_for(5s), std::future_status::ready);
    auto seen = again.get();
    ASSERT_FALSE(seen.first);
    next = std::move(seen.second);
  }
  ASSERT_TRUE(next);
  EXPECT_EQ(next->term, successor.fencing_token());
  proxy.set_blackhole(false);
  bg.run([&] { leader = LockGuard{}; });
  successor.async_release(asio::use_future).get();
}

TEST(Election, AnObserverReadsTheStateWhenTheLeadersLeaseRunsOutUnrenewed) {
  auto cfg = shared_server_config();
  const auto name = unique_name();
  TcpProxy proxy(cfg.port);
  auto via_proxy = cfg;
  via_proxy.port = proxy.port();
  Background bg;
  LockManager cut_off(bg.io.get_executor(), via_proxy);
  LockManager direct(bg.io.get_executor(), cfg);
  Election leading(cut_off, name), watching(direct, name);
  auto leader = leading.async_campaign("x", {.ttl = 700ms}, asio::use_future).get();
  ASSERT_TRUE(leader);
  auto change = observe(watching, leader.fencing_token());
  std::this_thread::sleep_for(100ms);
  proxy.set_blackhole(true);
  const auto cut_at = Clock::now();
  ASSERT_EQ(change.wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - cut_at, 700ms + 500ms) << "the lease's end plus one read";
  auto [ec, nobody] = change.get();
  EXPECT_FALSE(ec);
  EXPECT_FALSE(nobody) << "nobody leads once the lease ran out";
  proxy.set_blackhole(false);
  bg.run([&] { leader = LockGuard{}; });
}

TEST(Election, ForceReleaseHandsTheLeadershipOnAndTheEvictedLeaderLearnsIt) {
  auto cfg = shared_server_config();
  const auto name = unique_name();
  Background bg;
  LockManager a_mgr(bg.io.get_executor(), cfg), b_mgr(bg.io.get_executor(), cfg);
  Election a(a_mgr, name), b(b_mgr, name);
  auto leader = a.async_campaign("a", {.ttl = 900ms}, asio::use_future).get();
  ASSERT_TRUE(leader);
  std::promise<error_code> lost;
  bg.run([&] { leader.async_wait_lost([&](error_code ec) { lost.set_value(ec); }); });
  auto campaign = b.async_campaign("b", {.ttl = 5s, .wait = 10s}, asio::use_future);
  auto change = observe(b, leader.fencing_token());
  wait_until(
      [&] {
        return redis_command(cfg.port,
                             {"ZCARD", detail::make_keys("lock:", b.resource()).queue()}) == "1";
      },
      5s, "b queued");
  auto [ec, released] =
      outcome<bool>([&](auto h) { b_mgr.async_force_release(b.resource(), std::move(h)); });
  ASSERT_FALSE(ec);
  EXPECT_TRUE(released);
  ASSERT_EQ(campaign.wait_for(2s), std::future_status::ready) << "handed to the next candidate";
  auto successor = campaign.get();
  ASSERT_TRUE(successor);
  EXPECT_GT(successor.fencing_token(), leader.fencing_token());
  auto lost_ec = lost.get_future();
  ASSERT_EQ(lost_ec.wait_for(2s), std::future_status::ready) << "at its next renewal (300 ms)";
  EXPECT_EQ(lost_ec.get(), error::lock_lost);
  ASSERT_EQ(change.wait_for(2s), std::future_status::ready);
  auto [ec2, next] = change.get();
  ASSERT_FALSE(ec2);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->value, "b");
  EXPECT_FALSE(leader.async_release(asio::use_future).get()) << "the evicted leader's release";
  successor.async_release(asio::use_future).get();
}

TEST(Election, AnObserveIsCancelled) {
  auto cfg = shared_server_config();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  Election election(locks, unique_name());
  auto leader = election.async_campaign("v", {.ttl = 5s}, asio::use_future).get();
  ASSERT_TRUE(leader);
  asio::cancellation_signal cancel;
  auto change = observe(election, leader.fencing_token(), cancel.slot());
  EXPECT_EQ(change.wait_for(200ms), std::future_status::timeout);
  bg.run([&] { cancel.emit(asio::cancellation_type::terminal); });
  ASSERT_EQ(change.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(change.get().first, asio::error::operation_aborted);
  leader.async_release(asio::use_future).get();
}

TEST(Election, AnObserveCancelledBeforeItsSubscriptionIsConfirmedLeavesNoWorkBehind) {
  // The observe gives up while its SUBSCRIBE is still unanswered (the connection is not even
  // up yet), and the manager goes: when the answer comes, nothing may keep reading, so
  // io_context::run() returns (as redis-lock observe's exit on SIGTERM depends on).
  auto cfg = shared_server_config();
  for (int round = 0; round < 5; ++round) {
    asio::io_context io;
    bool completed = false;
    {
      LockManager locks(io.get_executor(), cfg);
      Election election(locks, unique_name());
      asio::cancellation_signal cancel;
      // (Nobody leads: if the server is quick enough to answer within the polls, it
      // completes with "nobody" instead; then the answer came in time, also fine.)
      election.async_observe(
          1, asio::bind_cancellation_slot(
                 cancel.slot(), [&](error_code, std::optional<Leader>) { completed = true; }));
      io.poll();  // the observe subscribes: its SUBSCRIBE waits for the connection
      cancel.emit(asio::cancellation_type::terminal);
      io.poll();
    }
    const auto started = std::chrono::steady_clock::now();
    io.run_for(3s);
    EXPECT_TRUE(completed);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s)
        << "round " << round << ": work was left pending on the io_context";
  }
}

TEST(Election, AnObserverRefusedTheChannelFailsInsteadOfAskingForever) {
  // An ACL user that may read the keys but not subscribe to the election's channel: the
  // observe fails with the server's refusal (asking again gets the same answer), and leaves
  // no work behind.
  RedisServer server;  // its own: the ACL user is made there
  ASSERT_EQ(redis_command(server.port(), {"ACL", "SETUSER", "reader", "on", ">pw", "~*",
                                          "resetchannels", "+@all"}),
            "OK");
  ConnectionConfig cfg;
  cfg.port = server.port();
  cfg.username = "reader";
  cfg.password = "pw";
  asio::io_context io;
  std::optional<error_code> got;
  {
    LockManager locks(io.get_executor(), cfg);
    Election election(locks, unique_name());
    election.async_observe(1, [&](error_code ec, std::optional<Leader>) { got = ec; });
  }
  const auto started = std::chrono::steady_clock::now();
  io.run_for(5s);
  ASSERT_TRUE(got.has_value()) << "the observe never completed";
  EXPECT_EQ(*got, error::no_permission) << got->message();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s) << "work was left pending";
}

TEST(Election, BadInputIsRefusedBeforeAnythingIsSent) {
  ConnectionConfig nowhere;
  nowhere.port = free_port();  // nothing listens: a command sent would fail otherwise
  Background bg;
  LockManager locks(bg.io.get_executor(), nowhere);
  Election unnamed(locks, "");
  auto [ec1, g1] = outcome([&](auto h) { unnamed.async_campaign("v", {}, std::move(h)); });
  EXPECT_EQ(ec1, error::invalid_argument);
  Election election(locks, "e");
  auto [ec2, g2] =
      outcome([&](auto h) { election.async_campaign(std::string(1025, 'v'), {}, std::move(h)); });
  EXPECT_EQ(ec2, error::invalid_argument) << "a value over 1024 bytes";
  auto [ec3, g3] =
      outcome([&](auto h) { election.async_campaign("v", {.ttl = 0ms}, std::move(h)); });
  EXPECT_EQ(ec3, error::invalid_argument);

  auto redlock = ConnectionConfig::from_url(
      "redis+redlock://127.0.0.1:" + std::to_string(free_port()) +
      ",127.0.0.1:" + std::to_string(free_port()) + ",127.0.0.1:" + std::to_string(free_port()));
  ASSERT_TRUE(redlock);
  LockManager quorum(bg.io.get_executor(), *redlock);
  Election on_redlock(quorum, "e");
  auto [ec4, g4] = outcome([&](auto h) { on_redlock.async_campaign("v", {}, std::move(h)); });
  EXPECT_EQ(ec4, error::invalid_argument);
  auto [ec5, l5] =
      outcome<std::optional<Leader>>([&](auto h) { on_redlock.async_observe(7, std::move(h)); });
  EXPECT_EQ(ec5, error::invalid_argument);
  auto [ec6, i6] = outcome<LockInfo>([&](auto h) { quorum.async_inspect("r", std::move(h)); });
  EXPECT_EQ(ec6, error::invalid_argument);
}
