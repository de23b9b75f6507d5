// SPDX-License-Identifier: MIT
// The context every op runs in (engine.hpp).
#include "engine.hpp"

#include "completion.hpp"
#include "decimal.hpp"
#include "lease_ops.hpp"
#include "redis_lock_scripts.hpp"
#include "replies.hpp"
#include "script_table.hpp"
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

Engine::Engine(asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options)
    : executor_(std::move(ex)),
      options_(std::move(options)),
      config_(config),
      shape_(find_shape(config.topology)) {
  if (!shape_) shape_ = &standalone_shape();  // with the config's error: nothing is sent
  const auto broken = prepare(config_, options_, tls_);
  config_error_ = broken.error;
  config_rule_ = broken.rule;
  strand_.emplace(asio::make_strand(executor_));
  router_ = std::make_shared<Router>(*strand_, std::move(config), shape_->routing(),
                                     options_.client_name, tls_);
  waiters_ =
      std::make_shared<Waiters>(router_, options_.key_prefix, random_token().substr(0, 16),
                                shape_->routing().slot_map, options_.keep_subscriber_connection);
  // Every command connection has our scripts before its first command: a NOSCRIPT resend
  // would run after commands sent later (a Redlock give-back after the next attempt's grant).
  // The scripts its locks use on every acquire and release (script_table.hpp says which).
  std::vector<std::string_view> scripts;
  for (const auto& e : scripts::table()) {
    if (shape_->preloads(e.layout.preload)) scripts.push_back(e.script.body);
  }
  router_->set_preload(std::move(scripts));
  if (options_.use_functions) router_->set_functions(function_library, function_probe);
  router_->set_refusal_handler(
      [last_error = last_error_](std::string_view text) { last_error->set(text); });
  router_->accept_evicting_server(options_.accept_evicting_server);
  // Each connection reports each handshake's finding; the manager says each once (see
  // ServerNotice). The handler runs on the strand, which every connection shares, and may
  // outlive the engine (a connection's late handshake), hence its own shared state.
  router_->set_notice_handler([last_error = last_error_, observer = options_.observer,
                               said = std::make_shared<SaidNotices>()](const ServerNotice& n) {
    if (!said->first_time(n)) return;
    last_error->set(n.text);
    if (observer) observer->on_server_notice(n);
  });
}

bool Engine::SaidNotices::first_time(const ServerNotice& notice) {
  if (notice.kind == ServerNoticeKind::policy_unknown) return !std::exchange(unknown, true);
  std::string key(notice.address);
  key += '\0';
  key += notice.text;
  return evicting.insert(std::move(key)).second;
}

Engine::~Engine() = default;

void Engine::watch_context_shutdown() {
  waiters_->attach();
  watch_shutdown(executor_, weak_from_this());
}

void Engine::on_context_shutdown() noexcept {
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

void Engine::cancel_all() {
  if (!alive_.load()) return;
  on_strand([self = shared_from_this()] {
    // A snapshot: a cancelled op leaves the list, and a completion handler run inline may
    // start new operations, which this call does not cancel.
    for (const auto& op : self->pending_.snapshot()) op->cancel();
  });
}

bool Engine::give_back_now(std::size_t node, std::optional<Router::Pool> behind,
                           std::string_view resource, std::string_view token, AcquireKind kind,
                           std::string_view member_suffix) noexcept {
  if (!router_ || shape_->gives_back_per_node()) return false;
  try {
    CompareOp op{BoolHandler{}};
    prepare_release(*this, op, resource, std::string(token), kind, member_suffix);
    return router_->write_now(node, behind, op.Routed::command());
  } catch (const std::exception&) {
    return false;
  }
}

std::string Engine::last_server_error() const {
  std::lock_guard lock(last_error_->mutex);
  return last_error_->text;
}

error_code Engine::server_error(const Reply& reply) {
  last_error_->set(reply.str);
  return error_from_reply(reply.str);
}

ResourceKeys Engine::keys_of(std::string_view resource, AcquireKind kind) const {
  return make_keys(options_.key_prefix, resource, is_lease_set(kind));
}

std::string Engine::announce_of(std::string_view resource) const {
  // PUBLISH, also on a Cluster (which forwards it to every node): an observer's subscription
  // then never moves with a slot, and SUBSCRIBE / UNSUBSCRIBE are answered as commands.
  return std::string("P").append(options_.key_prefix).append("leader:").append(resource);
}

std::string Engine::notify_of(std::uint16_t slot) const {
  return std::string(shape_->routing().slot_map ? "S" : "P").append(waiters_->channel_prefix(slot));
}

std::uint16_t Engine::slot_of(std::string_view lease_key) const noexcept {
  return shape_->slot_of(lease_key);
}

void Engine::send(std::shared_ptr<ScriptOp> op) {
  if (!router_) return;  // the context shut down: drop, as Asio drops pending handlers
  shape_->send(router_, config_, std::move(op));
}

void Engine::confirm_replicas(std::size_t node, int replicas, milliseconds timeout,
                              Confirmed done) {
  if (!router_) return;
  const auto count = to_decimal(replicas);
  const auto ms = to_decimal(timeout.count());
  const std::string_view command[] = {"WAIT", count, ms};
  // The server answers WAIT after up to `timeout`: the command's own deadline comes on top.
  router_->connection(node, Router::Pool::durable)
      .execute(command,
               Connection::Callback([self = shared_from_this(), replicas, done = std::move(done)](
                                        error_code ec, Reply reply) mutable {
                 std::string_view detail;
                 if (!ec && reply.is_error()) {
                   ec = self->server_error(reply);
                   detail = reply.str;
                 } else if (!ec) {
                   ec = replies::replication_outcome(reply, replicas);
                 }
                 std::move(done)(ec, detail);
               }),
               nullptr, timeout);
}

bool Engine::retry_later(Clock::time_point until, milliseconds delay, std::function<void()> again) {
  if (!router_ || !strand_) return false;
  const auto at = Clock::now() + delay;
  if (at >= until) return false;
  auto timer = std::make_shared<asio::steady_timer>(*strand_, at);
  timer->async_wait([timer, again = std::move(again)](error_code ec) {
    if (!ec) again();
  });
  return true;
}

void Engine::watch(const std::shared_ptr<LeaseState>& lease) {
  if (router_) watchdog_.watch(lease);
}

void Engine::stop_renewing(LeaseState& lease) {
  watchdog_.unwatch(lease);
  lease.auto_renew = false;
}

void Engine::add_waiter(const std::string& token, std::weak_ptr<Waiter> waiter,
                        std::uint16_t slot) {
  if (!router_ || !shape_->queues()) return;  // they back off; no release is published
  waiters_->add(token, std::move(waiter), slot);
}

void Engine::remove_waiter(const std::string& token) { waiters_->remove(token); }

// ---------------------------------------------------------------------------------------
// The operations

void Engine::report_refusal(std::string resource, error_code ec, std::string_view why,
                            AcquireKind kind, Diagnostics* diagnostics) {
  tell(diagnostics, ec, why);
  if (!observer()) return;
  on_strand([self = shared_from_this(), resource = std::move(resource), ec, why, kind] {
    AcquireEvent e{resource, AcquireOutcome::failed, ec, Clock::duration::zero(), 0, false, 0};
    e.detail = why;
    e.kind = kind;
    self->observer()->on_acquire(e);
  });
}

void Engine::report_lease_refusal(std::string resource, LeaseCommand command, error_code ec,
                                  std::string_view why, Diagnostics* diagnostics) {
  tell(diagnostics, ec, why);
  if (!observer()) return;
  on_strand([self = shared_from_this(), resource = std::move(resource), command, ec,
             why = std::string(why)] {
    self->observer()->on_lease({resource, command, false, ec, Clock::duration::zero(), {}, why});
  });
}

void Engine::report_admin(AdminCommand command, std::string resource, error_code ec,
                          Clock::time_point started, std::string detail) {
  if (!observer()) return;
  on_strand([self = shared_from_this(), command, resource = std::move(resource), ec, started,
             detail = std::move(detail)] {
    self->observer()->on_admin({resource, command, ec, Clock::now() - started, detail});
  });
}

void Engine::refuse(std::string resource, error_code ec, std::string_view why,
                    AcquireHandler handler, AcquireKind kind, Diagnostics* diagnostics) {
  report_refusal(std::move(resource), ec, why, kind, diagnostics);
  deliver(executor_, Defer::yes, std::move(handler), ec, Grant{});
}

Violation Engine::check_admin_call(std::string_view resource) const {
  if (config_error_) return {config_error_, config_rule_};
  return check_admin(resource, *shape_);
}

void Engine::release(ReleaseRequest request, BoolHandler handler) {
  if (!alive_.load()) return;
  auto op = std::make_shared<CompareOp>(std::move(handler));
  prepare_release(*this, *op, request.resource, std::move(request.token), request.kind,
                  request.member_suffix);
  if (request.by_guard && observer()) op->resource = std::move(request.resource);  // the event's
  op->patience = request.patience;
  op->give_back_until = request.give_back_until;
  op->diagnostics = request.diagnostics;
  // A caller's release that times out waits for its late reply while the lease may be valid.
  op->wants_late = static_cast<bool>(op->handler) && request.patience != Clock::time_point{};
  // A guard's async_release: in the initiating call, as for acquire (acquire_op.cpp's start_op).
  if (op->handler) install_cancellation(op->handler, op);
  on_strand(
      [self = shared_from_this(), op = std::move(op), ended = std::move(request.ended)]() mutable {
        if (ended) self->report_hold_end(*ended, HoldEnd::released);
        self->send(std::move(op));
      });
}

void Engine::release_held(std::string resource, std::string token,
                          std::shared_ptr<LeaseState> lease, BoolHandler handler,
                          Diagnostics* diagnostics) {
  Clock::time_point patience{};
  auto kind = AcquireKind::mutex;
  std::shared_ptr<LeaseState> ended;
  if (lease) {
    kind = lease->kind;
    const bool lost = forget(lease);  // stops its renewal
    patience = lease->valid_until();
    // Its end, unless its loss was reported first or will be (forget), or its acquire never
    // was. (Should the release fail to allocate below, the end goes unreported: a
    // held-leases gauge stays one too high after an out-of-memory.)
    if (!lost && lease->hold_reported.exchange(false)) ended = std::move(lease);
  }
  // A release that could not be written (no connection in time: a server restarting, a
  // storm of connects) is sent again while the lease may be valid: before the caller hears,
  // or (a guard dropped, nobody waits) before the lease is left to expire.
  ReleaseRequest request{.resource = std::move(resource),
                         .token = std::move(token),
                         .kind = kind,
                         .by_guard = true,
                         .patience = patience,
                         .give_back_until = std::min(patience, Clock::now() + give_back_horizon),
                         .ended = std::move(ended),
                         .diagnostics = diagnostics};
  if (handler) return release(std::move(request), std::move(handler));
  try {
    release(std::move(request), BoolHandler{});
  } catch (...) {
    // Out of memory while posting: the lease expires after its ttl instead.
  }
}

void Engine::send_renewal(const std::shared_ptr<LeaseState>& lease, Watchdog& watchdog,
                          Clock::time_point sent) {
  detail::send_renewal(*this, lease, watchdog, sent);
}

void Engine::report_hold_end(const LeaseState& lease, HoldEnd end) noexcept {
  if (auto* o = observer()) {
    o->on_hold_end({lease.resource, lease.kind, end, Clock::now() - lease.held_since});
  }
}

void Engine::give_back(std::string resource, std::string token, AcquireKind kind,
                       Clock::time_point until, std::string_view member_suffix) noexcept {
  if (!alive_.load()) return;
  try {
    if (shape_->gives_back_per_node()) {
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
    release({.resource = std::move(resource),
             .token = std::move(token),
             .kind = kind,
             .patience = until,
             .give_back_until = until,
             .member_suffix = member_suffix},
            BoolHandler{});
  } catch (...) {
    // Out of memory: the lease expires after its ttl instead.
  }
}

bool Engine::forget(const std::shared_ptr<LeaseState>& lease) noexcept {
  // Read before `released` is set: after it, the watchdog would skip the lease.
  const bool lost = lease->known_lost(Clock::now()) && !lease->lost.load();
  lease->released.store(true);
  if (!lease->auto_renew && !lease->has_waiter.load()) return false;  // nothing on the strand
  if (!alive_.load()) return false;
  try {
    on_strand([self = shared_from_this(), lease, lost] {
      if (lost) return self->watchdog_.mark_lost(lease);  // ends the wait with lock_lost
      self->watchdog_.unwatch(*lease);
      if (auto waiter = lease->take_lost_waiter()) {
        deliver(self->executor_, Defer::no, std::move(*waiter),
                error_code(asio::error::operation_aborted));
      }
    });
    return lost;
  } catch (...) {
    // Out of memory: the entry stays until its next check, which sees `released`.
    return false;
  }
}

// ---------------------------------------------------------------------------------------
// Grant: a lease on its way to the caller

Grant::Grant(std::shared_ptr<Engine> e, std::string r, std::string t, std::uint64_t f,
             std::shared_ptr<LeaseState> l) noexcept
    : engine(std::move(e)),
      resource(std::move(r)),
      token(std::move(t)),
      fence(f),
      lease(std::move(l)) {
  if (engine) {
    executor = engine->executor();
    alive = engine->context_alive();
  }
}

Grant& Grant::operator=(Grant&& other) noexcept {
  if (this != &other) {
    release();
    engine = std::move(other.engine);
    resource = std::move(other.resource);
    token = std::move(other.token);
    fence = std::exchange(other.fence, 0);
    lease = std::move(other.lease);
    executor = std::move(other.executor);
    alive = std::move(other.alive);
  }
  return *this;
}

Grant::~Grant() { release(); }

void Grant::release() noexcept {
  if (!engine) return;
  auto e = std::move(engine);
  engine.reset();
  // Reported to the observer as the release of a guard, as when the guard this grant would
  // have become was dropped.
  e->release_held(std::move(resource), std::move(token), std::exchange(lease, nullptr), {});
  resource.clear();
  token.clear();
  fence = 0;
}

}  // namespace redis_lock::detail
