// SPDX-License-Identifier: MIT
#include "observe_op.hpp"

#include "admin.hpp"
#include "completion.hpp"
#include "engine.hpp"
#include "pending.hpp"
#include "waiters.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>

#include <charconv>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Action = ObserveFsm::Action;
using Kind = ObserveFsm::Action::Kind;

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

namespace {

Action act(Kind kind) {
  Action a;
  a.kind = kind;
  return a;
}

}  // namespace

Action ObserveFsm::start() { return done_ ? Action{} : act(Kind::watch); }

Action ObserveFsm::listening() { return read(); }

Action ObserveFsm::unheard(Clock::time_point now) {
  if (done_) return {};
  // Announcements may be missed from here: subscribe again (which reads the state).
  return sleep(now + resubscribe_delay, true);
}

Action ObserveFsm::refused(error_code ec) { return complete(ec, false); }

Action ObserveFsm::heard(Clock::time_point now, std::string_view message) {
  if (done_) return {};
  const auto a = read_announcement(message);
  if (!a) return {};
  // An announcement of a change is a wake-up, not the news: anyone who may publish on the
  // election's channel could send one, so the leader reported is the one the server has.
  if (a->ended) {
    // The leader we watched (or a later one) ended, perhaps with nobody after it.
    if (a->term >= after_term_) return read();
    return {};
  }
  if (a->term > after_term_) return read();
  if (a->term == after_term_) return sleep(now + a->ttl + expiry_slack, false);  // renewed
  return {};
}

Action ObserveFsm::read() {
  if (done_) return {};
  if (reading_) {
    read_again_ = true;
    return {};
  }
  reading_ = true;
  return act(Kind::read);
}

Action ObserveFsm::state_read(Clock::time_point now, error_code ec,
                              std::optional<std::uint64_t> leader_term, milliseconds ttl_left) {
  reading_ = false;
  if (done_) return {};
  if (ec) return complete(ec, false);
  if (std::exchange(read_again_, false)) return read();
  if (!leader_term) {
    // No leader while after_term led; or, after_term reported ended already, wait for the
    // next leader's announcement.
    if (!next_leader_only_) return complete({}, false);
    return {};
  }
  if (*leader_term > after_term_) return complete({}, true);
  // after_term still leads: its renewals are announced; read again if they stop.
  return sleep(now + ttl_left + expiry_slack, false);
}

Action ObserveFsm::timer_fired() {
  if (done_) return {};
  return resubscribe_ ? act(Kind::watch) : read();
}

Action ObserveFsm::cancel() { return complete(asio::error::operation_aborted, false); }

Action ObserveFsm::sleep(Clock::time_point until, bool resubscribe) {
  resubscribe_ = resubscribe;
  auto a = act(Kind::sleep);
  a.until = until;
  return a;
}

Action ObserveFsm::complete(error_code ec, bool leader) {
  if (done_) return {};
  done_ = true;
  auto a = act(Kind::complete);
  a.ec = ec;
  a.leader = leader;
  return a;
}

namespace {

/// One async_observe that waits: the driver of an ObserveFsm, on the strand.
struct ObserveOp final : Watcher, PendingOp, std::enable_shared_from_this<ObserveOp> {
  ObserveOp(std::shared_ptr<Engine> s, std::string r, std::uint64_t after, EndedTerm e,
            LeaderHandler h)
      : service(std::move(s)),
        resource(std::move(r)),
        channel(service->announce_of(resource).substr(1)),
        slot(service->slot_of(service->keys_of(resource).lease())),
        after_term(after),
        ended(std::move(e)),
        fsm(after, after <= ended->load()),
        handler(std::move(h)),
        timer(service->strand()) {}
  ~ObserveOp() { service->pending().remove(*this); }  // dropped unfinished at shutdown

  void start() { run(fsm.start()); }
  void cancel() override { run(fsm.cancel()); }
  void listening() override { run(fsm.listening()); }
  void unheard() override { run(fsm.unheard(Clock::now())); }
  void refused(const Reply& error) override {
    detail = error.str;
    run(fsm.refused(service->server_error(error)));
  }
  void heard(std::string_view message) override { run(fsm.heard(Clock::now(), message)); }

  void run(Action a) {
    switch (a.kind) {
      case Kind::none:
        return;
      case Kind::watch:
        service->pending().add(*this, shared_from_this());
        return service->waiters().watch(channel, slot, shared_from_this());
      case Kind::read:
        return read_state(*service, resource,
                          [self = shared_from_this()](error_code ec, Inspection read) {
                            if (ec) self->detail = read.detail;
                            self->state = std::move(read);
                            const auto leader = self->state.leader();
                            self->run(self->fsm.state_read(
                                Clock::now(), ec,
                                leader ? std::optional<std::uint64_t>(leader->term) : std::nullopt,
                                self->state.info.ttl_left));
                          });
      case Kind::sleep:
        timer.expires_at(a.until);
        return timer.async_wait([self = shared_from_this()](error_code ec) {
          if (!ec) self->run(self->fsm.timer_fired());
        });
      case Kind::complete:
        return finish(a.ec, a.leader ? state.leader() : std::nullopt);
    }
  }

  void finish(error_code ec, std::optional<Leader> leader) {
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
    tell(diagnostics, ec, detail);
    service->report_admin(AdminCommand::observe, resource, ec, started,
                          ec ? std::move(detail) : std::string());
    deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(leader));
  }

  std::shared_ptr<Engine> service;
  std::string resource;
  std::string channel;
  std::uint16_t slot = 0;
  std::uint64_t after_term = 0;
  EndedTerm ended;
  ObserveFsm fsm;
  Inspection state;  // the last read's
  LeaderHandler handler;
  asio::steady_timer timer;
  Clock::time_point started = Clock::now();
  std::string detail;                  // with an error: the server's reply that caused it
  Diagnostics* diagnostics = nullptr;  // bound to the handler: told `detail`
};

}  // namespace

void start_op(Engine& engine, ObserveParams params, LeaderHandler handler) {
  auto& resource = params.resource;
  const bool wait = params.wait;
  const auto after_term = params.after_term;
  auto& ended = params.ended;
  if (!engine.alive()) return;
  if (auto broken = engine.check_admin_call(resource)) {
    report_admin_refusal(engine, wait ? AdminCommand::observe : AdminCommand::leader,
                         std::move(resource), broken, params.diagnostics);
    return deliver(engine.executor(), Defer::yes, std::move(handler), broken.error,
                   std::optional<Leader>{});
  }
  if (!wait) {
    auto call = std::make_shared<CancellableCall<LeaderHandler, std::optional<Leader>>>(
        engine.shared_from_this(), std::move(handler), AdminCommand::leader, resource);
    call->diagnostics = params.diagnostics;
    install_cancellation(call->handler, call);  // in the initiating call, as for acquire
    return read_state(engine, resource, [call, ended](error_code ec, Inspection state) {
      auto leader = ec ? std::optional<Leader>{} : state.leader();
      // observe(0) saw nobody: observe(1) then waits for the next leader.
      if (!ec && !leader && ended && call->handler) {
        std::uint64_t none = 0;
        ended->compare_exchange_strong(none, 1);
      }
      call->complete(ec, std::move(leader), std::move(state.detail));
    });
  }
  auto op = std::make_shared<ObserveOp>(engine.shared_from_this(), std::move(resource), after_term,
                                        std::move(ended), std::move(handler));
  op->diagnostics = params.diagnostics;
  // Installed in the initiating call, as for acquire (acquire_op.cpp's start_op).
  install_cancellation(op->handler, op);
  asio::dispatch(engine.strand(), [op = std::move(op)] { op->start(); });
}

}  // namespace redis_lock::detail
