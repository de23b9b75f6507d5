// SPDX-License-Identifier: MIT
// The single-authority lock engine: acquire/release/extend scripts over one Connection,
// the simple waiting loop, and detection of the execution context's shutdown.
#include "lock_service.hpp"

#include "completion.hpp"
#include "keys.hpp"
#include "redis_lock_scripts.hpp"
#include "tls.hpp"
#include "token.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <charconv>
#include <random>
#include <span>
#include <vector>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Leases longer than this are refused as a likely unit mistake (and to keep PX in range).
constexpr milliseconds max_ttl{milliseconds(315'360'000'000)};  // 10 years
constexpr milliseconds first_backoff{2};
// Waiting: a waiter without a notification polls at most this often; a queued waiter keeps
// its place while it retries within `waiter_ttl`; a lease handed to a waiter that does not
// claim it (it died) lapses after `claim_window`.
constexpr milliseconds max_backoff{500};
// A waiter that died therefore holds back a free lock for at most waiter_ttl (its place,
// since its last refresh) + claim_window (a lease handed to it) = 1.8 s, whatever the ttl.
// Shorter would trade fairness, not safety: a live waiter that misses a refresh by more
// than waiter_ttl - refresh_interval, or a claim by claim_window, goes to the back.
constexpr milliseconds waiter_ttl{1200};
constexpr std::string_view waiter_ttl_ms = "1200";
constexpr milliseconds refresh_interval{400};  // a third of waiter_ttl
constexpr std::string_view claim_window_ms = "600";
// A give-back that met a link failure is sent again after this, doubling up to the max.
constexpr milliseconds give_back_first_retry{25};
constexpr milliseconds give_back_max_retry{500};
constexpr milliseconds give_back_horizon{60'000};

/// Learns of the execution context's shutdown, so that guards outliving their io_context
/// neither post onto it nor destroy I/O objects of a dead context.
class ShutdownWatch final : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;
  explicit ShutdownWatch(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}

  void add(std::weak_ptr<LockService> entry) {
    std::lock_guard lock(mutex_);
    std::erase_if(services_, [](const auto& w) { return w.expired(); });
    services_.push_back(std::move(entry));
  }

 private:
  void shutdown() override {
    std::vector<std::weak_ptr<LockService>> services;
    {
      std::lock_guard lock(mutex_);
      services.swap(services_);
    }
    for (auto& weak : services) {
      if (auto alive = weak.lock()) alive->on_context_shutdown();
    }
  }

  std::mutex mutex_;
  std::vector<std::weak_ptr<LockService>> services_;
};

asio::execution_context::id ShutdownWatch::id;

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

constexpr std::string_view evalsha = "EVALSHA";
constexpr std::string_view eval = "EVAL";

std::string to_decimal(long long value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, end);
}

/// The address in a Cluster redirection "MOVED <slot> <host>:<port>" (or "ASK ..."); empty
/// if the text has no such part.
std::string_view redirect_address(std::string_view error) {
  const auto slot = error.find(' ');
  if (slot == std::string_view::npos) return {};
  const auto address = error.find(' ', slot + 1);
  if (address == std::string_view::npos) return {};
  return error.substr(address + 1);
}

/// An acquire script's reply {1, fencing token}: the lease was taken.
bool grants(const Reply& reply) {
  return reply.type == Reply::Type::array && !reply.elements.empty() &&
         reply.elements[0].type == Reply::Type::integer && reply.elements[0].integer == 1;
}

/// Whether a command that failed with `ec` may have run on the server: its link failed
/// after it was written (a connect failure fails only commands that never left the queue;
/// a timeout has its late reply instead).
bool may_have_run(error_code ec) {
  return ec == error::connection_lost || ec == error::protocol_error || ec == error::read_only;
}

/// What a WAIT's (non-error) reply says of `wanted` replicas: no error, not_replicated, or
/// unexpected_reply.
error_code replication_outcome(const Reply& reply, int wanted) {
  if (reply.type != Reply::Type::integer) return error::unexpected_reply;
  return reply.integer < wanted ? error_code(error::not_replicated) : error_code{};
}

/// The next wait of a give-back's retries: doubling, up to give_back_max_retry.
milliseconds doubled(milliseconds backoff) { return std::min(backoff * 2, give_back_max_retry); }

Reply integer_reply(long long value) {
  Reply r;
  r.type = Reply::Type::integer;
  r.integer = value;
  return r;
}

milliseconds jittered(milliseconds cap) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<long long> dist(1, std::max<long long>(1, cap.count()));
  return milliseconds(dist(rng));
}

}  // namespace

// Handlers are only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
/// One script call on one lease. Its argument views point into its own strings, which never
/// move (ops live in a shared_ptr). The op also takes the late reply if its command times out.
/// A command that owns its arguments: a Redlock call's, which may be resent after NOSCRIPT
/// when the op it came from has moved on to another attempt (and another token).
struct OwnedCommand {
  explicit OwnedCommand(std::span<const std::string_view> argv) : args(argv.begin(), argv.end()) {}
  std::vector<std::string> args;
};

struct ScriptOp : LateReplies, std::enable_shared_from_this<ScriptOp> {
  virtual ~ScriptOp() = default;
  /// The reply or the error; called exactly once.
  virtual void on_reply(error_code ec, Reply reply) = 0;
  void on_late_reply(error_code, const Reply&) override {}
  bool wants_late_reply() const noexcept { return wants_late; }

  void set_args(const Script& s, std::initializer_list<std::string_view> script_keys,
                std::initializer_list<std::string_view> script_args) {
    script = &s;
    redirects = 0;
    retries = 0;
    retry_until = {};
    argv[0] = evalsha;
    argv[1] = s.sha1;
    static constexpr std::string_view counts[] = {"0", "1", "2", "3", "4"};
    argv[2] = counts[script_keys.size()];
    argc = 3;
    for (auto k : script_keys) argv[argc++] = k;
    for (auto a : script_args) argv[argc++] = a;
  }
  std::span<const std::string_view> command() const noexcept { return {argv.data(), argc}; }
  /// Before the same command is sent again from the start (a give-back's retry).
  void rearm() noexcept {
    redirects = 0;
    retries = 0;
    retry_until = {};
  }

  std::shared_ptr<LockService> service;
  ResourceKeys keys;
  std::string token;
  std::string arg;  // ttl in ms (acquire, extend) or the release channel
  const Script* script = nullptr;
  std::array<std::string_view, 16> argv{};
  std::size_t argc = 0;
  bool is_acquire = false;             // replies {taken, fence|pttl}; else 1/0
  std::vector<NodeResult> node_results;  // Redlock: each master's answer
  std::uint16_t slot = 0;              // routes the command (Cluster)
  std::size_t node = Router::no_node;  // where it was sent last
  int redirects = 0;                   // MOVED/ASK followed for this command
  int retries = 0;                     // TRYAGAIN/CLUSTERDOWN retries of this command
  Clock::time_point retry_until{};     // TRYAGAIN/CLUSTERDOWN: retried until then
  Clock::time_point patience{};        // ... and at least until then (a waiting acquire)
  bool sent_body = false;
  bool wants_late = false;
  bool durable = false;  // goes on the connection that may block on WAIT
};

// Handlers are only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
//
// States of a waiting acquire (all on the strand): an attempt in flight, or asleep on
// `timer` until the lease could be free. Cancellation sets `cancelled`; the op then gives
// back whatever it holds or has queued before completing with operation_aborted.
struct AcquireOp final : ScriptOp {
  explicit AcquireOp(AcquireHandler h) : handler(std::move(h)) {
    wants_late = true;
    is_acquire = true;
  }

  void attempt();
  void on_reply(error_code ec, Reply reply) override;
  void on_late_reply(error_code ec, const Reply& reply) override {
    // The attempt timed out but may have run: give back what it took (or the place it
    // queued for). An error reply means it never ran; an error without a reply means we
    // will never know, so release anyway.
    if (!ec && reply.is_error()) return;
    if (ec || grants(reply) || options.wait.count() > 0) give_back();
  }
  /// The lease this attempt may hold, or its queue place, expires by then at the latest;
  /// a give-back is not retried past give_back_horizon either (a server gone for good must
  /// not keep the manager busy for a long ttl).
  Clock::time_point give_back_until() const noexcept {
    return attempt_started + std::min(std::max(options.ttl, waiter_ttl), give_back_horizon);
  }
  void give_back() { service->give_back(resource, token, give_back_until()); }
  void sleep_until_retry(long long pttl);
  bool within_wait(error_code ec) const;
  void wait_out_outage(error_code ec, bool gave_back);
  /// Full-jitter exponential backoff: this sleep, and the next one doubled.
  milliseconds next_backoff();
  /// The next attempt after `sleep` (at the wait's deadline at the latest).
  void attempt_after(milliseconds sleep);
  void cancel();
  void confirm_replicated(LockGuard guard) {
    // WAIT on the connection that carried the acquire: it counts the replicas that have
    // everything written on it so far, our SET included.
    auto shared = std::make_shared<LockGuard>(std::move(guard));
    in_flight = true;
    service->wait_replicas(
        node, options.min_replicas, options.replication_timeout,
        Connection::Callback([op = std::static_pointer_cast<AcquireOp>(shared_from_this()),
                              shared](error_code ec, Reply reply) {
          op->in_flight = false;
          if (!ec && reply.is_error()) ec = op->service->server_error(reply);
          if (!ec) ec = replication_outcome(reply, op->options.min_replicas);
          if (!ec && op->cancelled) ec = asio::error::operation_aborted;
          if (ec) return op->finish(ec, LockGuard{});  // *shared releases the lease
          op->finish({}, std::move(*shared));
        }));
  }
  /// A release handed us the lease (or may have): try now instead of at the timer.
  void nudge() {
    if (done || cancelled) return;
    if (in_flight) {
      notified = true;  // the reply in flight may predate the hand-off
    } else if (timer) {
      timer->cancel();  // its handler attempts at once
    }
  }
  void finish(error_code ec, LockGuard guard) {
    if (done) return;
    done = true;
    if (auto* observer = service->observer()) report(*observer, ec, guard);
    if (registered) service->remove_waiter(token);
    deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(guard));
  }
  /// Leaves the queue (and hands on a lease that reached us meanwhile).
  void leave() {
    if (joined) give_back();
    joined = false;
  }

  void report(Observer& observer, error_code ec, const LockGuard& guard) const noexcept {
    AcquireEvent e{resource, AcquireOutcome::acquired, ec, Clock::now() - called, attempts,
                   waited, guard.fencing_token(), node_results};
    if (ec == asio::error::operation_aborted) {
      e.outcome = AcquireOutcome::cancelled;
    } else if (ec) {
      e.outcome = AcquireOutcome::failed;
    } else if (!guard) {
      e.outcome = AcquireOutcome::not_acquired;
    }
    observer.on_acquire(e);
  }

  AcquireHandler handler;
  std::string resource;
  LockOptions options;
  Clock::time_point called = Clock::now();
  int attempts = 0;
  bool waited = false;     // joined the queue at least once
  Clock::time_point deadline;
  Clock::time_point attempt_started;
  milliseconds backoff{first_backoff};
  std::unique_ptr<asio::steady_timer> timer;
  bool queue_up = false;   // this attempt joins the queue if the lease is held
  bool joined = false;     // our token may be in the queue
  bool registered = false; // listed with the service for notifications
  bool notified = false;   // a notification came while an attempt was in flight
  error_code last_error;   // of the last attempt, while waiting out an outage
  bool in_flight = false;  // an attempt awaits its reply
  bool cancelled = false;
  bool done = false;
};

/// A compare-and-act script on one lease: release (arg = channel) or extend (arg = ttl).
struct CompareOp final : ScriptOp {
  explicit CompareOp(BoolHandler h) : handler(std::move(h)) {}
  std::string member;                 // our queue member, removed by a release
  std::shared_ptr<LeaseState> lease;  // an extension moves its validity (or finds it lost)
  std::string resource;               // set when the observer hears of this op
  LeaseCommand command = LeaseCommand::release;
  std::chrono::milliseconds new_ttl{};
  Clock::time_point sent = Clock::now();
  Clock::time_point give_back_until{};  // a give-back: resent through link failures until then
  milliseconds backoff{give_back_first_retry};

  void on_reply(error_code ec, Reply reply) override {
    if (ec && !handler && give_back_until != Clock::time_point{}) {
      // The link failed: the release may not have run. Again once a link works.
      auto self = std::static_pointer_cast<CompareOp>(shared_from_this());
      if (service->retry_later(give_back_until, std::exchange(backoff, doubled(backoff)), [self] {
            self->rearm();
            self->service->send(self);
          })) {
        return;
      }
    }
    if (!ec && lease && lease->min_replicas > 0 && command == LeaseCommand::extend &&
        reply.type == Reply::Type::integer && reply.integer == 1) {
      return confirm_replicated();
    }
    finish(ec, std::move(reply));
  }

  /// min_replicas: an extension counts once WAIT says enough replicas have it.
  void confirm_replicated() {
    service->wait_replicas(
        node, lease->min_replicas, lease->replication_timeout,
        Connection::Callback([self = std::static_pointer_cast<CompareOp>(shared_from_this())](
                                 error_code ec, Reply reply) {
          if (!ec && reply.is_error()) ec = self->service->server_error(reply);
          if (!ec) ec = replication_outcome(reply, self->lease->min_replicas);
          // Not confirmed: an error, and the lease's validity stays where it was.
          if (ec) return self->finish(ec, Reply{});
          self->finish({}, integer_reply(1));
        }));
  }

  void finish(error_code ec, Reply reply) {
    bool done = false;
    if (!ec && reply.is_error()) {
      ec = service->server_error(reply);
    } else if (!ec && reply.type != Reply::Type::integer) {
      ec = error::unexpected_reply;
    } else if (!ec) {
      done = reply.integer == 1;
      if (lease && done) lease->confirm(sent, new_ttl);
      if (lease && !done) service->mark_lost(lease);
    }
    if (auto* observer = service->observer(); observer && !resource.empty()) {
      observer->on_lease({resource, command, done, ec, Clock::now() - sent, node_results});
    }
    if (!handler) return;  // a detached release: the ttl covers any failure
    deliver(service->executor(), Defer::no, std::move(handler), ec, done);
  }

  BoolHandler handler;
};

/// One watchdog extension.
struct RenewOp final : ScriptOp {
  std::weak_ptr<LeaseState> lease;
  std::string ttl_ms;
  Clock::time_point sent;
  void on_reply(error_code ec, Reply reply) override {
    auto held = lease.lock();
    if (!held) return;
    if (!ec && held->min_replicas > 0 && reply.type == Reply::Type::integer &&
        reply.integer == 1) {
      // min_replicas: the renewal counts once WAIT says enough replicas have it; until
      // then the lease is not extended (retried, and lost at valid_until()).
      return service->wait_replicas(
          node, held->min_replicas, held->replication_timeout,
          Connection::Callback([self = std::static_pointer_cast<RenewOp>(shared_from_this()),
                                reply](error_code wait_ec, Reply count) {
            auto again = self->lease.lock();
            if (!again) return;
            // (An error reply, or any other refusal, is reported as not_replicated.)
            if (!wait_ec && (count.is_error() || replication_outcome(count, again->min_replicas))) {
              wait_ec = error::not_replicated;
            }
            self->service->renewed(again, self->sent, wait_ec, wait_ec ? Reply{} : reply,
                                   self->node_results);
          }));
    }
    service->renewed(held, sent, ec, reply, node_results);
  }
};

namespace {
// Checks the configuration (nothing has been sent) and reads the TLS files, once.
error_code prepare(const ConnectionConfig& config, const ManagerOptions& options,
                   std::shared_ptr<asio::ssl::context>& tls) {
  if (auto ec = validate(config)) return ec;
  // A brace in the prefix would become the keys' hash tag: the lease and its fencing
  // counter could land in different Cluster slots.
  if (options.key_prefix.find_first_of("{}") != std::string::npos) return error::invalid_argument;
  // Redis refuses client names with spaces, newlines or other unprintable bytes.
  if (!is_printable_word(options.client_name)) return error::invalid_argument;
  return make_tls_context(config, tls);
}
}  // namespace

LockService::LockService(asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options)
    : executor_(std::move(ex)),
      options_(std::move(options)),
      config_(config),
      config_error_(prepare(config_, options_, tls_)),
      strand_(asio::make_strand(executor_)),
      router_(std::make_shared<Router>(*strand_, std::move(config), options_.client_name, tls_)),
      manager_id_(random_token().substr(0, 16)),
      notify_prefix_(options_.key_prefix + "notify:") {
  // Every command connection has our scripts before its first command: a NOSCRIPT resend
  // would run after commands sent later (a Redlock give-back after the next attempt's grant).
  std::vector<std::string_view> scripts = {acquire_script.body, release_script.body,
                                           extend_script.body};
  if (redlock()) scripts.push_back(raise_fence_script.body);
  router_->set_preload(std::move(scripts));
}

LockService::~LockService() = default;

void LockService::watch_context_shutdown() {
  // (Here rather than in the constructor: the handlers hold us weakly.)
  router_->set_subscriber_setup([weak = weak_from_this()](Connection& c, std::size_t node) {
    c.set_subscriber(
        [weak](const Reply& push) {
          if (auto self = weak.lock()) self->on_notify(push);
        },
        [weak, node] {
          if (auto self = weak.lock()) self->on_subscriber_down(node);
        });
  });
  auto& ctx = asio::query(executor_, asio::execution::context);
  asio::use_service<ShutdownWatch>(ctx).add(weak_from_this());
}

void LockService::on_context_shutdown() noexcept {
  alive_.store(false);
  context_alive_->store(false);
  if (router_) {
    router_->shutdown();
    router_.reset();
  }
  subscriptions_.clear();
  waiters_.clear();
  renewals_.clear();
  renew_timer_.reset();
  strand_.reset();
  executor_ = asio::any_io_executor();
}

template <class Fn>
void LockService::on_strand(Fn&& fn) {
  // dispatch: a command issued from a completion handler (already on the strand) is queued
  // at once and joins the write of its neighbours; from elsewhere it is posted.
  asio::dispatch(*strand_, std::forward<Fn>(fn));
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

void LockService::send(std::shared_ptr<ScriptOp> op, std::size_t ask_node) {
  if (!router_) return;  // the context shut down: drop, as Asio drops pending handlers
  if (config_.topology == Topology::redlock) return send_to_all(std::move(op));
  std::shared_ptr<LateReplies> late;
  if (op->wants_late_reply()) late = op;
  const auto command = op->command();
  const bool asking = ask_node != Router::no_node;
  op->node = asking ? ask_node : router_->node_for(op->slot);
  Connection& target =
      router_->connection(op->node, op->durable ? Router::Pool::durable : Router::Pool::commands);
  if (asking) {
    // ASK: the slot is being moved and this key is already at the target, which serves it
    // only to a client that says ASKING first, on the same connection, for one command.
    static constexpr std::string_view asking_command[] = {"ASKING"};
    target.execute(asking_command, Connection::Callback([](error_code, Reply) {}));
  }
  target.execute(
      command,
      Connection::Callback([op = std::move(op)](error_code ec, Reply reply) mutable {
        auto* service = op->service.get();
        if (!ec && reply.is_error()) {
          if (starts_with(reply.str, "NOSCRIPT") && !op->sent_body) {
            // The script cache was flushed (or this is a new server): send the body once.
            op->sent_body = true;
            op->argv[0] = eval;
            op->argv[1] = op->script->body;
            return service->send(std::move(op));
          }
          if (service->redirected(op, reply)) return;
        } else if (ec && service->router_ && service->cluster()) {
          // The node may have failed over: look at the map again (the op itself fails;
          // whoever retries it finds the new master).
          service->router_->refresh();
        }
        op->on_reply(ec, std::move(reply));
      }),
      std::move(late));
}

bool LockService::redirected(std::shared_ptr<ScriptOp>& op, const Reply& reply) {
  if (!router_ || !cluster()) return false;
  constexpr int max_redirects = 5;
  const std::string_view text = reply.str;
  const bool moved = starts_with(text, "MOVED ");
  if (moved || starts_with(text, "ASK ")) {
    const auto address = redirect_address(text);
    if (address.empty() || ++op->redirects > max_redirects) return false;
    const auto node = router_->node_at(address, op->node);
    if (moved) {
      router_->moved(op->slot, node);
      send(std::move(op));
    } else {
      send(std::move(op), node);
    }
    return true;
  }
  const bool down = starts_with(text, "CLUSTERDOWN");
  if (!down && !starts_with(text, "TRYAGAIN")) return false;
  // TRYAGAIN: a multi-key command in a slot being moved whose keys are split between the
  // two nodes for a moment. CLUSTERDOWN: the slot has no master yet (failover under way).
  // Both pass; retry for up to one command timeout, backing off.
  const auto now = Clock::now();
  if (op->retry_until == Clock::time_point{}) {
    op->retry_until = std::max(now + config_.command_timeout, op->patience);
  }
  if (now >= op->retry_until) return false;
  if (down) router_->refresh();
  // The redirect limit stops MOVED/ASK loops within one try; each TRYAGAIN retry is a new
  // try (a split slot answers ASK from the source, then TRYAGAIN from the target, every
  // time), bounded by retry_until instead.
  op->redirects = 0;
  const auto delay = std::min(milliseconds(5 << std::min(op->retries++, 5)), milliseconds(100));
  auto timer = std::make_shared<asio::steady_timer>(*strand_, delay);
  timer->async_wait([timer, op = std::move(op)](error_code) mutable {
    auto* service = op->service.get();
    service->send(std::move(op));
  });
  return true;
}

// ---------------------------------------------------------------------------------------
// Redlock: every command goes to all N masters at once; a majority (N / 2 + 1) decides.

/// One script call fanned out to every master. The replies are merged into the one reply the
/// single-server code expects, so acquire, release, extend and renewal work unchanged:
/// acquire -> {1, fencing token} / {0, pttl} / error; release, extend -> 1 / 0 / error.
/// The merge decides as soon as the outcome is certain, never later than a command timeout.
/// The decisions themselves are quorum.hpp's (sans-io, unit-tested); this does the I/O.
struct QuorumCall : std::enable_shared_from_this<QuorumCall> {
  std::shared_ptr<ScriptOp> op;
  quorum::Tally tally;
  std::vector<long long> fences;  // acquire: each granting master's fencing counter, else -1
  long long pttl = -1;            // acquire: the shortest remaining lease among refusals
  error_code first_error;
  Clock::time_point started = Clock::now();
  bool decided = false;
  bool completed = false;  // the op has its reply (decided, and the write-back is done)
  std::string lease_token;  // acquire: the token of the attempt this call carries
  bool succeeded = false;
  // Fencing write-back (acquire only): masters confirmed at or above the minted token.
  quorum::Mint minted;
  std::size_t raising = 0;
  std::string token_text;
  std::unique_ptr<asio::steady_timer> deadline;  // acquires whose ttl is below the timeout

  std::size_t size() const noexcept { return fences.size(); }
  LockService& service() const noexcept { return *op->service; }

  void on_node_reply(std::size_t node, error_code ec, const Reply& reply);
  void decide();
  void mint();
  void raised(error_code ec, const Reply& reply);
  void finish_mint();
  AcquireOp& acquire() const noexcept { return static_cast<AcquireOp&>(*op); }
  /// The acquire failed: give back whatever was (or may yet be) taken, on every master
  /// where the script may have taken the lease: not where it was refused (it ran and took
  /// nothing), nor where it never left the queue (a connect failure) or was refused as a
  /// command (an error reply).
  void give_back() const {
    for (std::size_t i = 0; i < size(); ++i) {
      const auto& r = op->node_results[i];
      // (A timeout is not here: a command that timed out after it was written has a late
      // handler, which gives back what its reply says; one that timed out in the queue
      // never ran.)
      const bool may_hold =
          r.outcome == NodeOutcome::granted || r.outcome == NodeOutcome::no_answer ||
          (r.outcome == NodeOutcome::failed &&
           (may_have_run(r.error) || r.error == error::unexpected_reply));
      if (may_hold) {
        service().give_back_on(i, acquire().resource, lease_token, acquire().give_back_until());
      }
    }
  }
  void complete(error_code ec, Reply reply) {
    decided = true;
    completed = true;
    if (deadline) deadline->cancel();
    for (auto& r : op->node_results) {
      if (r.outcome == NodeOutcome::no_answer) r.latency = Clock::now() - started;
    }
    op->on_reply(ec, std::move(reply));  // `op` stays: late grants are given back through it
  }
  /// A master's answer after the vote: a grant (or a reply lost with its link, which may
  /// have been one) that is not part of the lease is given back on that master. Not part of
  /// the lease: any answer to an attempt that failed, and an answer that came after its
  /// command timed out (it counted as a failure in the vote, whatever the outcome). Each
  /// attempt has its own token, so this cannot touch a later attempt's lease.
  void late_answer(std::size_t node, error_code ec, const Reply& reply, bool timed_out) const {
    if (!op->is_acquire) return;
    if (!ec && reply.is_error()) return;  // it never ran
    if (!ec && !grants(reply)) return;
    if (!timed_out && !(completed && !succeeded)) return;  // part of the lease (or deciding)
    service().give_back_on(node, acquire().resource, lease_token, acquire().give_back_until());
  }
};

namespace {

Reply acquire_reply(long long taken, long long value) {
  Reply r;
  r.type = Reply::Type::array;
  r.elements = {integer_reply(taken), integer_reply(value)};
  return r;
}

/// The reply to an acquire that timed out on one master, arriving later (or never).
struct LateAcquire final : LateReplies {
  // Strong: the call's own callbacks are gone by now (they completed with the timeout).
  // The connection holds this only until the late reply or the end of its drain period.
  std::shared_ptr<QuorumCall> call;
  std::size_t node = 0;
  void on_late_reply(error_code ec, const Reply& reply) override {
    call->late_answer(node, ec, reply, /*timed_out=*/true);
  }
};

}  // namespace

void LockService::eval_on(std::size_t node, const Script& script,
                          std::shared_ptr<const OwnedCommand> command,
                          Connection::Callback callback, std::shared_ptr<LateReplies> late,
                          bool with_body) {
  if (!router_) return;
  // The connection encodes the command at once: these views need to live only this long.
  std::array<std::string_view, 16> argv{};
  const auto argc = std::min(command->args.size(), argv.size());
  for (std::size_t i = 0; i < argc; ++i) argv[i] = command->args[i];
  if (with_body) {
    argv[0] = eval;
    argv[1] = script.body;
  }
  router_->connection(node, Router::Pool::commands)
      .execute({argv.data(), argc},
               Connection::Callback([self = shared_from_this(), node, &script,
                                     command = std::move(command), callback = std::move(callback),
                                     late, with_body](error_code ec, Reply reply) mutable {
                 if (!ec && reply.is_error() && !with_body && starts_with(reply.str, "NOSCRIPT")) {
                   // This master's script cache was flushed (or it restarted): once with the body.
                   return self->eval_on(node, script, std::move(command), std::move(callback),
                                        std::move(late), true);
                 }
                 std::move(callback)(ec, std::move(reply));
               }),
               late);
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

void LockService::give_back(std::string resource, std::string token, Clock::time_point until) noexcept {
  if (!alive_.load()) return;
  try {
    if (redlock()) {
      on_strand([self = shared_from_this(), resource = std::move(resource),
                 token = std::move(token), until] {
        for (std::size_t i = 0; i < self->config_.nodes.size(); ++i) {
          self->give_back_on(i, resource, token, until);
        }
      });
      return;
    }
    // Routed like any release (Cluster redirects), retried through moving slots and link
    // failures until `until`.
    release(std::move(resource), std::move(token), BoolHandler{}, /*by_guard=*/false, until,
            until);
  } catch (...) {
    // Out of memory: the lease expires after its ttl instead.
  }
}

void LockService::give_back_on(std::size_t node, std::string_view resource,
                               std::string_view token, Clock::time_point until) {
  // The same release command as any other, with its own copy of the bytes. (CompareOp has
  // a `command` member of its own: the LeaseCommand.)
  CompareOp release{BoolHandler{}};
  prepare_release(release, std::string(resource), std::string(token));
  give_back_on(node, std::make_shared<const OwnedCommand>(release.ScriptOp::command()), until,
               give_back_first_retry);
}

void LockService::give_back_on(std::size_t node, std::shared_ptr<const OwnedCommand> release,
                               Clock::time_point until, milliseconds backoff) {
  auto again = release;
  eval_on(node, release_script, std::move(release),
          Connection::Callback([self = shared_from_this(), node, again = std::move(again), until,
                                backoff](error_code ec, Reply) {
            if (!ec) return;  // it ran (or the server refused it: it never will)
            self->retry_later(until, backoff, [self, node, again, until, next = doubled(backoff)] {
              self->give_back_on(node, again, until, next);
            });
          }));
}

void LockService::send_to_all(std::shared_ptr<ScriptOp> op) {
  const auto n = config_.nodes.size();
  auto call = std::make_shared<QuorumCall>();
  call->tally.masters = n;
  call->fences.assign(n, -1);
  op->node_results.assign(n, NodeResult{});
  for (std::size_t i = 0; i < n; ++i) op->node_results[i].node = i;
  if (op->is_acquire) {
    // Past the ttl (less the drift margin) no answer can make a valid lock: decide then.
    auto& acquire = static_cast<AcquireOp&>(*op);
    call->lease_token = acquire.token;
    const auto usable = acquire.options.ttl - drift_margin(acquire.options.ttl);
    if (usable < config_.command_timeout) {
      call->deadline = std::make_unique<asio::steady_timer>(*strand_, std::max(usable, milliseconds(1)));
      call->deadline->async_wait([weak = std::weak_ptr<QuorumCall>(call)](error_code ec) {
        auto c = weak.lock();
        if (ec || !c || c->decided) return;
        c->give_back();
        c->complete(error::no_quorum, Reply{});
      });
    }
  }
  call->op = std::move(op);
  const auto command = std::make_shared<const OwnedCommand>(call->op->command());
  for (std::size_t i = 0; i < n; ++i) {
    std::shared_ptr<LateReplies> late;
    if (call->op->is_acquire) {
      auto l = std::make_shared<LateAcquire>();
      l->call = call;
      l->node = i;
      late = std::move(l);
    }
    eval_on(i, *call->op->script, command,
            Connection::Callback([call, i](error_code ec, Reply reply) {
              call->on_node_reply(i, ec, reply);
            }),
            std::move(late));
  }
}

void QuorumCall::on_node_reply(std::size_t node, error_code ec, const Reply& reply) {
  if (decided) {
    // Answered after the decision. A grant to an attempt that failed is given back. (A
    // failed link after the decision: the give-back of a failed attempt is resent until
    // it runs; a timeout: the late reply decides.)
    if (!ec) late_answer(node, ec, reply, /*timed_out=*/false);
    return;
  }
  auto& result = op->node_results[node];
  result.latency = Clock::now() - started;
  const auto answer = op->is_acquire ? quorum::read_acquire(ec, reply) : quorum::read_compare(ec, reply);
  switch (answer.kind) {
    case quorum::Answer::Kind::failed:
      result.outcome = NodeOutcome::failed;
      result.error = answer.error;
      if (!first_error) first_error = answer.error;
      break;
    case quorum::Answer::Kind::granted:
      result.outcome = NodeOutcome::granted;
      if (op->is_acquire) fences[node] = answer.fence;
      break;
    case quorum::Answer::Kind::refused:
      result.outcome = NodeOutcome::refused;
      if (answer.pttl > 0 && (pttl < 0 || answer.pttl < pttl)) pttl = answer.pttl;
      break;
  }
  tally.count(answer);
  decide();
}

void QuorumCall::decide() {
  switch (quorum::decide(tally)) {
    case quorum::Verdict::undecided:
      return;
    case quorum::Verdict::majority:
      if (op->is_acquire) return mint();
      succeeded = true;
      return complete({}, integer_reply(1));
    case quorum::Verdict::contention:
      if (op->is_acquire) {
        give_back();
        return complete({}, acquire_reply(0, pttl));
      }
      return complete({}, integer_reply(0));
    case quorum::Verdict::no_quorum:
      if (op->is_acquire) give_back();
      return complete(error::no_quorum, Reply{});
  }
}

// Fencing across masters as a max-register: the token is the largest counter among the
// majority that granted; then at least a majority must hold a counter >= token before it is
// handed out, so that any later majority (which overlaps this one) mints a larger token.
// Usually every master is at the same value and this costs nothing (the acquire script
// raises a counter to the clock only when it is fresh, with ARGV[6]); a master that missed
// acquisitions (it was down) or lost its counter is raised in a second round trip.
void QuorumCall::mint() {
  decided = true;  // later grants only add masters to the lease
  minted = quorum::mint(fences);
  if (minted.durable(size())) return finish_mint();
  token_text = to_decimal(minted.token);
  auto& acquire = static_cast<AcquireOp&>(*op);
  for (const std::size_t i : minted.to_raise) {
    ++raising;
    const std::string_view argv[] = {evalsha, raise_fence_script.sha1, "1", acquire.keys.fence,
                                     token_text};
    service().eval_on(i, raise_fence_script, std::make_shared<const OwnedCommand>(argv),
                      Connection::Callback([self = shared_from_this()](error_code ec, Reply reply) {
                        --self->raising;
                        self->raised(ec, reply);
                      }));
  }
}

void QuorumCall::raised(error_code ec, const Reply& reply) {
  if (completed) return;
  if (quorum::raised_to(ec, reply, minted.token)) ++minted.at_token;
  if (!ec && reply.is_error()) ec = error_from_reply(reply.str);
  if (ec && !first_error) first_error = ec;
  finish_mint();
}

void QuorumCall::finish_mint() {
  auto& acquire = static_cast<AcquireOp&>(*op);
  if (minted.durable(size())) {
    // Validity: the lock is worth something only if it still has time left once the
    // majority is in (ttl - elapsed - drift, the guard's valid_until()).
    if (!quorum::still_valid(acquire.attempt_started, acquire.options.ttl, Clock::now())) {
      give_back();
      return complete({}, acquire_reply(0, -2));
    }
    succeeded = true;
    return complete({}, acquire_reply(1, minted.token));
  }
  if (raising == 0) {
    give_back();  // the token could not be made durable on a majority
    complete(first_error ? first_error : error_code(error::no_quorum), Reply{});
  }
}

// ---------------------------------------------------------------------------------------
// Waiters and notifications

std::uint16_t LockService::slot_of(std::string_view lease_key) const noexcept {
  return cluster() ? key_slot(lease_key) : 0;
}

bool LockService::listening(std::uint16_t slot) const noexcept {
  const auto it = subscriptions_.find(slot);
  return it != subscriptions_.end() && it->second.state == Subscription::State::confirmed;
}

std::string LockService::notify_channel_prefix(std::uint16_t slot) const {
  if (!cluster()) return notify_prefix_;
  std::string prefix = notify_prefix_;
  prefix.append("{").append(slot_tag(slot)).append("}");
  return prefix;
}

void LockService::add_waiter(const std::shared_ptr<AcquireOp>& op) {
  if (!router_ || redlock()) return;  // Redlock waiters back off; no release is published
  waiters_.emplace(op->token, op);
  auto& sub = subscriptions_[op->slot];
  if (sub.state == Subscription::State::none) subscribe(op->slot);
  if (sub.node != Router::no_node) {
    router_->connection(sub.node, Router::Pool::subscriber).keep_reading(true);
  }
}

void LockService::remove_waiter(const std::string& token) {
  if (waiters_.erase(token) == 0) return;
  // Stay subscribed (no SUBSCRIBE per acquisition), but stop reading: an idle manager
  // holds no work, and no message is published to us while none of our tokens is queued.
  if (waiters_.empty() && router_) {
    router_->for_each_subscriber([](std::size_t, Connection& c) { c.keep_reading(false); });
  }
}

void LockService::on_subscriber_down(std::size_t node) {
  // Subscriptions die with their link: resubscribe when a waiter next sleeps.
  for (auto& [slot, sub] : subscriptions_) {
    if (sub.node == node) sub.state = Subscription::State::none;
  }
}

void LockService::subscribe(std::uint16_t slot, int redirects) {
  auto& sub = subscriptions_[slot];
  sub.state = Subscription::State::pending;
  sub.node = router_->node_for(slot);
  const std::string channel = notify_channel_prefix(slot) + manager_id_;
  // On a Cluster, a shard channel lives on the node serving its slot.
  const std::string_view command[] = {cluster() ? "SSUBSCRIBE" : "SUBSCRIBE", channel};
  Connection& subscriber = router_->connection(sub.node, Router::Pool::subscriber);
  subscriber.keep_reading(true);
  subscriber.execute(
      command, Connection::Callback([weak = weak_from_this(), slot, node = sub.node,
                                     redirects](error_code ec, Reply reply) {
        auto self = weak.lock();
        if (!self || !self->router_) return;
        auto& entry = self->subscriptions_[slot];
        if (entry.state != Subscription::State::pending || entry.node != node) return;
        if (!ec && reply.is_error() && starts_with(reply.str, "MOVED ") && redirects < 5) {
          if (const auto address = redirect_address(reply.str); !address.empty()) {
            self->router_->moved(slot, self->router_->node_at(address, node));
            return self->subscribe(slot, redirects + 1);
          }
        }
        if (ec || reply.is_error()) {
          entry.state = Subscription::State::none;  // waiters keep polling; retried later
          return;
        }
        entry.state = Subscription::State::confirmed;
        // A release may have handed a lease to one of our waiters before we listened:
        // let every waiter of this slot look once more.
        std::vector<std::shared_ptr<AcquireOp>> ops;
        for (auto& [token, weak_op] : self->waiters_) {
          if (auto op = weak_op.lock(); op && op->slot == slot) ops.push_back(std::move(op));
        }
        for (auto& op : ops) op->nudge();
      }));
}

void LockService::on_notify(const Reply& push) {
  if (push.elements[0].str == "sunsubscribe") {
    // A Cluster node gave the channel's slot away: subscribe again where it went.
    const auto it = subscriptions_.find(key_slot(push.elements[1].str));
    if (it != subscriptions_.end()) it->second.state = Subscription::State::none;
    if (router_) router_->refresh();
    return;
  }
  const auto it = waiters_.find(push.elements[2].str);
  if (it == waiters_.end()) return;  // a waiter that finished meanwhile
  if (auto op = it->second.lock()) op->nudge();
}

// ---------------------------------------------------------------------------------------
// Acquire

void LockService::acquire(std::string resource, LockOptions options, AcquireHandler handler) {
  if (!alive_.load()) return;  // the context is gone: drop the handler, as Asio does
  if (resource.empty() || options.ttl.count() <= 0 || options.ttl > max_ttl ||
      options.wait.count() < 0 || options.renew_every.count() < 0 ||
      options.max_hold.count() < 0 || options.min_replicas < 0 ||
      (options.min_replicas > 0 && redlock()) ||
      options.replication_timeout.count() < 0 ||
      // WAIT with a zero timeout blocks until the replicas answer, however long.
      (options.min_replicas > 0 && options.replication_timeout.count() == 0) || config_error_) {
    const error_code ec = config_error_ ? config_error_ : error_code(error::invalid_argument);
    if (observer()) {
      on_strand([self = shared_from_this(), resource, ec] {
        self->observer()->on_acquire(
            {resource, AcquireOutcome::failed, ec, Clock::duration::zero(), 0, false, 0});
      });
    }
    return deliver(executor_, Defer::yes, std::move(handler), ec, LockGuard{});
  }
  auto op = std::make_shared<AcquireOp>(std::move(handler));
  op->service = shared_from_this();
  op->keys = make_keys(options_.key_prefix, resource);
  op->slot = slot_of(op->keys.lease);
  op->resource = std::move(resource);
  op->options = options;
  op->durable = options.min_replicas > 0;
  op->arg = to_decimal(options.ttl.count());
  const auto now = Clock::now();
  op->deadline = options.wait >= std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now)
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
  // TSan.) For the same reason the slot is never cleared from our side: the handler holds the
  // op weakly, so an emit after completion finds nothing to cancel.
  auto slot = asio::get_associated_cancellation_slot(op->handler);
  if (slot.is_connected()) {
    slot.assign([weak = std::weak_ptr<AcquireOp>(op), strand = strand()](asio::cancellation_type) {
      asio::post(strand, [weak] {
        if (auto alive = weak.lock()) alive->cancel();
      });
    });
  }
  on_strand([op = std::move(op)]() mutable { op->attempt(); });
}

void AcquireOp::attempt() {
  if (attempts > 0 && service->redlock()) {
    // A fresh token per Redlock attempt: what gives back an earlier attempt's grants (a
    // master answering late, a command resent after NOSCRIPT behind this one) can then
    // never release this attempt's lease.
    try {
      token = random_token();
    } catch (const std::exception&) {
      return finish(error::server_error, LockGuard{});
    }
  }
  ++attempts;
  in_flight = true;
  attempt_started = Clock::now();
  notified = false;
  sent_body = false;
  // Redlock waits by backing off: a fair queue on each master would not be one queue.
  queue_up = options.wait.count() > 0 && !service->redlock();
  patience = deadline;
  if (service->redlock()) {
    set_args(acquire_script, {keys.lease, keys.fence, keys.queue, keys.queue_expiry},
             {token, arg, "0", waiter_ttl_ms, service->member_suffix(), "1"});
  } else {
    set_args(acquire_script, {keys.lease, keys.fence, keys.queue, keys.queue_expiry},
             {token, arg, queue_up ? "1" : "0", waiter_ttl_ms, service->member_suffix()});
  }
  service->send(std::static_pointer_cast<ScriptOp>(shared_from_this()));
}

void AcquireOp::cancel() {
  if (done || cancelled) return;
  cancelled = true;
  if (in_flight) return;  // on_reply finishes the job
  if (timer) timer->cancel();
  leave();
  finish(asio::error::operation_aborted, LockGuard{});
}


void AcquireOp::on_reply(error_code ec, Reply reply) {
  in_flight = false;
  if (ec) {
    // The link failed after the script was written (connection lost, a protocol error, a
    // demoted master): it may have run, so the lease (or a queue place) could be ours
    // without our knowing. Give it back, again through link failures until it would have
    // expired. (Connect failures: never written. A timeout: the late reply decides. On
    // Redlock the quorum call gave back already.)
    const bool gave_back = may_have_run(ec) && !service->redlock();
    if (gave_back) {
      give_back();
      joined = false;
    }
    if (within_wait(ec)) return wait_out_outage(ec, gave_back);
    return finish(ec, LockGuard{});
  }
  last_error = {};
  if (reply.is_error()) {
    leave();
    return finish(service->server_error(reply), LockGuard{});
  }
  const bool well_formed = reply.type == Reply::Type::array && reply.elements.size() == 2 &&
                           reply.elements[0].type == Reply::Type::integer &&
                           reply.elements[1].type == Reply::Type::integer;
  if (!well_formed) {
    leave();
    return finish(error::unexpected_reply, LockGuard{});
  }
  if (reply.elements[0].integer == 1) {
    joined = false;  // the script took us out of the queue
    const auto fence = reply.elements[1].integer;
    if (fence <= 0) {
      give_back();
      return finish(error::unexpected_reply, LockGuard{});
    }
    auto lease = std::make_shared<LeaseState>();
    lease->confirm(attempt_started, options.ttl);
    lease->min_replicas = options.min_replicas;
    lease->replication_timeout = options.replication_timeout;
    if (options.auto_renew || service->observer()) lease->resource = resource;  // for on_lost
    if (options.auto_renew) {
      lease->token = token;
      lease->ttl = options.ttl;
      lease->renew_every = options.renew_every.count() > 0
                               ? std::min(options.renew_every, options.ttl)
                               : std::max(options.ttl / 3, milliseconds(1));
      if (options.max_hold.count() > 0) lease->hold_until = attempt_started + options.max_hold;
      lease->auto_renew = true;
      service->watch(lease);
    }
    auto guard = GuardAccess::make(service, resource, token, static_cast<std::uint64_t>(fence),
                                   std::move(lease));
    if (cancelled) return finish(asio::error::operation_aborted, LockGuard{});  // guard releases
    if (options.min_replicas > 0) return confirm_replicated(std::move(guard));
    return finish({}, std::move(guard));
  }
  joined = queue_up;
  waited = waited || options.wait.count() > 0;
  if (cancelled) {
    leave();
    return finish(asio::error::operation_aborted, LockGuard{});
  }
  if (options.wait.count() == 0 || Clock::now() >= deadline) {
    leave();
    return finish({}, LockGuard{});
  }
  sleep_until_retry(reply.elements[1].integer);
}

bool AcquireOp::within_wait(error_code ec) const {
  // A server that cannot be reached, or is failing over, may be back within the wait: the
  // caller asked to wait for the lock, not to hear of the first hiccup. (Redlock decides by
  // majority instead; a timed-out attempt has a late reply to settle first.)
  const bool outage = ec == error::connect_failed || ec == error::connect_timeout ||
                      ec == error::connection_lost || ec == error::read_only;
  return outage && !service->redlock() && options.wait.count() > 0 && !cancelled &&
         Clock::now() < deadline;
}

void AcquireOp::wait_out_outage(error_code ec, bool gave_back) {
  last_error = ec;
  if (gave_back) {
    // The give-back on its way releases whatever this token holds: never use it again.
    if (registered) {
      service->remove_waiter(token);
      registered = false;
    }
    try {
      token = random_token();
    } catch (const std::exception&) {
      return finish(error::server_error, LockGuard{});
    }
  }
  attempt_after(next_backoff());
}

milliseconds AcquireOp::next_backoff() {
  const auto sleep = jittered(backoff);
  backoff = std::min(backoff * 2, max_backoff);
  return sleep;
}

void AcquireOp::attempt_after(milliseconds sleep) {
  if (!timer) timer = std::make_unique<asio::steady_timer>(service->strand());
  timer->expires_at(std::min(deadline, Clock::now() + sleep));
  timer->async_wait([op = std::static_pointer_cast<AcquireOp>(shared_from_this())](error_code) {
    if (op->done || op->cancelled) return;
    // The wait ran out during an outage: its last error is the answer, not "held".
    if (op->last_error && Clock::now() >= op->deadline) {
      return op->finish(op->last_error, LockGuard{});
    }
    op->attempt();
  });
}

void AcquireOp::sleep_until_retry(long long pttl) {
  // Idempotent; again each time, it resubscribes after a lost subscriber link.
  registered = true;
  service->add_waiter(std::static_pointer_cast<AcquireOp>(shared_from_this()));
  if (notified) return attempt();
  // Held elsewhere. When we listen for hand-offs, sleep until the lease could expire (its
  // holder may have died) or our place in the queue needs refreshing: no polling. Until we
  // listen, or while the lease is reserved for another waiter's claim (pttl -2), back off
  // exponentially with full jitter.
  milliseconds sleep{};
  if (service->listening(slot) && pttl > 0) {
    sleep = std::min(milliseconds(pttl) + milliseconds(1), refresh_interval);
  } else {
    sleep = next_backoff();
    if (pttl > 0) sleep = std::min(sleep, milliseconds(pttl));
  }
  attempt_after(sleep);
}

// ---------------------------------------------------------------------------------------
// Release and extend

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

void LockService::release(std::string resource, std::string token, BoolHandler handler,
                          bool by_guard, Clock::time_point patience,
                          Clock::time_point give_back_until) {
  if (!alive_.load()) return;
  auto op = std::make_shared<CompareOp>(std::move(handler));
  if (by_guard && observer()) op->resource = resource;
  prepare_release(*op, std::move(resource), std::move(token));
  op->patience = patience;
  op->give_back_until = give_back_until;
  on_strand([self = shared_from_this(), op = std::move(op)]() mutable { self->send(std::move(op)); });
}

void LockService::prepare_release(CompareOp& op, std::string resource, std::string token) {
  op.service = shared_from_this();
  op.keys = make_keys(options_.key_prefix, resource);
  op.slot = slot_of(op.keys.lease);
  op.token = std::move(token);
  op.member = op.token + manager_id_;
  // The channel of the next waiter's manager is this prefix + its manager id.
  op.arg = notify_channel_prefix(op.slot);
  op.set_args(release_script, {op.keys.lease, op.keys.queue, op.keys.queue_expiry},
              {op.token, op.arg, claim_window_ms, op.member,
               cluster() ? std::string_view("SPUBLISH") : std::string_view("PUBLISH")});
}

void LockService::release_detached(std::string resource, std::string token, bool by_guard,
                                   Clock::time_point patience) noexcept {
  try {
    // A guard's release on destruction: also resent through link failures while its lease
    // may still be valid.
    release(std::move(resource), std::move(token), BoolHandler{}, by_guard, patience,
            /*give_back_until=*/std::min(patience, Clock::now() + give_back_horizon));
  } catch (...) {
    // Out of memory while posting: the lease expires after its ttl instead.
  }
}

void LockService::extend(std::string resource, std::string token,
                         std::shared_ptr<LeaseState> lease, milliseconds ttl,
                         BoolHandler handler) {
  if (!alive_.load()) return;
  if (ttl.count() <= 0 || ttl > max_ttl) {
    return deliver(executor_, Defer::yes, std::move(handler), error_code(error::invalid_argument),
                   false);
  }
  auto op = std::make_shared<CompareOp>(std::move(handler));
  op->service = shared_from_this();
  op->keys = make_keys(options_.key_prefix, resource);
  op->slot = slot_of(op->keys.lease);
  op->token = std::move(token);
  op->arg = to_decimal(ttl.count());
  op->lease = std::move(lease);
  op->new_ttl = ttl;
  op->command = LeaseCommand::extend;
  // min_replicas: on the connection whose WAIT counts it (the acquire's).
  op->durable = op->lease && op->lease->min_replicas > 0;
  if (observer()) op->resource = resource;
  op->set_args(extend_script, {op->keys.lease}, {op->token, op->arg});
  on_strand([self = shared_from_this(), op = std::move(op)]() mutable { self->send(std::move(op)); });
}

// ---------------------------------------------------------------------------------------
// Renewal watchdog and lost leases

namespace {

// Renewals are due on a 25 ms grid (rounded down, so never late): leases taken around the
// same time renew in the same timer turn and the same write.
Clock::time_point renewal_slot(Clock::time_point due) {
  constexpr auto grid = std::chrono::duration_cast<Clock::duration>(milliseconds(25));
  const auto since = due.time_since_epoch();
  return Clock::time_point(since - since % grid);
}

}  // namespace

void LockService::watch(const std::shared_ptr<LeaseState>& lease) {
  if (!router_) return;
  schedule(lease, renewal_slot(Clock::now() + lease->renew_every));
}

void LockService::schedule(const std::shared_ptr<LeaseState>& lease, Clock::time_point at) {
  unschedule(*lease);
  lease->schedule_entry = renewals_.emplace(at, lease);
  lease->scheduled = true;
  arm_renew_timer(at);
}

void LockService::arm_renew_timer(Clock::time_point at) {
  if (renew_armed_ && renew_timer_at_ <= at) return;
  if (!renew_timer_) renew_timer_ = std::make_unique<asio::steady_timer>(*strand_);
  renew_armed_ = true;
  renew_timer_at_ = at;
  renew_timer_->expires_at(at);
  renew_timer_->async_wait([weak = weak_from_this()](error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    if (auto self = weak.lock()) {
      self->renew_armed_ = false;
      self->on_renew_timer();
    }
  });
}

void LockService::unschedule(LeaseState& lease) {
  if (!lease.scheduled) return;
  renewals_.erase(lease.schedule_entry);
  lease.scheduled = false;
  if (renewals_.empty() && renew_armed_) {
    renew_armed_ = false;  // idle means idle: no timer for nothing
    renew_timer_->cancel();
  }
}

void LockService::on_renew_timer() {
  // At most this many leases per turn: with 100k leases due at once, one turn would build a
  // 10 MB write; in slices, each slice's write goes out while the next is prepared.
  constexpr int slice = 1024;
  const auto now = Clock::now();
  int handled = 0;
  while (!renewals_.empty() && renewals_.begin()->first <= now && handled++ < slice) {
    auto lease = renewals_.begin()->second;
    renewals_.erase(renewals_.begin());
    lease->scheduled = false;
    if (lease->released.load() || lease->lost.load()) continue;
    const auto valid = lease->valid_until();
    if (now >= valid) {
      mark_lost(lease);  // no confirmed renewal in time: assume someone else may have it
      continue;
    }
    // Past max_hold we stop renewing; the lease runs out and is reported lost at `valid`.
    if (now < lease->hold_until && !lease->renewing) renew(lease);
    // The renewal's reply reschedules the lease. Until then it is checked at `valid`: a
    // renewal that is resent (NOSCRIPT, MOVED, ASK, TRYAGAIN, CLUSTERDOWN, WAIT for
    // replicas) restarts its command deadline, which may then fall after `valid`.
    schedule(lease, valid);
  }
  if (!renewals_.empty()) arm_renew_timer(std::max(renewals_.begin()->first, now));
}

void LockService::renew(const std::shared_ptr<LeaseState>& lease) {
  if (!lease->renewal) {
    // Keys and arguments are the same every time: build them once per lease. The op holds
    // the lease weakly, or the two would keep each other alive.
    auto op = std::make_shared<RenewOp>();
    op->service = shared_from_this();
    op->lease = lease;
    op->token = lease->token;
    op->keys = make_keys(options_.key_prefix, lease->resource);
    op->slot = slot_of(op->keys.lease);
    op->ttl_ms = to_decimal(lease->ttl.count());
    op->durable = lease->min_replicas > 0;
    lease->renewal = op;
  }
  auto& op = static_cast<RenewOp&>(*lease->renewal);
  op.sent = Clock::now();
  op.sent_body = false;
  op.set_args(extend_script, {op.keys.lease}, {op.token, op.ttl_ms});
  lease->renewing = true;
  send(lease->renewal);
}

void LockService::renewed(const std::shared_ptr<LeaseState>& lease, Clock::time_point sent,
                          error_code ec, const Reply& reply,
                          std::span<const NodeResult> nodes) {
  lease->renewing = false;
  const auto now = Clock::now();
  if (auto* observer = this->observer()) {
    // The error as the event reports it; it must not change what happens next (nor
    // last_server_error()), observed or not.
    const error_code event_ec = ec || !reply.is_error() ? ec : error_from_reply(reply.str);
    const bool ok = !event_ec && reply.type == Reply::Type::integer && reply.integer == 1;
    observer->on_lease({lease->resource, LeaseCommand::renewal, ok, event_ec, now - sent, nodes});
  }
  if (lease->released.load() || lease->lost.load()) return;
  if (ec || reply.is_error() || reply.type != Reply::Type::integer) {
    // Unknown outcome: try again soon, as long as the lease may still be ours.
    const auto retry = std::max(lease->renew_every / 4, milliseconds(10));
    return schedule(lease, std::min(now + retry, lease->valid_until()));
  }
  if (reply.integer != 1) return mark_lost(lease);  // expired, or someone else's now
  lease->confirm(sent, lease->ttl);
  schedule(lease, renewal_slot(sent + lease->renew_every));
}

void LockService::mark_lost(const std::shared_ptr<LeaseState>& lease) {
  if (lease->lost.exchange(true)) return;
  unschedule(*lease);
  if (auto* observer = this->observer()) observer->on_lost(lease->resource);
  lease->signal.emit(asio::cancellation_type::terminal);
  if (lease->lost_waiter) {
    auto handler = std::move(*lease->lost_waiter);
    lease->lost_waiter.reset();
    deliver(executor_, Defer::no, std::move(handler), error_code(error::lock_lost));
  }
}

void LockService::forget(const std::shared_ptr<LeaseState>& lease) noexcept {
  lease->released.store(true);
  if (!lease->auto_renew && !lease->has_waiter.load()) return;  // nothing on the strand
  if (!alive_.load()) return;
  try {
    on_strand([self = shared_from_this(), lease] {
      self->unschedule(*lease);
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
      return deliver(self->executor_, Defer::yes, std::move(handler),
                     error_code(error::lock_lost));
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
