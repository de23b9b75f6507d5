// SPDX-License-Identifier: MIT
// Layer 4 (engine): Election, and its observers. A candidate is an acquire of the election's
// lease (LeaseKind::leader) whose scripts announce each change of leader on the election's
// channel: '<term> <ttl ms> <label>\n<value>' when a leader takes the lease or renews it,
// '- <term>' when it ends with nobody after it (shared.lua's record and ended). An observer
// listens there and reads the state (inspect.lua) only when it subscribes and when the
// leader's lease runs out unrenewed.
#include <redis_lock/election.hpp>

#include "admin.hpp"
#include "completion.hpp"
#include "lock_service.hpp"
#include "waiters.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <charconv>

namespace redis_lock {

namespace asio = boost::asio;
using boost::system::error_code;

Election::Election(LockManager& locks, std::string name)
    : service_(locks.service_),
      executor_(locks.executor_),
      context_alive_(locks.context_alive_),
      name_(std::move(name)),
      resource_(name_.empty() ? std::string() : "election:" + name_),
      ended_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

void Election::campaign_impl(std::shared_ptr<detail::LockService> service, std::string resource,
                             std::string value, LockOptions options,
                             detail::AcquireHandler handler) {
  service->campaign(std::move(resource), std::move(value), options, std::move(handler));
}

void Election::observe_impl(std::shared_ptr<detail::LockService> service, std::string resource,
                            bool wait, std::uint64_t after_term, detail::EndedTerm ended,
                            detail::LeaderHandler handler) {
  service->observe(std::move(resource), wait, after_term, std::move(ended), std::move(handler));
}

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// An announcement: a leader ('<term> <ttl ms> <data>') or an end ('- <term>').
struct Announcement {
  bool ended = false;
  std::uint64_t term = 0;
  milliseconds ttl{0};
  std::string_view value;  // after the label's newline
};

std::optional<Announcement> read_announcement(std::string_view message) {
  Announcement a;
  if (message.starts_with("- ")) {
    a.ended = true;
    message.remove_prefix(2);
    const auto read = std::from_chars(message.data(), message.data() + message.size(), a.term);
    if (read.ec != std::errc{}) return std::nullopt;
    return a;
  }
  const char* p = message.data();
  const char* const end = p + message.size();
  auto read = std::from_chars(p, end, a.term);
  if (read.ec != std::errc{} || read.ptr == end || *read.ptr != ' ' || a.term == 0) {
    return std::nullopt;
  }
  long long ms = 0;
  read = std::from_chars(read.ptr + 1, end, ms);
  if (read.ec != std::errc{} || read.ptr == end || *read.ptr != ' ' || ms <= 0) {
    return std::nullopt;
  }
  a.ttl = milliseconds(ms);
  const std::string_view data(read.ptr + 1, static_cast<std::size_t>(end - read.ptr - 1));
  const auto newline = data.find('\n');
  if (newline != std::string_view::npos) a.value = data.substr(newline + 1);
  return a;
}

/// One async_observe that waits: on the strand.
struct ObserveOp final : Watcher, PendingOp, std::enable_shared_from_this<ObserveOp> {
  // A silent leader's lease is read again this long after it should have run out (the
  // server's expiry and our clock differ by the drift of one command).
  static constexpr milliseconds expiry_slack{5};
  // After a lost subscription: subscribe again after this.
  static constexpr milliseconds resubscribe_delay{100};

  ObserveOp(std::shared_ptr<LockService> s, std::string r, std::uint64_t after, EndedTerm e,
            LeaderHandler h)
      : service(std::move(s)),
        resource(std::move(r)),
        channel(service->announce_of(resource).substr(1)),
        slot(service->slot_of(service->keys_of(resource).lease())),
        after_term(after),
        ended(std::move(e)),
        next_leader_only(after <= ended->load()),
        handler(std::move(h)),
        timer(service->strand()) {}
  ~ObserveOp() { service->pending().remove(*this); }  // dropped unfinished at shutdown

  void start() {
    if (done) return;
    service->pending().add(*this, shared_from_this());
    service->waiters().watch(channel, slot, shared_from_this());
  }

  void cancel() override { finish(asio::error::operation_aborted, std::nullopt); }

  void listening() override { read(); }

  void unheard() override {
    if (done) return;
    // Announcements may be missed from here: subscribe again (which reads the state).
    timer.expires_after(resubscribe_delay);
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->start();
    });
  }

  void refused(const Reply& error) override { finish(service->server_error(error), std::nullopt); }

  void heard(std::string_view message) override {
    if (done) return;
    const auto a = read_announcement(message);
    if (!a) return;
    // An announcement of a change is a wake-up, not the news: anyone who may publish on the
    // election's channel could send one, so the leader reported is the one the server has.
    if (a->ended) {
      // The leader we watched (or a later one) ended, perhaps with nobody after it.
      if (a->term >= after_term) read();
      return;
    }
    if (a->term > after_term) return read();
    if (a->term == after_term) expect_end_in(a->ttl);  // renewed
  }

  void read() {
    if (done) return;
    if (reading) {
      read_again = true;
      return;
    }
    reading = true;
    service->read_state(resource, [self = shared_from_this()](error_code ec, Inspection state) {
      self->reading = false;
      if (self->done) return;
      if (ec) return self->finish(ec, std::nullopt);
      if (std::exchange(self->read_again, false)) return self->read();
      self->decide(state);
    });
  }

  void decide(const Inspection& state) {
    const auto leader = state.leader();
    if (!leader) {
      // No leader while after_term led; or, after_term reported ended already, wait for the
      // next leader's announcement.
      if (!next_leader_only) finish({}, std::nullopt);
      return;
    }
    if (leader->term > after_term) return finish({}, leader);
    // after_term still leads: its renewals are announced; read again if they stop.
    expect_end_in(state.info.ttl_left);
  }

  void expect_end_in(milliseconds ttl) {
    timer.expires_after(ttl + expiry_slack);
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->read();
    });
  }

  void finish(error_code ec, std::optional<Leader> leader) {
    if (done) return;
    done = true;
    service->pending().remove(*this);
    timer.cancel();
    if (!ec && !leader) {
      // Observing this term again (term 1 after observe(0)) waits for the next leader.
      const auto term = std::max<std::uint64_t>(after_term, 1);
      auto seen = ended->load();
      while (seen < term && !ended->compare_exchange_weak(seen, term)) {
      }
    }
    service->waiters().unwatch(channel, this);
    deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(leader));
  }

  std::shared_ptr<LockService> service;
  std::string resource;
  std::string channel;
  std::uint16_t slot = 0;
  std::uint64_t after_term = 0;
  EndedTerm ended;
  bool next_leader_only = false;  // after_term was reported ended: only a leader completes
  LeaderHandler handler;
  asio::steady_timer timer;
  bool done = false;
  bool reading = false;
  bool read_again = false;
};

}  // namespace

void LockService::observe(std::string resource, bool wait, std::uint64_t after_term,
                          EndedTerm ended, LeaderHandler handler) {
  if (!alive_.load()) return;
  if (auto broken = check_admin_call(resource)) {
    return deliver(executor_, Defer::yes, std::move(handler), broken.error,
                   std::optional<Leader>{});
  }
  if (!wait) {
    auto shared = std::make_shared<LeaderHandler>(std::move(handler));
    return read_state(
        resource, [self = shared_from_this(), shared, ended](error_code ec, Inspection state) {
          auto leader = ec ? std::optional<Leader>{} : state.leader();
          // observe(0) saw nobody: observe(1) then waits for the next leader.
          if (!ec && !leader && ended) {
            std::uint64_t none = 0;
            ended->compare_exchange_strong(none, 1);
          }
          deliver(self->executor_, Defer::no, std::move(*shared), ec, std::move(leader));
        });
  }
  auto op = std::make_shared<ObserveOp>(shared_from_this(), std::move(resource), after_term,
                                        std::move(ended), std::move(handler));
  // Installed in the initiating call, as for acquire (see there).
  install_cancellation(op->handler, op);
  asio::dispatch(strand(), [op = std::move(op)] { op->start(); });
}

}  // namespace detail
}  // namespace redis_lock
