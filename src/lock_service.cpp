// SPDX-License-Identifier: MIT
// The engine's facade: what LockManager and LockGuard call, and what the ops share.
#include "lock_service.hpp"

#include "acquire_all.hpp"
#include "acquire_op.hpp"
#include "completion.hpp"
#include "decimal.hpp"
#include "lease_ops.hpp"
#include "quorum_call.hpp"
#include "redis_lock_scripts.hpp"
#include "replies.hpp"
#include "shutdown_watch.hpp"
#include "tls.hpp"
#include "token.hpp"
#include "validate.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <vector>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// Checks the configuration (nothing has been sent) and reads the TLS files, once.
Violation prepare(const ConnectionConfig& config, const ManagerOptions& options,
                  std::shared_ptr<asio::ssl::context>& tls) {
  if (auto broken = check(config)) return broken;
  if (auto broken = check(options)) return broken;
  if (auto ec = make_tls_context(config, tls)) return {ec, "the TLS files could not be used"};
  return {};
}

}  // namespace

LockService::LockService(asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options)
    : executor_(std::move(ex)), options_(std::move(options)), config_(config) {
  const auto broken = prepare(config_, options_, tls_);
  config_error_ = broken.error;
  config_rule_ = broken.rule;
  strand_.emplace(asio::make_strand(executor_));
  router_ = std::make_shared<Router>(*strand_, std::move(config), options_.client_name, tls_);
  waiters_ = std::make_shared<Waiters>(router_, options_.key_prefix, random_token().substr(0, 16),
                                       cluster());
  // Every command connection has our scripts before its first command: a NOSCRIPT resend
  // would run after commands sent later (a Redlock give-back after the next attempt's grant).
  std::vector<std::string_view> scripts = {acquire_script.body, release_script.body,
                                           extend_script.body};
  if (redlock()) {
    scripts.push_back(raise_fence_script.body);
  } else {
    // The lease sets' and the group acquire's, which Redlock does not offer.
    for (const auto* s :
         {&acquire_set_script, &release_set_script, &extend_set_script, &acquire_group_script}) {
      scripts.push_back(s->body);
    }
  }
  router_->set_preload(std::move(scripts));
}

LockService::~LockService() = default;

void LockService::watch_context_shutdown() {
  waiters_->attach();
  watch_shutdown(executor_, weak_from_this());
}

void LockService::on_context_shutdown() noexcept {
  alive_.store(false);
  context_alive_->store(false);
  // Nothing runs on the context any more (it is being destroyed), and its handlers still
  // hold our ops: an acquire queued on a server gives its place back now, where a link can
  // take the write, instead of leaving it to a release that would hand the lease to it.
  try {
    for (const auto& op : pending_.snapshot()) op->last_words();
  } catch (const std::exception&) {
    // No memory for the snapshot: the places lapse by themselves (1.2 s).
  }
  if (router_) {
    router_->shutdown();
    router_.reset();
  }
  waiters_->shutdown();
  watchdog_.shutdown();
  strand_.reset();
  executor_ = asio::any_io_executor();
}

template <class Fn>
void LockService::on_strand(Fn&& fn) {
  // dispatch: a command issued from a completion handler (already on the strand) is queued
  // at once and joins the write of its neighbours; from elsewhere it is posted.
  asio::dispatch(*strand_, std::forward<Fn>(fn));
}

void LockService::cancel_all() {
  if (!alive_.load()) return;
  on_strand([self = shared_from_this()] {
    // A snapshot: a cancelled op leaves the list, and a completion handler run inline may
    // start new operations, which this call does not cancel.
    for (const auto& op : self->pending_.snapshot()) op->cancel();
  });
}

bool LockService::give_back_now(std::size_t node, std::string_view resource, std::string_view token,
                                LeaseKind kind, std::string_view member_suffix) noexcept {
  if (!router_ || redlock()) return false;
  try {
    CompareOp op{BoolHandler{}};
    prepare_release(*this, op, std::string(resource), std::string(token), kind, member_suffix);
    return router_->write_now(node, op.Routed::command());
  } catch (const std::exception&) {
    return false;
  }
}

std::string LockService::last_server_error() const {
  std::lock_guard lock(error_mutex_);
  return last_server_error_;
}

error_code LockService::server_error(const Reply& reply) {
  {
    std::lock_guard lock(error_mutex_);
    last_server_error_ = reply.str;
  }
  return error_from_reply(reply.str);
}

ResourceKeys LockService::keys_of(std::string_view resource, LeaseKind kind) const {
  return make_keys(options_.key_prefix, resource, is_lease_set(kind));
}

std::string LockService::announce_of(std::string_view resource) const {
  // PUBLISH, also on a Cluster (which forwards it to every node): an observer's subscription
  // then never moves with a slot, and SUBSCRIBE / UNSUBSCRIBE are answered as commands.
  return std::string("P").append(options_.key_prefix).append("leader:").append(resource);
}

std::uint16_t LockService::slot_of(std::string_view lease_key) const noexcept {
  return cluster() ? key_slot(lease_key) : 0;
}

void LockService::send(std::shared_ptr<ScriptOp> op) {
  if (!router_) return;  // the context shut down: drop, as Asio drops pending handlers
  if (!redlock()) return router_->send(std::move(op));
  auto acquire = op->quorum_acquire();
  fan_out(router_, *strand_, config_.nodes.size(), config_.command_timeout, std::move(op),
          std::move(acquire));
}

void LockService::wait_replicas(std::size_t node, int replicas, milliseconds timeout,
                                Connection::Callback callback) {
  if (!router_) return;
  const auto count = to_decimal(replicas);
  const auto ms = to_decimal(timeout.count());
  const std::string_view command[] = {"WAIT", count, ms};
  // The server answers WAIT after up to `timeout`: the command's own deadline comes on top.
  router_->connection(node, Router::Pool::durable)
      .execute(command, std::move(callback), nullptr, timeout);
}

bool LockService::retry_later(Clock::time_point until, milliseconds delay,
                              std::function<void()> again) {
  if (!router_ || !strand_) return false;
  const auto at = Clock::now() + delay;
  if (at >= until) return false;
  auto timer = std::make_shared<asio::steady_timer>(*strand_, at);
  timer->async_wait([timer, again = std::move(again)](error_code ec) {
    if (!ec) again();
  });
  return true;
}

void LockService::watch(const std::shared_ptr<LeaseState>& lease) {
  if (router_) watchdog_.watch(lease);
}

void LockService::add_waiter(const std::string& token, std::weak_ptr<Waiter> waiter,
                             std::uint16_t slot) {
  if (!router_ || redlock()) return;  // Redlock waiters back off; no release is published
  waiters_->add(token, std::move(waiter), slot);
}

void LockService::remove_waiter(const std::string& token) { waiters_->remove(token); }

// ---------------------------------------------------------------------------------------
// The operations

void LockService::report_refusal(std::string resource, error_code ec, std::string_view why) {
  if (!observer()) return;
  on_strand([self = shared_from_this(), resource = std::move(resource), ec, why] {
    AcquireEvent e{resource, AcquireOutcome::failed, ec, Clock::duration::zero(), 0, false, 0};
    e.detail = why;
    self->observer()->on_acquire(e);
  });
}

void LockService::refuse(std::string resource, error_code ec, std::string_view why,
                         AcquireHandler handler) {
  report_refusal(std::move(resource), ec, why);
  deliver(executor_, Defer::yes, std::move(handler), ec, LockGuard{});
}

void LockService::acquire(std::string resource, LockOptions options, LockKind kind,
                          AcquireHandler handler) {
  if (!alive_.load()) return;  // the context is gone: drop the handler, as Asio does
  if (config_error_)
    return refuse(std::move(resource), config_error_, config_rule_, std::move(handler));
  auto broken = check(resource, options, config_.topology);
  if (!broken) broken = check(kind, config_.topology);
  if (broken) return refuse(std::move(resource), broken.error, broken.rule, std::move(handler));
  auto op = std::make_shared<AcquireOp>(std::move(handler), std::move(resource), options);
  switch (kind.type) {
    case LockKind::Type::mutex:
      op->data = options_.holder_label;
      break;
    case LockKind::Type::permit:
      op->kind = LeaseKind::shared;
      op->marker = "#S" + to_decimal(kind.limit);
      break;
    case LockKind::Type::shared:
      op->kind = LeaseKind::shared;
      op->marker = "#RW";
      break;
    case LockKind::Type::exclusive:
      op->kind = LeaseKind::exclusive;
      op->marker = "#RW";
      break;
  }
  start(std::move(op));
}

void LockService::campaign(std::string resource, std::string value, LockOptions options,
                           AcquireHandler handler) {
  if (!alive_.load()) return;  // the context is gone: drop the handler, as Asio does
  if (config_error_)
    return refuse(std::move(resource), config_error_, config_rule_, std::move(handler));
  options.auto_renew = true;  // the leadership lasts while the guard is held
  auto broken = check(resource, options, config_.topology);
  if (!broken) broken = check_admin(resource, config_.topology);
  if (!broken) broken = check_value(value);
  if (broken) return refuse(std::move(resource), broken.error, broken.rule, std::move(handler));
  auto op = std::make_shared<AcquireOp>(std::move(handler), std::move(resource), options);
  op->kind = LeaseKind::leader;
  op->data.reserve(options_.holder_label.size() + 1 + value.size());
  op->data.append(options_.holder_label).append("\n").append(value);
  start(std::move(op));
}

void LockService::start(std::shared_ptr<AcquireOp> op) {
  const auto& options = op->options;
  op->service = shared_from_this();
  op->keys = keys_of(op->resource, op->kind);
  if (is_lease_set(op->kind)) op->mutex_queue = keys_of(op->resource).queue();
  op->slot = slot_of(op->keys.lease());
  op->durable = options.min_replicas > 0;
  op->queues = options.wait.count() > 0 && !redlock();
  op->arg = to_decimal(options.ttl.count());
  const auto now = Clock::now();
  op->deadline =
      options.wait >= std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now)
          ? Clock::time_point::max()
          : now + options.wait;
  try {
    op->token = random_token();
  } catch (const std::exception&) {
    return deliver(executor_, Defer::yes, std::move(op->handler), error_code(error::server_error),
                   LockGuard{});
  }
  // The cancellation handler is installed here, in the initiating call, on the caller's
  // thread: Asio lets a signal be emitted only where its operation was initiated and
  // completes, never concurrently with installing the handler. (Installing it later on our
  // strand raced with an emit from the caller's strand: Stress.ThreadsCancellations... under
  // TSan.) For the same reason it is cleared where the completion handler runs, just before
  // (completion.hpp's complete()), not on our strand. It holds the op weakly and nothing
  // else (no strand: a handler dropped at shutdown may be destroyed with the caller's signal
  // after the io_context).
  install_cancellation(op->handler, op);
  on_strand([op = std::move(op)]() mutable { op->start(); });
}

void LockService::acquire_all(std::vector<std::string> resources, LockOptions options,
                              AcquireAllHandler handler) {
  if (!alive_.load()) return;  // the context is gone: drop the handler, as Asio does
  auto broken = config_error_ ? Violation{config_error_, config_rule_} : check_all(resources);
  for (std::size_t i = 0; !broken && i < resources.size(); ++i) {
    broken = check(resources[i], options, config_.topology);
  }
  if (broken) {
    report_refusal(resources.empty() ? std::string() : resources.front(), broken.error,
                   broken.rule);
    return deliver(executor_, Defer::yes, std::move(handler), broken.error,
                   std::vector<LockGuard>{});
  }
  auto op = std::make_shared<AcquireAllOp>(std::move(handler), std::move(resources), options);
  op->service = shared_from_this();
  const auto now = Clock::now();
  op->deadline =
      options.wait >= std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now)
          ? Clock::time_point::max()
          : now + options.wait;
  // Installed in the initiating call, as for acquire (see there).
  install_cancellation(op->handler, op);
  on_strand([op = std::move(op)]() mutable { op->start(); });
}

Violation LockService::check_admin_call(std::string_view resource) const {
  if (config_error_) return {config_error_, config_rule_};
  return check_admin(resource, config_.topology);
}

void LockService::read_state(const std::string& resource,
                             std::function<void(error_code, Inspection)> done) {
  auto op = std::make_shared<AdminOp>();
  op->service = shared_from_this();
  op->keys = keys_of(resource);
  op->slot = slot_of(op->keys.lease());
  // The lease sets' queue expiry, in `arg` (the op's strings hold what its words point to).
  op->arg = keys_of(resource, LeaseKind::shared).queue_expiry();
  op->set_args(inspect_script,
               {op->keys.lease(), op->keys.info(), op->keys.queue_expiry(), op->arg}, {});
  op->done = [self = shared_from_this(), done = std::move(done)](error_code ec, Reply reply) {
    if (!ec && reply.is_error()) ec = self->server_error(reply);
    if (ec) return done(ec, Inspection{});
    auto read = read_inspection(reply);
    if (!read) return done(error::unexpected_reply, Inspection{});
    done({}, std::move(*read));
  };
  on_strand(
      [self = shared_from_this(), op = std::move(op)]() mutable { self->send(std::move(op)); });
}

void LockService::inspect(std::string resource, InspectHandler handler) {
  if (!alive_.load()) return;
  if (auto broken = check_admin_call(resource)) {
    return deliver(executor_, Defer::yes, std::move(handler), broken.error, LockInfo{});
  }
  auto shared = std::make_shared<InspectHandler>(std::move(handler));
  read_state(resource, [self = shared_from_this(), shared](error_code ec, Inspection state) {
    deliver(self->executor_, Defer::no, std::move(*shared), ec, std::move(state.info));
  });
}

void LockService::force_release(std::string resource, BoolHandler handler) {
  if (!alive_.load()) return;
  if (auto broken = check_admin_call(resource)) {
    return deliver(executor_, Defer::yes, std::move(handler), broken.error, false);
  }
  auto op = std::make_shared<AdminOp>();
  op->service = shared_from_this();
  op->keys = keys_of(resource);
  op->slot = slot_of(op->keys.lease());
  const auto sets = keys_of(resource, LeaseKind::shared);
  op->token = sets.queue();  // (the op's own strings: its words point into them)
  op->arg = sets.queue_expiry();
  op->announce = std::string(cluster() ? "S" : "P").append(waiters_->channel_prefix(op->slot));
  op->resource_announce = announce_of(resource);
  op->set_args(force_release_script,
               {op->keys.lease(), op->keys.queue(), op->keys.queue_expiry(), op->keys.fence(),
                op->keys.info(), op->token, op->arg},
               {op->announce, op->resource_announce});
  auto shared = std::make_shared<BoolHandler>(std::move(handler));
  op->done = [self = shared_from_this(), shared](error_code ec, Reply reply) {
    bool released = false;
    if (!ec && reply.is_error()) {
      ec = self->server_error(reply);
    } else if (!ec) {
      const auto read = replies::read_compare(reply);  // 1: somebody held it, 0: nobody
      if (read == replies::Compare::malformed) ec = error::unexpected_reply;
      released = read == replies::Compare::done;
    }
    deliver(self->executor_, Defer::no, std::move(*shared), ec, released);
  };
  on_strand(
      [self = shared_from_this(), op = std::move(op)]() mutable { self->send(std::move(op)); });
}

void LockService::release(std::string resource, std::string token, LeaseKind kind,
                          BoolHandler handler, bool by_guard, Clock::time_point patience,
                          Clock::time_point give_back_until, std::string_view member_suffix) {
  if (!alive_.load()) return;
  auto op = std::make_shared<CompareOp>(std::move(handler));
  if (by_guard && observer()) op->resource = resource;
  prepare_release(*this, *op, std::move(resource), std::move(token), kind, member_suffix);
  op->patience = patience;
  op->give_back_until = give_back_until;
  on_strand(
      [self = shared_from_this(), op = std::move(op)]() mutable { self->send(std::move(op)); });
}

void LockService::release_detached(std::string resource, std::string token, LeaseKind kind,
                                   bool by_guard, Clock::time_point patience) noexcept {
  try {
    // A guard's release on destruction: also resent through link failures while its lease
    // may still be valid.
    release(std::move(resource), std::move(token), kind, BoolHandler{}, by_guard, patience,
            /*give_back_until=*/std::min(patience, Clock::now() + give_back_horizon));
  } catch (...) {
    // Out of memory while posting: the lease expires after its ttl instead.
  }
}

void LockService::give_back(std::string resource, std::string token, LeaseKind kind,
                            Clock::time_point until, std::string_view member_suffix) noexcept {
  if (!alive_.load()) return;
  try {
    if (redlock()) {
      on_strand([self = shared_from_this(), resource = std::move(resource),
                 token = std::move(token), until] {
        for (std::size_t i = 0; i < self->config_.nodes.size(); ++i) {
          give_back_on(*self, i, resource, token, until);
        }
      });
      return;
    }
    // Routed like any release (Cluster redirects), retried through moving slots and link
    // failures until `until`.
    release(std::move(resource), std::move(token), kind, BoolHandler{}, /*by_guard=*/false, until,
            until, member_suffix);
  } catch (...) {
    // Out of memory: the lease expires after its ttl instead.
  }
}

void LockService::extend(std::string resource, std::string token, std::shared_ptr<LeaseState> lease,
                         milliseconds ttl, BoolHandler handler) {
  if (!alive_.load()) return;
  if (auto broken = check_extension(ttl)) {
    return deliver(executor_, Defer::yes, std::move(handler), broken.error, false);
  }
  auto op = std::make_shared<CompareOp>(std::move(handler));
  const auto kind = lease ? lease->kind : LeaseKind::mutex;
  prepare_extend(*this, *op, resource, std::move(token), kind, to_decimal(ttl.count()));
  op->lease = std::move(lease);
  op->new_ttl = ttl;
  op->command = LeaseCommand::extend;
  // min_replicas: on the connection whose WAIT counts it (the acquire's).
  op->durable = op->lease && op->lease->min_replicas > 0;
  if (observer()) op->resource = resource;
  on_strand(
      [self = shared_from_this(), op = std::move(op)]() mutable { self->send(std::move(op)); });
}

void LockService::forget(const std::shared_ptr<LeaseState>& lease) noexcept {
  lease->released.store(true);
  if (!lease->auto_renew && !lease->has_waiter.load()) return;  // nothing on the strand
  if (!alive_.load()) return;
  try {
    on_strand([self = shared_from_this(), lease] {
      self->watchdog_.unwatch(*lease);
      if (lease->lost_waiter) {
        auto handler = std::move(*lease->lost_waiter);
        lease->lost_waiter.reset();
        deliver(self->executor_, Defer::no, std::move(handler),
                error_code(asio::error::operation_aborted));
      }
    });
  } catch (...) {
    // Out of memory: the entry stays until its next check, which sees `released`.
  }
}

void LockService::wait_lost(std::shared_ptr<LeaseState> lease, ErrorHandler handler) {
  if (!alive_.load()) return;
  on_strand([self = shared_from_this(), lease = std::move(lease),
             handler = std::move(handler)]() mutable {
    if (lease->lost.load()) {
      return deliver(self->executor_, Defer::yes, std::move(handler), error_code(error::lock_lost));
    }
    lease->has_waiter.store(true);
    if (lease->released.load()) {
      return deliver(self->executor_, Defer::yes, std::move(handler),
                     error_code(asio::error::operation_aborted));
    }
    if (lease->lost_waiter) {
      auto previous = std::move(*lease->lost_waiter);
      lease->lost_waiter.reset();
      deliver(self->executor_, Defer::yes, std::move(previous),
              error_code(asio::error::operation_aborted));
    }
    lease->lost_waiter.emplace(std::move(handler));
  });
}

}  // namespace redis_lock::detail
