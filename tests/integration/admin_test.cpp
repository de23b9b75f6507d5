// SPDX-License-Identifier: MIT
// Introspection and administration: async_inspect (who holds a resource, for how long, with
// which fencing token, how many wait) and async_force_release (take it from a stuck holder,
// the next holder's token larger), for mutexes, semaphores and read-write locks; holder
// labels.
#include "live.hpp"

#include "background.hpp"
#include "lease_sets.hpp"
#include "redis_lock_scripts.hpp"

#include <redis_lock/election.hpp>

#include <boost/asio/use_future.hpp>

#include <fstream>
#include <future>
#include <iterator>
#include <optional>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

LockInfo inspect(LockManager& locks, const std::string& resource) {
  auto [ec, info] = outcome<LockInfo>([&](auto h) { locks.async_inspect(resource, std::move(h)); });
  EXPECT_FALSE(ec) << ec.message();
  return info;
}

bool force_release(LockManager& locks, const std::string& resource) {
  auto [ec, released] =
      outcome<bool>([&](auto h) { locks.async_force_release(resource, std::move(h)); });
  EXPECT_FALSE(ec) << ec.message();
  return released;
}

}  // namespace

TEST(Inspect, AHeldMutexShowsItsHolderTtlFencingTokenAndWaiters) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager holder(bg.io.get_executor(), cfg, {.holder_label = "web-3:4242"});
  LockManager other(bg.io.get_executor(), cfg);
  auto g = holder.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  auto waiter = other.async_acquire(resource, {.ttl = 5s, .wait = 10s}, asio::use_future);
  wait_until([&] { return inspect(other, resource).waiters == 1; }, 5s, "one waiter");

  const auto info = inspect(other, resource);
  EXPECT_TRUE(info.held);
  EXPECT_EQ(info.kind, LockInfo::Kind::mutex);
  EXPECT_EQ(info.holder, "web-3:4242");
  EXPECT_EQ(info.fencing_token, g.fencing_token());
  EXPECT_GT(info.ttl_left, 8s);
  EXPECT_LE(info.ttl_left, 10s);
  EXPECT_EQ(info.waiters, 1u);
  EXPECT_EQ(info.holders, 1u);

  // Handed to the waiter (which has no label): the record follows the lease.
  ASSERT_TRUE(g.async_release(asio::use_future).get());
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  auto next = waiter.get();
  ASSERT_TRUE(next);
  const auto after = inspect(holder, resource);
  EXPECT_TRUE(after.held);
  EXPECT_EQ(after.holder, "");
  EXPECT_EQ(after.fencing_token, next.fencing_token());
  EXPECT_EQ(after.waiters, 0u);
  EXPECT_GT(after.ttl_left, 3s);
  ASSERT_TRUE(next.async_release(asio::use_future).get());
  const auto free = inspect(holder, resource);
  EXPECT_FALSE(free.held);
  EXPECT_EQ(free.kind, LockInfo::Kind::none);
  EXPECT_EQ(free.fencing_token, 0u);
  EXPECT_EQ(free.ttl_left, 0ms);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", detail::make_keys("lock:", resource).info()}), "0")
      << "the record goes with the lease";
}

TEST(Inspect, RenewalsKeepTheRecordAsLongAsTheLease) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg, {.holder_label = "renewed"});
  auto g =
      locks.async_acquire(resource, {.ttl = 600ms, .auto_renew = true}, asio::use_future).get();
  ASSERT_TRUE(g);
  std::this_thread::sleep_for(1500ms);  // several ttls: the record lives only by the renewals
  const auto info = inspect(locks, resource);
  EXPECT_TRUE(info.held);
  EXPECT_EQ(info.holder, "renewed");
  EXPECT_EQ(info.fencing_token, g.fencing_token());
  g.async_release(asio::use_future).get();
}

TEST(Inspect, SemaphoresAndReadWriteLocksShowTheirHolders) {
  auto cfg = shared_server_config();
  const auto sem = unique_resource("sem");
  const auto rw = unique_resource("rw");
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto p1 = locks.async_acquire_permit(sem, 3, {.ttl = 10s}, asio::use_future).get();
  auto p2 = locks.async_acquire_permit(sem, 3, {.ttl = 5s}, asio::use_future).get();
  ASSERT_TRUE(p1 && p2);
  auto info = inspect(locks, sem);
  EXPECT_TRUE(info.held);
  EXPECT_EQ(info.kind, LockInfo::Kind::semaphore);
  EXPECT_EQ(info.limit, 3u);
  EXPECT_EQ(info.holders, 2u);
  EXPECT_GT(info.ttl_left, 8s) << "the longest hold's";
  EXPECT_EQ(info.fencing_token, 0u) << "a lease set's holds record no token";

  auto w = locks.async_acquire_exclusive(rw, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(w);
  info = inspect(locks, rw);
  EXPECT_EQ(info.kind, LockInfo::Kind::read_write);
  EXPECT_TRUE(info.exclusive);
  EXPECT_EQ(info.holders, 1u);
  ASSERT_TRUE(w.async_release(asio::use_future).get());
  auto r1 = locks.async_acquire_shared(rw, {.ttl = 10s}, asio::use_future).get();
  auto r2 = locks.async_acquire_shared(rw, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(r1 && r2);
  info = inspect(locks, rw);
  EXPECT_FALSE(info.exclusive);
  EXPECT_EQ(info.holders, 2u);
  for (auto* g : {&p1, &p2, &r1, &r2}) g->async_release(asio::use_future).get();
}

TEST(ForceRelease, AFreeResourceReturnsFalseAndNothingChanges) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  const auto fence = detail::make_keys("lock:", resource).fence();
  redis_command(cfg.port, {"SET", fence, "7"});
  EXPECT_FALSE(force_release(locks, resource));
  EXPECT_EQ(redis_command(cfg.port, {"GET", fence}), "7") << "no token was minted";
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
  redis_command(cfg.port, {"DEL", fence});
}

TEST(ForceRelease, EvictsTheHolderTheNextHolderHasALargerTokenAndTheGuardLearnsIt) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager stuck_mgr(bg.io.get_executor(), cfg), next_mgr(bg.io.get_executor(), cfg);
  auto stuck =
      stuck_mgr.async_acquire(resource, {.ttl = 900ms, .auto_renew = true}, asio::use_future).get();
  ASSERT_TRUE(stuck);
  std::promise<error_code> lost;
  bg.run([&] { stuck.async_wait_lost([&](error_code ec) { lost.set_value(ec); }); });
  auto waiter = next_mgr.async_acquire(resource, {.ttl = 5s, .wait = 10s}, asio::use_future);
  wait_until([&] { return inspect(next_mgr, resource).waiters == 1; }, 5s, "one waiter");

  EXPECT_TRUE(force_release(next_mgr, resource));
  ASSERT_EQ(waiter.wait_for(2s), std::future_status::ready) << "the waiter is served at once";
  auto next = waiter.get();
  ASSERT_TRUE(next);
  EXPECT_GT(next.fencing_token(), stuck.fencing_token());
  auto lost_ec = lost.get_future();
  ASSERT_EQ(lost_ec.wait_for(2s), std::future_status::ready) << "at its next renewal";
  EXPECT_EQ(lost_ec.get(), error::lock_lost);
  EXPECT_TRUE(stuck.lost());
  EXPECT_FALSE(stuck.async_release(asio::use_future).get()) << "no longer its lease";
  EXPECT_EQ(inspect(next_mgr, resource).fencing_token, next.fencing_token());

  // With nobody waiting, the lease and its record are gone.
  EXPECT_TRUE(force_release(stuck_mgr, resource));
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
  EXPECT_FALSE(inspect(stuck_mgr, resource).held);
  EXPECT_FALSE(next.async_release(asio::use_future).get());
}

TEST(ForceRelease, ALeaseSetLosesEveryHoldAndItsWaitersGetIn) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg), other(bg.io.get_executor(), cfg);
  auto p1 = locks.async_acquire_permit(resource, 2, {.ttl = 30s}, asio::use_future).get();
  auto p2 = locks.async_acquire_permit(resource, 2, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(p1 && p2);
  auto waiter = other.async_acquire_permit(resource, 2, {.ttl = 5s, .wait = 10s}, asio::use_future);
  wait_until([&] { return queued(cfg.port, resource) == 1; }, 5s, "one waiter");
  EXPECT_TRUE(force_release(other, resource));
  ASSERT_EQ(waiter.wait_for(2s), std::future_status::ready);
  auto next = waiter.get();
  ASSERT_TRUE(next);
  EXPECT_GT(next.fencing_token(), std::max(p1.fencing_token(), p2.fencing_token()));
  EXPECT_EQ(holders(cfg.port, resource), 1);
  EXPECT_FALSE(p1.async_release(asio::use_future).get());
  EXPECT_FALSE(p2.async_release(asio::use_future).get());
  ASSERT_TRUE(next.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(HolderLabel, ALabelThatCouldNotBeStoredIsRefusedBeforeAnythingIsSent) {
  ConnectionConfig nowhere;
  nowhere.port = free_port();
  Background bg;
  for (const std::string& label : {std::string(129, 'x'), std::string("two\nlines")}) {
    LockManager locks(bg.io.get_executor(), nowhere, {.holder_label = label});
    auto [ec, g] = outcome([&](auto h) { locks.async_acquire("r", {}, std::move(h)); });
    EXPECT_EQ(ec, error::invalid_argument) << label;
    auto [ec2, info] = outcome<LockInfo>([&](auto h) { locks.async_inspect("r", std::move(h)); });
    EXPECT_EQ(ec2, error::invalid_argument);
  }
  LockManager locks(bg.io.get_executor(), nowhere);
  auto [ec, released] = outcome<bool>([&](auto h) { locks.async_force_release("", std::move(h)); });
  EXPECT_EQ(ec, error::invalid_argument) << "an empty resource";
}

namespace {

/// Counts the touches the observer hears of, and which succeeded.
struct TouchCount : Observer {
  std::atomic<int> touched{0}, not_touched{0};
  void on_lease(const LeaseEvent& e) noexcept override {
    if (e.command != LeaseCommand::touch) return;
    ++(e.succeeded ? touched : not_touched);
  }
};

bool touch(LockGuard& g, std::string_view label) {
  auto [ec, touched] = outcome<bool>([&](auto h) { g.async_touch(label, std::move(h)); });
  EXPECT_FALSE(ec) << ec.message();
  return touched;
}

}  // namespace

TEST(HolderLabel, ATouchReplacesTheLabelKeepingTheTtlTheFencingTokenAndTheWaiters) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  auto count = std::make_shared<TouchCount>();
  Background bg;
  LockManager holder(bg.io.get_executor(), cfg, {.holder_label = "job:start", .observer = count});
  LockManager other(bg.io.get_executor(), cfg);
  auto g = holder.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  ASSERT_TRUE(touch(g, "job:step @2"));  // ('@' as a label's byte: the token is after the last)
  auto info = inspect(other, resource);
  EXPECT_EQ(info.holder, "job:step @2");
  EXPECT_EQ(info.fencing_token, g.fencing_token());
  EXPECT_GT(info.ttl_left, 8s);
  EXPECT_LE(info.ttl_left, 10s);
  // A waiter behind it: its mark stays, so the release still hands the lease on.
  auto waiter = other.async_acquire(resource, {.ttl = 5s, .wait = 10s}, asio::use_future);
  wait_until([&] { return inspect(other, resource).waiters == 1; }, 5s, "one waiter");
  ASSERT_TRUE(touch(g, "job:step 3"));
  const auto lease = redis_command(cfg.port, {"GET", keys.lease()});
  EXPECT_EQ(lease, g.token() + " job:step 3@" + std::to_string(g.fencing_token()) + "+");
  EXPECT_EQ(inspect(other, resource).holder, "job:step 3");
  EXPECT_GT(std::stoll(redis_command(cfg.port, {"PTTL", keys.lease()})), 8000);
  ASSERT_TRUE(touch(g, ""));  // no label at all
  EXPECT_EQ(inspect(other, resource).holder, "");
  EXPECT_TRUE(g.async_release(asio::use_future).get());
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  auto next = waiter.get();
  ASSERT_TRUE(next);
  EXPECT_GT(next.fencing_token(), g.fencing_token());
  EXPECT_EQ(count->touched.load(), 3);
  EXPECT_EQ(count->not_touched.load(), 0);
}

TEST(HolderLabel, ATouchOfALeaseNoLongerOursChangesNothingAndTheGuardIsLost) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager first(bg.io.get_executor(), cfg, {.holder_label = "first"});
  LockManager second(bg.io.get_executor(), cfg, {.holder_label = "second"});
  auto g = first.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  ASSERT_TRUE(force_release(second, resource));
  auto now_theirs = second.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(now_theirs);
  EXPECT_FALSE(touch(g, "still mine?"));
  EXPECT_TRUE(g.lost());
  EXPECT_EQ(inspect(second, resource).holder, "second");
  LockGuard empty;
  EXPECT_FALSE(touch(empty, "nothing held"));
}

TEST(HolderLabel, ALeadersTouchKeepsTheValueItProclaimed) {
  auto cfg = shared_server_config();
  const auto name = unique_resource("touch");
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg, {.holder_label = "node-a"});
  Election election(locks, name);
  auto leader = election.async_campaign("10.0.0.1:80", {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(leader);
  ASSERT_TRUE(touch(leader, "node-a, draining"));
  EXPECT_EQ(inspect(locks, "election:" + name).holder, "node-a, draining");
  const auto seen = election.async_leader(asio::use_future).get();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->value, "10.0.0.1:80");
  EXPECT_EQ(seen->term, leader.fencing_token());
  EXPECT_TRUE(leader.async_release(asio::use_future).get());
}

TEST(HolderLabel, ATouchThatCannotBeRecordedIsRefusedBeforeAnythingIsSent) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto sem = unique_resource("sem");
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg, {.holder_label = "kept"});
  auto g = locks.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  auto permit = locks.async_acquire_permit(sem, 2, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(permit);
  for (const std::string& label : {std::string(129, 'x'), std::string("two\nlines")}) {
    auto [ec, touched] = outcome<bool>([&](auto h) { g.async_touch(label, std::move(h)); });
    EXPECT_EQ(ec, error::invalid_argument);
    EXPECT_FALSE(touched);
  }
  auto [ec, touched] = outcome<bool>([&](auto h) { permit.async_touch("x", std::move(h)); });
  EXPECT_EQ(ec, error::invalid_argument) << "a permit records no label";
  EXPECT_FALSE(touched);
  EXPECT_EQ(inspect(locks, resource).holder, "kept");
  EXPECT_FALSE(g.lost());
}

TEST(HolderLabel, ALabelledWaiterThatGivesUpLeavesTheQueueAndTheNextWaiterIsServedAtOnce) {
  // A waiter's label travels in its queue member ('<token><suffix> <label>'): giving up must
  // remove that whole member, or the next release hands the lease to the departed waiter
  // and the one behind it waits a whole ttl.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto queue = detail::make_keys("lock:", resource).queue();
  Background bg;
  LockManager holder(bg.io.get_executor(), cfg);
  LockManager labelled(bg.io.get_executor(), cfg, {.holder_label = "web 1:7 (canary)"});
  LockManager other(bg.io.get_executor(), cfg);
  auto g = holder.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  auto quitter = labelled.async_acquire(resource, {.ttl = 10s, .wait = 1500ms}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", queue}) == "1";
      },
      5s, "the labelled waiter queued");
  auto next = other.async_acquire(resource, {.ttl = 10s, .wait = 20s}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", queue}) == "2";
      },
      5s, "the second waiter queued");
  ASSERT_EQ(quitter.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(quitter.get()) << "its wait ran out";
  // Its give-back is one round trip; its place would be dropped as dead only 1.2 s later.
  const auto left_by = std::chrono::steady_clock::now() + 300ms;
  while (redis_command(cfg.port, {"ZCARD", queue}) != "1" &&
         std::chrono::steady_clock::now() < left_by) {
    std::this_thread::sleep_for(5ms);  // polling Redis: there is no signal for "left"
  }
  EXPECT_EQ(redis_command(cfg.port, {"ZCARD", queue}), "1") << "the labelled waiter stayed queued";
  const auto released = std::chrono::steady_clock::now();
  ASSERT_TRUE(g.async_release(asio::use_future).get());
  ASSERT_EQ(next.wait_for(5s), std::future_status::ready) << "handed to the departed waiter";
  auto served = next.get();
  EXPECT_TRUE(served);
  EXPECT_LT(std::chrono::steady_clock::now() - released, 1s);
  ASSERT_TRUE(served.async_release(asio::use_future).get());
}

namespace {

/// A resource whose lease is in the same hash slot as `resource`'s (so the same fencing
/// counter mints for both).
std::string same_slot_as(const std::string& resource) {
  const auto slot = detail::key_slot(lease_key(resource));
  for (int i = 0;; ++i) {
    auto other = resource + ":neighbour:" + std::to_string(i);
    if (detail::key_slot(lease_key(other)) == slot) return other;
  }
}

/// A script of an older build, kept in tests/integration/old_scripts ("" when missing).
std::string old_script(const std::string& name) {
  std::ifstream in(std::string(REDIS_LOCK_OLD_SCRIPTS_DIR) + "/" + name);
  EXPECT_TRUE(in) << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// acquire.lua (or `body`, an older build's) sent by hand with its five keys: token `token`,
/// ttl `ttl_ms`, and `how`: '<mode><place ms> <member suffix>', one word for an older build's
/// (its ARGV[3]), three for today's (mode, place, suffix).
std::string eval_acquire(std::uint16_t port, const detail::ResourceKeys& keys,
                         const std::string& token, const std::string& ttl_ms,
                         const std::string& how,
                         const std::string& body = std::string(detail::acquire_script.body)) {
  std::vector<std::string> command{
      "EVAL",      body,  "5",   keys.lease(), keys.fence(), keys.queue(), keys.queue_expiry(),
      keys.info(), token, ttl_ms};
  if (body == detail::acquire_script.body) {
    const auto space = how.find(' ');
    command.insert(command.end(),
                   {how.substr(0, 1), how.substr(1, space - 1), how.substr(space + 1)});
  } else {
    command.push_back(how);
  }
  return redis_command(port, command);
}

/// acquire.lua (or `body`) sent by hand for a waiter of token `token` ('1': queue if held, a
/// place of 5 s) whose member suffix is `suffix` (manager id, ttl, and optionally ' ' and a
/// label).
std::string attempt(std::uint16_t port, const detail::ResourceKeys& keys, const std::string& token,
                    const std::string& suffix,
                    const std::string& body = std::string(detail::acquire_script.body)) {
  return eval_acquire(port, keys, token, "5000", "15000 " + suffix, body);
}

/// An older build's release.lua (`body`, five keys) sent by hand for token `token` with
/// member suffix `suffix`, publishing on the default prefix's channels.
std::string eval_old_release(std::uint16_t port, const detail::ResourceKeys& keys,
                             const std::string& body, const std::string& token,
                             const std::string& suffix) {
  return redis_command(port, {"EVAL", body, "5", keys.lease(), keys.queue(), keys.queue_expiry(),
                              keys.fence(), keys.info(), token, suffix, "Plock:notify:"});
}

}  // namespace

TEST(HolderLabel, AWaiterClaimingTheLeaseHandedToItKeepsTheTokenTheHandOffMinted) {
  // A waiter's attempt may reach the server just after a release handed it the lease (the
  // release's message on its way): acquire.lua then claims what is already its own. It
  // must report the token the hand-off minted and recorded (an election announced it as the
  // term), not mint a second one: one holding, one token. Also when another resource of the
  // same slot minted from the same counter in between (a claim is normal with min_replicas
  // and short ttls). The waiter is played here by acquire.lua sent by hand, so that its
  // claim surely comes after the hand-off. A waiter of this build (its member has an 'f'
  // after the manager id) is handed the lease with the record folded into it; one of the
  // build before (digits there) with the record beside it, which its claim folds.
  // Today's waiter queues with its secret ('g' and 32 hex digits); one of b34e159 with an
  // 'f'; one of the build before that with digits.
  const std::string secret = "00112233445566778899aabbccddeeff";
  for (const std::string& letter : {"g" + secret, std::string("f"), std::string()}) {
    const bool todays = !letter.empty();
    SCOPED_TRACE("member letter '" + letter + "'");
    auto cfg = shared_server_config();
    const auto resource = unique_resource();
    const auto keys = detail::make_keys("lock:", resource);
    Background bg;
    LockManager holder(bg.io.get_executor(), cfg, {.holder_label = "a"});
    auto g = holder.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
    ASSERT_TRUE(g);
    const std::string token(32, 'b');
    const std::string suffix = "0123456789abcdef" + letter + "5000 waiter-b";
    // The waiter of b34e159 ('f') runs that build's acquire.lua; the others today's (the
    // build before 89ab635 folds no record, which its own test covers).
    const std::string body = letter == "f" ? old_script("acquire_b34e159.lua")
                                           : std::string(detail::acquire_script.body);
    ASSERT_EQ(attempt(cfg.port, keys, token, suffix, body).rfind("0 ", 0), 0u) << "queued";
    ASSERT_TRUE(g.async_release(asio::use_future).get());  // hands the lease to the waiter
    std::string handed;
    if (todays) {
      const auto lease = redis_command(cfg.port, {"GET", keys.lease()});
      handed = lease.substr(lease.rfind('@') + 1);
      EXPECT_EQ(lease, token + " waiter-b@" + handed) << "the record folded into the lease";
      EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.info()}), "0");
    } else {
      const auto record = redis_command(cfg.port, {"GET", keys.info()});
      handed = record.substr(0, record.find_first_of("@ "));
      EXPECT_EQ(record, handed + "@" + token + " waiter-b") << "the record names the lease's token";
    }
    EXPECT_GT(std::stoull(handed), g.fencing_token());
    // Another resource of the slot mints from the same counter before the claim.
    auto neighbour =
        holder.async_acquire(same_slot_as(resource), {.ttl = 10s}, asio::use_future).get();
    ASSERT_TRUE(neighbour);
    ASSERT_GT(neighbour.fencing_token(), std::stoull(handed));
    EXPECT_EQ(attempt(cfg.port, keys, token, suffix, body), "1 " + handed)
        << "the claim minted another token";
    // The claim folds the record into the lease: one key for the holding from now on.
    EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), token + " waiter-b@" + handed);
    EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.info()}), "0");
    const auto left = std::stoll(redis_command(cfg.port, {"PTTL", keys.lease()}));
    EXPECT_GT(left, 4000) << "the claimed lease lasts the waiter's ttl";
    // Sent again (a reply lost on the way), the attempt reports the same token.
    EXPECT_EQ(attempt(cfg.port, keys, token, suffix, body), "1 " + handed);
    // Inspection shows the holder's label and token, not the lease's secret token.
    const auto info = inspect(holder, resource);
    EXPECT_EQ(info.holder, "waiter-b");
    EXPECT_EQ(info.fencing_token, std::stoull(handed));
    EXPECT_TRUE(neighbour.async_release(asio::use_future).get());
    redis_command(cfg.port, {"DEL", keys.lease(), keys.info()});
  }
}

TEST(HolderLabel, AnUncontendedHoldingWritesOneKey) {
  // The holder's record is folded into the lease's own value ('<token> <label>@<fencing
  // token>'): an uncontended acquire writes the lease and the fencing counter, its release
  // deletes the lease, and no info key is written or read. Any printable label reads back
  // whole, '@' and digits included.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  Background bg;
  const std::string label = "web-1 @7@9";
  LockManager locks(bg.io.get_executor(), cfg, {.holder_label = label});
  auto g = locks.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  const auto folded = g.token() + " " + label + "@" + std::to_string(g.fencing_token());
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), folded);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.info()}), "0");
  auto info = inspect(locks, resource);
  EXPECT_EQ(info.holder, label);
  EXPECT_EQ(info.fencing_token, g.fencing_token());
  ASSERT_TRUE(g.async_extend(20s, asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), folded) << "the extension kept it";
  EXPECT_GT(std::stoll(redis_command(cfg.port, {"PTTL", keys.lease()})), 15000);
  ASSERT_TRUE(g.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.lease(), keys.info()}), "0");
}

TEST(HolderLabel, APreviousBuildsWaiterIsHandedTodaysLeaseInTheFormItClaims) {
  // Rolling upgrade (docs/design-notes.md): a waiter of the build before the record was
  // folded into the lease (89ab635, its scripts run by hand here) queues behind today's
  // holder. It marks the folded lease its way (a '+' after the whole value); today's release
  // sees the mark and hands the lease on with the record beside it, the form that build
  // claims, minting the waiter's token once.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  Background bg;
  LockManager holder(bg.io.get_executor(), cfg, {.holder_label = "new"});
  auto g = holder.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  const auto old_acquire = old_script("acquire_89ab635.lua");
  const auto old_release = old_script("release_89ab635.lua");
  ASSERT_FALSE(old_acquire.empty() || old_release.empty());
  const std::string token(32, 'd');
  const std::string suffix = "0123456789abcdef5000 old-waiter";
  const auto old_attempt = [&] { return attempt(cfg.port, keys, token, suffix, old_acquire); };
  ASSERT_EQ(old_attempt().rfind("0 ", 0), 0u) << "queued";
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}),
            g.token() + " new@" + std::to_string(g.fencing_token()) + "+");
  ASSERT_TRUE(g.async_release(asio::use_future).get());  // hands the lease to the old waiter
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), token);
  const auto record = redis_command(cfg.port, {"GET", keys.info()});
  const auto handed = record.substr(0, record.find('@'));
  EXPECT_EQ(record, handed + "@" + token + " old-waiter");
  EXPECT_GT(std::stoull(handed), g.fencing_token());
  EXPECT_EQ(old_attempt(), "1 " + handed) << "the old waiter's claim minted another token";
  EXPECT_EQ(inspect(holder, resource).holder, "old-waiter") << "today's inspect reads the record";
  EXPECT_EQ(eval_old_release(cfg.port, keys, old_release, token, suffix.substr(0, 20)), "1");
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.lease(), keys.info()}), "0");
}

namespace {

/// HolderLabel.TodaysWaiterClaimsALeaseAPreviousBuildHandedIt for the scripts of `build`.
void TodaysWaiterClaimsALeaseThisBuildHandedIt(const std::string& build) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  const auto old_acquire = old_script("acquire_" + build + ".lua");
  const auto old_release = old_script("release_" + build + ".lua");
  ASSERT_FALSE(old_acquire.empty() || old_release.empty());
  const std::string old_token(32, 'e');
  const auto taken = eval_acquire(cfg.port, keys, old_token, "10000",
                                  "05000 0123456789abcdef10000 old-holder", old_acquire);
  ASSERT_EQ(taken.rfind("1 ", 0), 0u) << taken;
  Background bg;
  LockManager waiter(bg.io.get_executor(), cfg, {.holder_label = "new-waiter"});
  auto fut = waiter.async_acquire(resource, {.ttl = 5s, .wait = 10s}, asio::use_future);
  wait_until(
      [&] {
        return redis_command(cfg.port, {"ZCARD", keys.queue()}) == "1";
      },
      5s, "today's waiter to queue");
  // Marked: the bare token (89ab635), or the lease with its record folded in (b34e159).
  const auto marked = redis_command(cfg.port, {"GET", keys.lease()});
  EXPECT_EQ(marked.substr(0, 32), old_token);
  EXPECT_EQ(marked.back(), '+') << marked;
  // The waiter's io thread is held while the release hands the lease over, so that the
  // record is read before the claim folds it.
  std::promise<void> parked, resume;
  asio::post(bg.io, [&] {
    parked.set_value();
    resume.get_future().wait();
  });
  parked.get_future().wait();
  const auto released =
      eval_old_release(cfg.port, keys, old_release, old_token, "0123456789abcdef10000 old-holder");
  const auto handed_lease = redis_command(cfg.port, {"GET", keys.lease()});
  const auto record = redis_command(cfg.port, {"EXISTS", keys.info()});
  const auto pttl = std::stoll(redis_command(cfg.port, {"PTTL", keys.lease()}));
  resume.set_value();
  ASSERT_EQ(released, "1");
  EXPECT_EQ(handed_lease.size(), 32u) << "the bare token: " << handed_lease;
  EXPECT_EQ(record, "0") << "no record for a member that build cannot read";
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 600) << "the claim window of a client older than that build";
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready) << "the hand-off did not reach it";
  auto g = fut.get();
  ASSERT_TRUE(g);
  EXPECT_EQ(g.token(), handed_lease);
  EXPECT_GT(g.fencing_token(), std::stoull(taken.substr(2)));
  EXPECT_EQ(redis_command(cfg.port, {"GET", keys.lease()}),
            g.token() + " new-waiter@" + std::to_string(g.fencing_token()));
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.info()}), "0");
  EXPECT_EQ(inspect(waiter, resource).holder, "new-waiter");
  ASSERT_TRUE(g.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", keys.lease(), keys.info()}), "0");
}

}  // namespace

TEST(HolderLabel, TodaysWaiterClaimsALeaseAPreviousBuildHandedIt) {
  // The other way round: the holder runs a previous build's scripts (by hand), today's
  // waiter queues behind it (marking the lease as that build does), and that build's release
  // hands it the lease. That release cannot read today's member (a 'g' and the waiter's
  // secret where it expects 'f' or the ttl's digits: docs/design-notes.md), so it hands the
  // lease on as to a client older than itself: the bare token for 600 ms, no record, the
  // token alone as message (unsigned: no grant). The waiter claims it at once and mints its
  // own fencing token, above the previous holder's, with its record folded into its lease.
  // Two builds back: 89ab635 (before the record was folded) and b34e159 (the build before
  // the signed hand-off, which knows 'f' only).
  for (const char* build : {"89ab635", "b34e159"}) {
    SCOPED_TRACE(std::string("the holder of build ") + build);
    TodaysWaiterClaimsALeaseThisBuildHandedIt(build);
  }
}

TEST(HolderLabel, AClaimNeverReusesATokenRecordedForAnotherLease) {
  // Mixed versions: a client of the build before holder records (commit ec7000c) releases a
  // lease that today's release handed it, and hands it to today's waiter without minting (a
  // member with a label is one it cannot read: the waiter claims within 600 ms). The record
  // left behind is the previous holder's; the claim must not take its token as its own: two
  // holders in a row with one token would let the first's late write through. Tokens of
  // successive holders strictly increase.
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  const auto keys = detail::make_keys("lock:", resource);
  Background bg;
  LockManager a(bg.io.get_executor(), cfg, {.holder_label = "a"});
  auto g = a.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(g);
  const std::string old_token(32, 'b'), new_token(32, 'c');
  // The old client's waiter (its member has no label) and today's (with one) queue.
  ASSERT_EQ(attempt(cfg.port, keys, old_token, "0123456789abcdef10000").rfind("0 ", 0), 0u);
  ASSERT_EQ(attempt(cfg.port, keys, new_token, "fedcba987654321010000 c").rfind("0 ", 0), 0u);
  ASSERT_TRUE(g.async_release(asio::use_future).get());  // today's release hands it to b
  const auto record = redis_command(cfg.port, {"GET", keys.info()});
  const auto b_fence = std::stoull(record.substr(0, record.find_first_of("@ ")));
  ASSERT_GT(b_fence, g.fencing_token());
  ASSERT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), old_token + "+");
  // b releases with its own build's release.lua: the lease goes to c, nothing minted.
  const auto old_release = old_script("release_ec7000c.lua");
  ASSERT_FALSE(old_release.empty());
  ASSERT_EQ(redis_command(cfg.port, {"EVAL", old_release, "4", keys.lease(), keys.queue(),
                                     keys.queue_expiry(), keys.fence(), old_token,
                                     "0123456789abcdef10000 Plock:notify:"}),
            "1");
  ASSERT_EQ(redis_command(cfg.port, {"GET", keys.lease()}), new_token);
  // Until c claims, the record beside the lease is b's: inspect does not show it as c's.
  const auto unclaimed = inspect(a, resource);
  EXPECT_TRUE(unclaimed.held);
  EXPECT_EQ(unclaimed.fencing_token, 0u) << "the previous holder's token shown as the holder's";
  EXPECT_EQ(unclaimed.holder, "") << "the previous holder's label shown as the holder's";
  // c claims: a token of its own, larger than b's.
  const auto claimed = attempt(cfg.port, keys, new_token, "fedcba987654321010000 c");
  ASSERT_EQ(claimed.rfind("1 ", 0), 0u) << claimed;
  EXPECT_GT(std::stoull(claimed.substr(2)), b_fence) << "c got b's token";
  EXPECT_EQ(inspect(a, resource).fencing_token, std::stoull(claimed.substr(2)));
  redis_command(cfg.port, {"DEL", keys.lease(), keys.info(), keys.queue(), keys.queue_expiry()});
}
