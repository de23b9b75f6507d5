// SPDX-License-Identifier: MIT
#include "lease_ops.hpp"

#include "completion.hpp"
#include "decimal.hpp"
#include "engine.hpp"
#include "replies.hpp"
#include "validate.hpp"
#include "waiters.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/error.hpp>

namespace redis_lock::detail {

using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void CompareOp::on_reply(error_code ec, Reply reply) {
  // The link failed: the release may not have run. Again once a link works: a detached one
  // (a give-back, a dropped guard) whatever the failure; one a caller waits for only if it
  // was never written (a second compare-and-delete after one that ran would say "not
  // held" of a lease that was ours).
  if (ec && give_back_until != Clock::time_point{} &&
      (!handler || ec == error::connect_failed || ec == error::connect_timeout)) {
    auto self = std::static_pointer_cast<CompareOp>(shared_from_this());
    if (service->retry_later(give_back_until, backoff.next(equal_jitter), [self] {
          self->rearm();
          self->service->send(self);
        })) {
      return;
    }
  }
  if (ec == error::timeout && handler && wants_late && patience > Clock::now()) {
    overdue = true;
    overdue_timer = std::make_unique<boost::asio::steady_timer>(service->strand(), patience);
    overdue_timer->async_wait(
        [self = std::static_pointer_cast<CompareOp>(shared_from_this())](error_code) {
          if (!std::exchange(self->overdue, false)) return;
          self->finish(error::timeout, Reply{});
        });
    return;
  }
  if (!ec && lease && lease->min_replicas > 0 && command == LeaseCommand::extend &&
      replies::read_compare(reply) == replies::Compare::done) {
    return confirm_replicated();
  }
  finish(ec, std::move(reply));
}

void CompareOp::on_late_reply(error_code ec, const Reply& reply) {
  if (!std::exchange(overdue, false)) return;
  overdue_timer->cancel();
  finish(ec, reply);
}

void CompareOp::cancel() {
  if (!handler) return;  // completed already (or a detached release: nobody waits)
  // Nobody waits for an overdue reply any more: no timer is kept for it (the observer
  // hears the timeout now).
  if (overdue) overdue_timer->cancel();
  deliver(service->executor(), Defer::no, std::move(handler),
          error_code(boost::asio::error::operation_aborted), false);
}

void CompareOp::confirm_replicated() {
  service->confirm_replicas(
      node, lease->min_replicas, lease->replication_timeout,
      Engine::Confirmed([self = std::static_pointer_cast<CompareOp>(shared_from_this())](
                            error_code ec, std::string_view detail) {
        // Not confirmed: an error, and the lease's validity stays where it was.
        if (ec) return self->finish(ec, Reply{}, detail);
        self->finish({}, replies::integer_reply(1));
      }));
}

void CompareOp::finish(error_code ec, Reply reply, std::string_view detail) {
  bool done = false;
  if (!ec && reply.is_error()) {
    detail = reply.str;
    ec = service->server_error(reply);
  } else if (!ec) {
    switch (replies::read_compare(reply)) {
      case replies::Compare::malformed:
        ec = error::unexpected_reply;
        break;
      case replies::Compare::done:
        done = true;
        // Only an extension moves the lease's validity. An auto-renewed lease whose validity
        // passed before this reply is lost (lost() may have said so): not extended, from the
        // guard's point of view.
        if (!lease || lease->released.load() || command != LeaseCommand::extend) break;
        done = service->watchdog().confirm_or_lose(lease, sent, new_ttl);
        break;
      case replies::Compare::not_ours:
        if (lease) service->watchdog().mark_lost(lease);
        break;
    }
  }
  if (auto* observer = service->observer(); observer && !resource.empty()) {
    observer->on_lease({resource, command, done, ec, Clock::now() - sent, node_results, detail});
  }
  if (!handler) return;  // a detached release: the ttl covers any failure
  tell(diagnostics, ec, detail);
  deliver(service->executor(), Defer::no, std::move(handler), ec, done);
}

void prepare_release(Engine& service, CompareOp& op, std::string_view resource, std::string token,
                     AcquireKind kind, std::string_view member_suffix) {
  op.service = service.shared_from_this();
  op.keys = service.keys_of(resource, kind);
  op.slot = service.slot_of(op.keys.lease());
  op.token = std::move(token);
  // A holder's member suffix is its manager id (and in a lease set, its mode, which names
  // its hold); a waiter's carries its data after a space. (A mutex holder's is the manager
  // id itself, which outlives the op: no copy.)
  std::string_view suffix = service.waiters().manager_id();
  if (!member_suffix.empty()) {
    suffix = op.member_suffix.assign(member_suffix);
  } else if (is_lease_set(kind)) {
    suffix = op.member_suffix.assign(suffix) += mode_letter(kind);
  }
  op.notify = service.notify_of(op.slot);
  if (is_lease_set(kind)) {
    return op.set(scripts::ReleaseSet{.lease = op.keys.lease(),
                                      .queue = op.keys.queue(),
                                      .queue_expiry = op.keys.queue_expiry(),
                                      .token = op.token,
                                      .member_suffix = suffix,
                                      .notify = op.notify});
  }
  if (kind == AcquireKind::election) op.announce = service.announce_of(resource);
  op.set(scripts::Release{.lease = op.keys.lease(),
                          .queue = op.keys.queue(),
                          .queue_expiry = op.keys.queue_expiry(),
                          .fence = op.keys.fence(),
                          // No info without the shape's (prepare_acquire): a bare lease takes
                          // release.lua's common path.
                          .info = service.shape().keeps_info() ? scripts::Optional(op.keys.info())
                                                               : scripts::Optional(),
                          .token = op.token,
                          .member_suffix = suffix,
                          .notify = op.notify,
                          .announce = kind == AcquireKind::election ? scripts::Optional(op.announce)
                                                                    : scripts::Optional()});
}

void prepare_extend(Engine& service, LeaseCallOp& op, const std::string& resource,
                    std::string token, AcquireKind kind, std::string ttl_ms) {
  op.service = service.shared_from_this();
  op.keys = service.keys_of(resource, kind);
  op.slot = service.slot_of(op.keys.lease());
  op.token = std::move(token);
  op.ttl_ms = std::move(ttl_ms);
  if (is_lease_set(kind)) op.token += mode_letter(kind);  // the holder, in the set
  if (kind == AcquireKind::election) op.announce = service.announce_of(resource);
  set_extend_args(op, kind);
}

void set_extend_args(LeaseCallOp& op, AcquireKind kind) {
  if (is_lease_set(kind)) {
    return op.set(scripts::ExtendSet{.lease = op.keys.lease(),
                                     .holder = op.token,
                                     .ttl_ms = op.ttl_ms,
                                     .place_ms = waiter_ttl_ms});
  }
  if (kind == AcquireKind::election) {
    return op.set(scripts::Extend{.lease = op.keys.lease(),
                                  .info = op.keys.info(),
                                  .token = op.token,
                                  .ttl_ms = op.ttl_ms,
                                  .announce = op.announce});
  }
  // A mutex's record is folded into its lease (first.lua's lease_value): the lease alone, which
  // also lets a renewal follow its key alone through a Cluster slot's migration.
  op.set(scripts::Extend{.lease = op.keys.lease(), .token = op.token, .ttl_ms = op.ttl_ms});
}

namespace {

void give_back_on(const std::shared_ptr<Engine>& service, std::size_t node,
                  std::shared_ptr<const OwnedCommand> release, Clock::time_point until,
                  Backoff backoff) {
  if (!service->running()) return;
  auto again = release;
  service->router().send_to(
      node, std::move(release), release_script.body,
      Connection::Callback(
          [service, node, again = std::move(again), until, backoff](error_code ec, Reply) {
            if (!ec) return;  // it ran (or the server refused it: it never will)
            auto next = backoff;
            const auto wait = next.next();
            service->retry_later(until, wait, [service, node, again, until, next] {
              give_back_on(service, node, again, until, next);
            });
          }));
}

}  // namespace

void give_back_on(Engine& service, std::size_t node, std::string_view resource,
                  std::string_view token, Clock::time_point until) {
  if (!service.running()) return;
  // The same release command as any other, with its own copy of the bytes.
  CompareOp release{BoolHandler{}};
  prepare_release(service, release, resource, std::string(token), AcquireKind::mutex);
  give_back_on(service.shared_from_this(), node,
               std::make_shared<const OwnedCommand>(release.Routed::command()), until,
               give_back_backoff);
}

namespace {

/// A caller's extension or touch, from the initiating call: its cancellation installed there
/// (as for acquire), then sent on the strand.
void send_from_caller(Engine& engine, std::shared_ptr<CompareOp> op) {
  install_cancellation(op->handler, op);
  engine.on_strand([op = std::move(op)]() mutable {
    auto& service = *op->service;
    service.send(std::move(op));
  });
}

}  // namespace

void start_op(Engine& engine, ExtendParams params, BoolHandler handler) {
  const auto& resource = params.resource;
  auto& token = params.token;
  auto& lease = params.lease;
  const auto ttl = params.ttl;
  if (!engine.alive()) return;
  if (auto broken = check_extension(ttl)) {
    engine.report_lease_refusal(resource, LeaseCommand::extend, broken.error, broken.rule,
                                params.diagnostics);
    return deliver(engine.executor(), Defer::yes, std::move(handler), broken.error, false);
  }
  auto op = std::make_shared<CompareOp>(std::move(handler));
  op->diagnostics = params.diagnostics;
  const auto kind = lease ? lease->kind : AcquireKind::mutex;
  prepare_extend(engine, *op, resource, std::move(token), kind, to_decimal(ttl.count()));
  op->lease = std::move(lease);
  op->new_ttl = ttl;
  op->command = LeaseCommand::extend;
  // min_replicas: on the connection whose WAIT counts it (the acquire's).
  op->durable = op->lease && op->lease->min_replicas > 0;
  if (engine.observer()) op->resource = resource;
  send_from_caller(engine, std::move(op));
}

/// One lease's renewal command, built once and sent again each time.
struct RenewOp final : LeaseCallOp {
  std::weak_ptr<LeaseState> lease;  // weakly: the lease holds this op
  Watchdog* watchdog = nullptr;     // the engine's, which `service` keeps
  Clock::time_point sent;
  void on_reply(error_code ec, Reply reply) override {
    auto held = lease.lock();
    if (!held) return;
    if (!ec && held->min_replicas > 0 && replies::read_compare(reply) == replies::Compare::done) {
      // min_replicas: the renewal counts once WAIT says enough replicas have it; until
      // then the lease is not extended (retried, and lost at valid_until()).
      return service->confirm_replicas(
          node, held->min_replicas, held->replication_timeout,
          Engine::Confirmed([self = std::static_pointer_cast<RenewOp>(shared_from_this()), reply](
                                error_code wait_ec, std::string_view detail) {
            auto again = self->lease.lock();
            if (!again) return;
            if (!wait_ec) {
              return self->watchdog->renewed(again, self->sent, {}, reply, self->node_results);
            }
            // Not confirmed: not extended. The event says why, as an acquire's or an
            // extension's would (the server's error reply with its text, not_replicated...).
            Reply why;
            if (!detail.empty()) {
              why.type = Reply::Type::error;
              why.str = detail;
            }
            self->watchdog->renewed(again, self->sent, wait_ec, why, self->node_results);
          }));
    }
    watchdog->renewed(held, sent, ec, reply, node_results);
  }
};

void send_renewal(Engine& service, const std::shared_ptr<LeaseState>& lease, Watchdog& watchdog,
                  Clock::time_point sent) {
  if (!lease->renewal) {
    // Keys and arguments are the same every time: build them once per lease. The op holds
    // the lease weakly, or the two would keep each other alive.
    auto op = std::make_shared<RenewOp>();
    op->lease = lease;
    op->watchdog = &watchdog;
    prepare_extend(service, *op, lease->resource, lease->token, lease->kind,
                   to_decimal(lease->ttl.count()));
    op->durable = lease->min_replicas > 0;
    lease->renewal = op;
  }
  auto& op = static_cast<RenewOp&>(*lease->renewal);
  op.sent = sent;
  op.sent_body = false;
  set_extend_args(op, lease->kind);
  service.send(lease->renewal);
}

void start_op(Engine& engine, WaitLostParams params, ErrorHandler handler) {
  if (!engine.alive()) return;
  engine.on_strand([self = engine.shared_from_this(), lease = std::move(params.lease),
                    handler = std::move(handler)]() mutable {
    if (lease->lost.load()) {
      return deliver(self->executor(), Defer::yes, std::move(handler),
                     error_code(error::lock_lost));
    }
    lease->has_waiter.store(true);
    if (lease->released.load()) {
      return deliver(self->executor(), Defer::yes, std::move(handler),
                     error_code(boost::asio::error::operation_aborted));
    }
    if (auto previous = lease->take_lost_waiter()) {
      deliver(self->executor(), Defer::yes, std::move(*previous),
              error_code(boost::asio::error::operation_aborted));
    }
    lease->lost_waiter.emplace(std::move(handler));
  });
}

/// A touch's call: the new label is its own word.
struct TouchOp final : CompareOp {
  using CompareOp::CompareOp;
  std::string label;
};

void start_op(Engine& engine, TouchParams params, BoolHandler handler) {
  if (!engine.alive()) return;
  const auto kind = params.lease ? params.lease->kind : AcquireKind::mutex;
  auto broken = check_label(params.label);
  if (!broken && is_lease_set(kind)) {
    broken = {error::invalid_argument, "a semaphore's or read-write lock's hold records no label"};
  }
  if (!broken) broken = check(Feature::labels, engine.shape());
  if (broken) {
    engine.report_lease_refusal(params.resource, LeaseCommand::touch, broken.error, broken.rule,
                                params.diagnostics);
    return deliver(engine.executor(), Defer::yes, std::move(handler), broken.error, false);
  }
  auto op = std::make_shared<TouchOp>(std::move(handler));
  op->diagnostics = params.diagnostics;
  op->service = engine.shared_from_this();
  op->keys = engine.keys_of(params.resource, kind);
  op->slot = engine.slot_of(op->keys.lease());
  op->token = std::move(params.token);
  op->label = std::move(params.label);
  op->set(scripts::Touch{
      .lease = op->keys.lease(), .info = op->keys.info(), .token = op->token, .label = op->label});
  op->lease = std::move(params.lease);
  op->command = LeaseCommand::touch;
  if (engine.observer()) op->resource = std::move(params.resource);
  send_from_caller(engine, std::move(op));
}

}  // namespace redis_lock::detail
