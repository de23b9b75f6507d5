// SPDX-License-Identifier: MIT
// The renewal watchdog without a server or an engine: a RenewalHost of the test's own answers
// each renewal as the test says (confirmed, refused, an error, nothing), on a real timer.
// What the watchdog then does with the lease is what a guard sees: renewed, lost, its
// cancellation signal and its async_wait_lost.
#include "renewal.hpp"
#include "reply_builders.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;
using redis_lock::error;
using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;

namespace {

struct Heard final : redis_lock::Observer {
  std::vector<bool> renewals;  // each renewal event's `succeeded`
  int lost = 0;
  void on_lease(const redis_lock::LeaseEvent& e) noexcept override {
    if (e.command == redis_lock::LeaseCommand::renewal) renewals.push_back(e.succeeded);
  }
  void on_lost(std::string_view) noexcept override { ++lost; }
};

/// Answers renewals as `answers` says, one per renewal (the last one from then on).
class Host final : public RenewalHost, public std::enable_shared_from_this<Host> {
 public:
  enum class Answer { confirm, refuse, fail, silence };

  explicit Host(asio::io_context& io)
      : strand_(asio::make_strand(io.get_executor())), executor_(io.get_executor()) {}

  std::vector<Answer> answers{Answer::confirm};
  std::vector<Clock::time_point> sent;
  int holds_lost = 0;
  mutable Heard heard;
  Watchdog watchdog{*this};

  const Strand& timer_strand() const noexcept override { return strand_; }
  std::weak_ptr<void> lifetime() noexcept override { return weak_from_this(); }
  void send_renewal(const std::shared_ptr<LeaseState>& lease, Watchdog& back,
                    Clock::time_point at) override {
    const auto answer = answers[std::min(sent.size(), answers.size() - 1)];
    sent.push_back(at);
    if (answer == Answer::silence) return;
    asio::post(strand_, [lease, &back, at, answer] {
      switch (answer) {
        case Answer::confirm:
          return back.renewed(lease, at, {}, redis_lock::test::integer(1), {});
        case Answer::refuse:
          return back.renewed(lease, at, {}, redis_lock::test::integer(0), {});
        case Answer::fail:
          return back.renewed(lease, at, error::connection_lost, {}, {});
        case Answer::silence:
          break;
      }
    });
  }
  redis_lock::Observer* renewal_observer() const noexcept override { return &heard; }
  void hold_lost(const LeaseState&) noexcept override { ++holds_lost; }
  const asio::any_io_executor& waiter_executor() const noexcept override { return executor_; }

 private:
  Strand strand_;
  asio::any_io_executor executor_;
};

/// An auto-renewed lease of `ttl`, renewed every `every`, confirmed now, its hold reported,
/// with a wait_lost that records how it ended (and stops `io` if `stop`).
struct Watched {
  std::shared_ptr<LeaseState> lease = std::make_shared<LeaseState>();
  std::optional<error_code> wait_ended;
  Clock::time_point ended_at{};
  bool signalled = false;

  Watched(asio::io_context& io, std::chrono::milliseconds ttl, std::chrono::milliseconds every,
          bool stop = true) {
    lease->resource = "r";
    lease->ttl = ttl;
    lease->renew_every = every;
    lease->auto_renew = true;
    lease->confirm(Clock::now(), ttl);
    mark_held(*lease, Clock::now());
    lease->lost_waiter.emplace(
        asio::bind_executor(io.get_executor(), [this, &io, stop](error_code ec) {
          wait_ended = ec;
          ended_at = Clock::now();
          if (stop) io.stop();
        }));
    lease->signal.slot().assign([this](asio::cancellation_type) { signalled = true; });
  }
};

void watch(Host& host, const std::shared_ptr<LeaseState>& lease) {
  asio::post(host.timer_strand(), [&host, lease] { host.watchdog.watch(lease); });
}

}  // namespace

TEST(Watchdog, RenewsEachIntervalWhileTheRenewalsAreConfirmed) {
  asio::io_context io;
  auto host = std::make_shared<Host>(io);
  Watched w(io, 3000ms, 50ms);
  const auto first_validity = w.lease->valid_until();
  watch(*host, w.lease);
  // Until the fifth renewal is sent (a pause of the machine up to about 3 s loses nothing).
  const auto deadline = Clock::now() + 10s;
  while (host->sent.size() < 5 && Clock::now() < deadline && !w.wait_ended) {
    io.run_for(20ms);
  }
  ASSERT_GE(host->sent.size(), 5u);
  EXPECT_FALSE(w.wait_ended) << "a confirmed lease is not lost";
  EXPECT_FALSE(w.lease->lost.load());
  EXPECT_FALSE(w.signalled);
  EXPECT_GT(w.lease->valid_until(), first_validity) << "each confirmation moves the validity";
  for (std::size_t i = 1; i < host->sent.size(); ++i) {
    // One renewal interval apart at least (on the 25 ms grid, rounded down, from the send).
    EXPECT_GE(host->sent[i] - host->sent[i - 1], 25ms) << i;
  }
  EXPECT_GE(host->heard.renewals.size(), 4u);
  for (const bool ok : host->heard.renewals) EXPECT_TRUE(ok);
  EXPECT_EQ(host->heard.lost, 0);
}

TEST(Watchdog, ARefusedRenewalLosesTheLeaseAndTellsTheGuardTheObserverAndTheWaiterOnce) {
  asio::io_context io;
  auto host = std::make_shared<Host>(io);
  host->answers = {Host::Answer::confirm, Host::Answer::refuse};
  Watched w(io, 5000ms, 25ms, false);
  watch(*host, w.lease);
  const auto deadline = Clock::now() + 10s;
  while (!w.wait_ended && Clock::now() < deadline) io.run_for(10ms);
  ASSERT_TRUE(w.wait_ended) << "the lost waiter was never told";
  EXPECT_EQ(*w.wait_ended, error::lock_lost);
  io.run_for(300ms);  // twelve renewal intervals more: a lease still scheduled would be sent
  EXPECT_EQ(host->sent.size(), 2u) << "nothing is sent for a lost lease";
  EXPECT_TRUE(w.lease->lost.load());
  EXPECT_TRUE(w.signalled) << "the guard's cancellation signal";
  EXPECT_EQ(host->heard.lost, 1);
  EXPECT_EQ(host->holds_lost, 1);
  EXPECT_LT(w.ended_at, w.lease->valid_until()) << "told at the refusal, not at the validity";
  EXPECT_EQ(host->heard.renewals, (std::vector<bool>{true, false}));
}

TEST(Watchdog, ALeaseWhoseRenewalsGoUnansweredIsLostAtItsValidity) {
  asio::io_context io;
  auto host = std::make_shared<Host>(io);
  host->answers = {Host::Answer::silence};
  Watched w(io, 2000ms, 50ms);
  watch(*host, w.lease);
  io.run_for(20s);
  ASSERT_TRUE(w.wait_ended) << "the lost waiter was never told";
  EXPECT_EQ(*w.wait_ended, error::lock_lost);
  EXPECT_GE(w.ended_at, w.lease->valid_until()) << "not before its validity passed";
  EXPECT_EQ(host->sent.size(), 1u) << "one renewal in flight at a time";
  EXPECT_EQ(host->heard.lost, 1);
  EXPECT_EQ(host->holds_lost, 1);
}

TEST(Watchdog, AFailedRenewalIsTriedAgainSoonWhileTheLeaseMayStillBeOurs) {
  asio::io_context io;
  auto host = std::make_shared<Host>(io);
  host->answers = {Host::Answer::fail, Host::Answer::fail, Host::Answer::confirm};
  // Renewed every 2 s; an unknown answer is tried again after a quarter of that.
  Watched w(io, 30000ms, 2000ms);
  watch(*host, w.lease);
  const auto deadline = Clock::now() + 20s;
  while (host->sent.size() < 3 && Clock::now() < deadline && !w.wait_ended) io.run_for(10ms);
  ASSERT_EQ(host->sent.size(), 3u);
  EXPECT_FALSE(w.wait_ended);
  EXPECT_LT(host->sent[1] - host->sent[0], 2000ms) << "the retry comes before the interval";
  EXPECT_LT(host->sent[2] - host->sent[1], 2000ms);
  EXPECT_GE(host->sent[1] - host->sent[0], 500ms) << "but not at once";
}

TEST(Watchdog, AnUnwatchedLeaseIsNotRenewedAndLeavesNoTimer) {
  asio::io_context io;
  auto host = std::make_shared<Host>(io);
  // Due in 8 s: a timer left armed would keep the context running past the bound below.
  Watched w(io, 30000ms, 8000ms);
  asio::post(host->timer_strand(), [&] {
    host->watchdog.watch(w.lease);
    host->watchdog.unwatch(*w.lease);
  });
  const auto start = Clock::now();
  io.run_for(10s);  // returns once nothing is left to do
  EXPECT_LT(Clock::now() - start, 5s) << "an idle watchdog holds no timer";
  EXPECT_TRUE(host->sent.empty());
  EXPECT_FALSE(w.wait_ended);
}
