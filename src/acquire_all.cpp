// SPDX-License-Identifier: MIT
#include "acquire_all.hpp"

#include "acquire_op.hpp"
#include "completion.hpp"
#include "decimal.hpp"
#include "engine.hpp"
#include "lease_ops.hpp"
#include "replies.hpp"
#include "token.hpp"
#include "validate.hpp"

#include <redis_lock/error.hpp>
#include <redis_lock/observer.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>

#include <algorithm>
#include <numeric>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<std::size_t> taking_order(std::span<const std::string> resources,
                                      std::span<const std::uint16_t> slots) {
  std::vector<std::size_t> order(resources.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (slots[a] != slots[b]) return slots[a] < slots[b];
    return resources[a] < resources[b];
  });
  return order;
}

// ---------------------------------------------------------------------------------------
// GroupOp

void GroupOp::prepare() {
  scripts::encode(scripts::AcquireGroup{.fence = group_keys.front().fence(),
                                        .resources = group_keys,
                                        .token = token,
                                        .ttl_ms = ttl_ms,
                                        .data = service->holder_label(),
                                        .key_count = &numkeys},
                  long_argv);
  argc = long_argv.size();
  script_body = scripts::AcquireGroup::script.body;
  sent_body = false;
  rearm();
}

void GroupOp::on_reply(error_code ec, Reply reply) {
  if (done) std::exchange(done, nullptr)(ec, std::move(reply));
}

void GroupOp::on_late_reply(error_code ec, const Reply& reply) {
  // Timed out, then answered (or never will be): what it took goes back.
  if (!ec && reply.is_error()) return;
  if (ec || replies::may_have_granted(reply)) give_back();
}

void GroupOp::give_back() {
  const auto until = sent + std::min(ttl, give_back_horizon);
  for (const auto& resource : resources) {
    service->give_back(resource, token, AcquireKind::mutex, until, {});
  }
}

// ---------------------------------------------------------------------------------------
// AcquireAllOp

void start_op(Engine& engine, AcquireAllParams params, AcquireAllHandler handler) {
  auto& resources = params.resources;
  const auto& options = params.options;
  if (!engine.alive()) return;  // the context is gone: drop the handler, as Asio does
  auto broken = engine.config_violation();
  if (!broken) broken = check_all(resources);
  for (std::size_t i = 0; !broken && i < resources.size(); ++i) {
    broken = check(resources[i], options, engine.shape());
  }
  if (broken) {
    engine.report_refusal(resources.empty() ? std::string() : resources.front(), broken.error,
                          broken.rule, AcquireKind::mutex, params.diagnostics);
    return deliver(engine.executor(), Defer::yes, std::move(handler), broken.error,
                   std::vector<Grant>{});
  }
  auto op = std::make_shared<AcquireAllOp>(std::move(handler), std::move(resources), options);
  op->service = engine.shared_from_this();
  op->deadline = wait_deadline(Clock::now(), options.wait);
  op->diagnostics = params.diagnostics;
  // Installed in the initiating call, as for acquire (acquire_op.cpp's start_op).
  install_cancellation(op->handler, op);
  engine.on_strand([op = std::move(op)]() mutable { op->start(); });
}

AcquireAllOp::~AcquireAllOp() {
  if (service) service->pending().remove(*this);  // dropped unfinished at shutdown
}

void AcquireAllOp::start() {
  service->pending().add(*this, shared_from_this());
  guards.resize(resources.size());
  slots.reserve(resources.size());
  for (const auto& r : resources) slots.push_back(service->slot_of(service->keys_of(r).lease()));
  order = taking_order(resources, slots);
  step();
}

void AcquireAllOp::cancel() {
  if (done || cancelled) return;
  cancelled = true;
  // An acquire under way completes with operation_aborted (and gives back what it holds);
  // a group script's reply is awaited, and what it took given back.
  acquire_cancel.emit(asio::cancellation_type::terminal);
  if (!in_flight) finish(asio::error::operation_aborted);
}

void AcquireAllOp::step() {
  if (done) return;
  if (cancelled) return finish(asio::error::operation_aborted);
  if (next == order.size()) return confirm();
  // A slot's resources, up to group_max of them (a reply's array has a bounded length).
  constexpr std::size_t group_max = 256;
  auto end = next + 1;
  while (end < order.size() && end - next < group_max && slots[order[end]] == slots[order[next]]) {
    ++end;
  }
  // The group script: several resources of one slot, tried once; min_replicas confirms
  // each lease on its own acquire's connection, and a shape may not offer it (Redlock).
  if (end - next >= 2 && group_tried <= next && options.min_replicas == 0 &&
      service->shape().groups()) {
    group_tried = end;
    return take_group(end);
  }
  take_one();
}

void AcquireAllOp::take_group(std::size_t end) {
  auto op = std::make_shared<GroupOp>();
  op->service = service;
  try {
    op->token = random_token();
  } catch (const std::exception&) {
    return finish(error::server_error);
  }
  op->ttl_ms = to_decimal(options.ttl.count());
  op->ttl = options.ttl;
  for (auto i = next; i < end; ++i) {
    op->resources.push_back(resources[order[i]]);
    op->group_keys.push_back(service->keys_of(resources[order[i]]));
  }
  op->slot = slots[order[next]];
  op->wants_late = true;
  op->prepare();
  op->sent = Clock::now();
  op->patience = deadline;
  in_flight = true;
  op->done = [self = shared_from_this(), op = op.get(), end](error_code ec, Reply reply) {
    self->in_flight = false;
    if (self->cancelled) {
      if (ec ? replies::may_have_run(ec) : replies::may_have_granted(reply)) op->give_back();
      return self->finish(asio::error::operation_aborted);
    }
    if (!ec && reply.is_error()) {
      const auto error = self->service->server_error(reply);
      tell(self->diagnostics, error, reply.str);
      return self->finish(error);
    }
    if (ec) {
      // As an acquire's attempt (AcquireFsm::after_failure): the link failed after it was
      // written, so it may have run (a timeout has its late reply); an outage within the
      // wait goes on one by one from here, each acquire riding it out.
      const bool waiting = self->options.wait.count() > 0 && Clock::now() < self->deadline;
      const auto after = AcquireFsm::after_failure(ec, Attempt::one_server, waiting, false);
      if (after.give_back) op->give_back();
      if (after.wait_out) return self->step();
      return self->finish(ec);
    }
    const auto& e = reply.elements;
    const auto read = scripts::AcquireGroup::decode(reply, op->resources.size());
    if (read == replies::Group::malformed) {
      op->give_back();
      return self->finish(error::unexpected_reply);
    }
    if (read == replies::Group::granted) {
      for (auto i = self->next; i < end; ++i) {
        self->guards[self->order[i]] = make_grant(*self->service, self->resources[self->order[i]],
                                                  op->token, AcquireKind::mutex, self->collecting(),
                                                  e[i - self->next + 1].integer, op->sent);
        if (auto* observer = self->service->observer()) {
          AcquireEvent event{self->resources[self->order[i]],
                             AcquireOutcome::acquired,
                             {},
                             Clock::now() - self->called,
                             1,
                             false,
                             static_cast<std::uint64_t>(e[i - self->next + 1].integer)};
          mark_held(*self->guards[self->order[i]].lease, Clock::now());
          observer->on_acquire(event);
        }
      }
      self->next = end;
    }
    // Held or waited for: one by one from here, each waiting fairly in its queue.
    self->step();
  };
  service->send(std::move(op));
}

LockOptions AcquireAllOp::collecting() const noexcept {
  auto o = options;
  // max_hold counts from the hand-out (finish), not from each lock's own acquisition; a
  // renew_every the caller did not ask for is not used.
  o.max_hold = std::chrono::milliseconds(0);
  if (!o.auto_renew) {
    o.auto_renew = true;
    o.renew_every = std::chrono::milliseconds(0);
  }
  return o;
}

void AcquireAllOp::take_one() {
  auto sub = collecting();
  if (options.wait.count() > 0) {
    const auto now = Clock::now();
    sub.wait = now >= deadline ? milliseconds(0)
               : deadline == Clock::time_point::max()
                   ? options.wait
                   : std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1);
  }
  const auto index = order[next];
  in_flight = true;
  // Completes on the strand (bind_executor), where this op lives; cancellable by cancel().
  auto completion = asio::bind_cancellation_slot(
      acquire_cancel.slot(),
      asio::bind_executor(
          service->strand(), [self = shared_from_this(), index](error_code ec, Grant guard) {
            self->in_flight = false;
            if (ec) return self->finish(self->cancelled ? asio::error::operation_aborted : ec);
            if (!guard) return self->finish({});  // held until the wait ran out: not an error
            self->guards[index] = std::move(guard);
            ++self->next;
            self->step();
          }));
  start_op(
      *service,
      AcquireParams{
          .resource = resources[index], .options = sub, .kind = {}, .diagnostics = diagnostics},
      AcquireHandler(std::move(completion)));
}

void AcquireAllOp::confirm() {
  // A renewal was refused: that lock is someone else's now.
  for (const auto& guard : guards) {
    if (guard.lease->known_lost(Clock::now())) return start_over();
  }
  const auto now = Clock::now();
  const auto enough = options.ttl * 2 / 3;
  in_flight = true;
  for (auto& guard : guards) {
    if (guard.lease->valid_until() - now >= enough) continue;
    ++extending;
    start_op(
        *service,
        ExtendParams{.resource = guard.resource,
                     .token = guard.token,
                     .lease = guard.lease,
                     .ttl = options.ttl,
                     .diagnostics = diagnostics},
        asio::bind_executor(service->strand(), [self = shared_from_this()](error_code ec, bool ok) {
          if (ec && !self->extend_error) self->extend_error = ec;
          if (!ec && !ok) self->lapsed = true;
          if (--self->extending > 0) return;
          self->in_flight = false;
          if (self->cancelled) return self->finish(asio::error::operation_aborted);
          if (self->extend_error) return self->finish(self->extend_error);
          if (self->lapsed) return self->start_over();
          // A renewal of another one may have been refused meanwhile.
          for (const auto& held : self->guards) {
            if (held.lease->known_lost(Clock::now())) return self->start_over();
          }
          self->finish({}, true);
        }));
  }
  if (extending > 0) return;
  in_flight = false;
  finish({}, true);
}

void AcquireAllOp::start_over() {
  // A lapsed lock may have passed to someone else: none of them is handed out. Released,
  // and taken again from the first within what is left of the wait (or, out of it, the
  // same as a lock held elsewhere: no error, no guards).
  for (auto& g : guards) g.release();
  lapsed = false;
  if (options.wait.count() == 0 || Clock::now() >= deadline) return finish({});
  next = 0;
  group_tried = 0;
  step();
}

void AcquireAllOp::finish(error_code ec, bool all) {
  if (done) return;
  done = true;
  service->pending().remove(*this);
  std::vector<Grant> result;
  if (!ec && all) {
    // Renewed while collected; handed out as asked.
    if (!options.auto_renew) {
      for (auto& g : guards) service->stop_renewing(*g.lease);
    } else if (options.max_hold.count() > 0) {
      const auto until = Clock::now() + options.max_hold;
      for (auto& g : guards) g.lease->hold_until = until;
    }
    result = std::move(guards);
  } else {
    // Each guard's release is queued now, before the completion runs (it retries through
    // link failures while the lease may be valid).
    guards.clear();
  }
  deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(result));
}

}  // namespace redis_lock::detail
