// SPDX-License-Identifier: MIT
// The single-authority lock engine: acquire/release/extend scripts over one Connection,
// the simple waiting loop, and detection of the execution context's shutdown.
#include "lock_service.hpp"

#include "completion.hpp"
#include "keys.hpp"
#include "redis_lock_scripts.hpp"
#include "token.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <charconv>
#include <random>
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
constexpr milliseconds max_backoff{200};

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

std::string to_decimal(long long value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, end);
}

milliseconds jittered(milliseconds cap) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<long long> dist(1, std::max<long long>(1, cap.count()));
  return milliseconds(dist(rng));
}

}  // namespace

// Handlers are only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
struct LockService::AcquireOp {
  explicit AcquireOp(AcquireHandler h) : handler(std::move(h)) {}
  AcquireHandler handler;
  std::string resource;
  ResourceKeys keys;
  std::string token;
  std::string ttl_ms;
  LockOptions options;
  Clock::time_point deadline;
  milliseconds backoff{first_backoff};
  std::unique_ptr<asio::steady_timer> timer;
};

/// A compare-and-act script on one lease: release (arg = channel) or extend (arg = ttl).
struct CompareOp {
  explicit CompareOp(BoolHandler h) : handler(std::move(h)) {}
  ResourceKeys keys;
  std::string token;
  std::string arg;
  BoolHandler handler;  // empty for a detached release
};

LockService::LockService(asio::any_io_executor ex, ConnectionConfig config, ManagerOptions options)
    : executor_(std::move(ex)),
      options_(std::move(options)),
      config_(config),
      connection_(std::make_shared<Connection>(asio::make_strand(executor_), std::move(config),
                                               options_.client_name)) {}

LockService::~LockService() = default;

void LockService::watch_context_shutdown() {
  auto& ctx = asio::query(executor_, asio::execution::context);
  asio::use_service<ShutdownWatch>(ctx).add(weak_from_this());
}

void LockService::on_context_shutdown() noexcept {
  alive_.store(false);
  if (connection_) {
    connection_->shutdown();
    connection_.reset();
  }
  executor_ = asio::any_io_executor();
}

template <class Fn>
void LockService::on_strand(Fn&& fn) {
  asio::post(connection_->strand(), std::forward<Fn>(fn));
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

template <std::size_t N>
void LockService::run_script(const Script& script, std::size_t key_count,
                             std::array<std::string_view, N> keys_and_args,
                             ReplyCallback callback, ReplyCallback late) {
  const std::string count = to_decimal(static_cast<long long>(key_count));
  std::array<std::string_view, N + 3> argv;
  argv[0] = "EVALSHA";
  argv[1] = script.sha1;
  argv[2] = count;
  std::copy(keys_and_args.begin(), keys_and_args.end(), argv.begin() + 3);
  std::string resp;
  append_command(resp, argv);
  // One of two things happens: the reply comes (and, if NOSCRIPT, the EVAL retry inherits
  // the late handler), or the command times out (and the late handler waits for its reply).
  std::shared_ptr<ReplyCallback> shared_late;
  if (late) shared_late = std::make_shared<ReplyCallback>(std::move(late));
  ReplyCallback late_for_evalsha =
      shared_late ? ReplyCallback([shared_late](error_code ec, Reply reply) {
        if (!ec && reply.is_error() && starts_with(reply.str, "NOSCRIPT")) return;  // never ran
        if (*shared_late) std::move(*shared_late)(ec, std::move(reply));
      })
                  : ReplyCallback{};
  connection_->execute(
      resp,
      ReplyCallback([self = shared_from_this(), &script, argv, count, shared_late,
                     callback = std::move(callback)](error_code ec, Reply reply) mutable {
        if (!ec && reply.is_error() && starts_with(reply.str, "NOSCRIPT") && self->connection_) {
          // The script cache was flushed (or this is a new server): send the body once.
          argv[0] = "EVAL";
          argv[1] = script.body;
          argv[2] = count;
          std::string eval;
          append_command(eval, argv);
          self->connection_->execute(eval, std::move(callback),
                                     shared_late ? std::move(*shared_late) : ReplyCallback{});
          return;
        }
        std::move(callback)(ec, std::move(reply));
      }),
      std::move(late_for_evalsha));
}

// ---------------------------------------------------------------------------------------
// Acquire

void LockService::acquire(std::string resource, LockOptions options, AcquireHandler handler) {
  if (!alive_.load()) return;  // the context is gone: drop the handler, as Asio does
  if (resource.empty() || options.ttl.count() <= 0 || options.ttl > max_ttl ||
      options.wait.count() < 0 || config_.tls) {
    return deliver(executor_, Defer::yes, std::move(handler),
                   error_code(config_.tls ? error::connect_failed : error::invalid_argument),
                   LockGuard{});
  }
  auto op = std::make_shared<AcquireOp>(std::move(handler));
  op->keys = make_keys(options_.key_prefix, resource);
  op->resource = std::move(resource);
  op->options = options;
  op->ttl_ms = to_decimal(options.ttl.count());
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
  on_strand([self = shared_from_this(), op]() mutable { self->attempt(std::move(op)); });
}

void LockService::attempt(std::shared_ptr<AcquireOp> op) {
  if (!connection_) return;
  auto* raw = op.get();
  // If the reply misses its deadline the lease may still be taken later: the late handler
  // sees the reply (in order, on the same connection) and gives back what was taken.
  ReplyCallback late([self = shared_from_this(), resource = raw->resource,
                      token = raw->token](error_code ec, Reply reply) mutable {
    const bool taken = reply.type == Reply::Type::array && !reply.elements.empty() &&
                       reply.elements[0].type == Reply::Type::integer &&
                       reply.elements[0].integer == 1;
    if (ec || taken) self->release_detached(std::move(resource), std::move(token));
  });
  run_script<4>(acquire_script, 2, {raw->keys.lease, raw->keys.fence, raw->token, raw->ttl_ms},
                ReplyCallback([self = shared_from_this(), op = std::move(op)](
                                  error_code ec, Reply reply) mutable {
                  self->on_attempt(std::move(op), ec, std::move(reply));
                }),
                std::move(late));
}

void LockService::on_attempt(std::shared_ptr<AcquireOp> op, error_code ec, Reply reply) {
  if (ec) {
    // The connection broke after the script was sent: it may have run, so the lease could
    // be ours without our knowing. Give it back. (A timeout is handled by the late handler.)
    if (ec == error::connection_lost) release_detached(op->resource, op->token);
    return finish(std::move(op), ec, LockGuard{});
  }
  if (reply.is_error()) return finish(std::move(op), server_error(reply), LockGuard{});
  const bool well_formed = reply.type == Reply::Type::array && reply.elements.size() == 2 &&
                           reply.elements[0].type == Reply::Type::integer &&
                           reply.elements[1].type == Reply::Type::integer;
  if (!well_formed) return finish(std::move(op), error::unexpected_reply, LockGuard{});

  if (reply.elements[0].integer == 1) {
    const auto fence = reply.elements[1].integer;
    if (fence <= 0) return finish(std::move(op), error::unexpected_reply, LockGuard{});
    auto guard = GuardAccess::make(shared_from_this(), std::move(op->resource),
                                   std::move(op->token), static_cast<std::uint64_t>(fence));
    return finish(std::move(op), {}, std::move(guard));
  }

  // Held elsewhere. Sleep until the lease could expire or the backoff says, whichever first.
  const auto now = Clock::now();
  if (op->options.wait.count() == 0 || now >= op->deadline) {
    return finish(std::move(op), {}, LockGuard{});
  }
  const long long pttl = reply.elements[1].integer;
  milliseconds sleep = jittered(op->backoff);
  if (pttl > 0) sleep = std::min(sleep, milliseconds(pttl));
  op->backoff = std::min(op->backoff * 2, max_backoff);
  const auto wake = std::min(op->deadline, now + sleep);
  if (!op->timer) op->timer = std::make_unique<asio::steady_timer>(connection_->strand());
  op->timer->expires_at(wake);
  auto* timer = op->timer.get();
  timer->async_wait([self = shared_from_this(), op = std::move(op)](error_code) mutable {
    self->attempt(std::move(op));
  });
}

void LockService::finish(std::shared_ptr<AcquireOp> op, error_code ec, LockGuard guard) {
  deliver(executor_, Defer::no, std::move(op->handler), ec, std::move(guard));
}

// ---------------------------------------------------------------------------------------
// Release and extend

void LockService::compare_script(const Script& script, std::shared_ptr<CompareOp> op) {
  if (!connection_) return;
  auto* raw = op.get();
  run_script<3>(script, 1, {raw->keys.lease, raw->token, raw->arg},
                ReplyCallback([self = shared_from_this(), op = std::move(op)](
                                  error_code ec, Reply reply) mutable {
                  if (!op->handler) return;  // detached: the ttl covers any failure
                  bool done = false;
                  if (!ec && reply.is_error()) {
                    ec = self->server_error(reply);
                  } else if (!ec && reply.type != Reply::Type::integer) {
                    ec = error::unexpected_reply;
                  } else if (!ec) {
                    done = reply.integer == 1;
                  }
                  deliver(self->executor_, Defer::no, std::move(op->handler), ec, done);
                }));
}

void LockService::release(std::string resource, std::string token, BoolHandler handler) {
  if (!alive_.load()) return;
  auto op = std::make_shared<CompareOp>(std::move(handler));
  op->keys = make_keys(options_.key_prefix, resource);
  op->token = std::move(token);
  op->arg = op->keys.channel;
  on_strand([self = shared_from_this(), op]() mutable {
    self->compare_script(release_script, std::move(op));
  });
}

void LockService::release_detached(std::string resource, std::string token) noexcept {
  try {
    release(std::move(resource), std::move(token), BoolHandler{});
  } catch (...) {
    // Out of memory while posting: the lease expires after its ttl instead.
  }
}

void LockService::extend(std::string resource, std::string token, milliseconds ttl,
                         BoolHandler handler) {
  if (!alive_.load()) return;
  if (ttl.count() <= 0 || ttl > max_ttl) {
    return deliver(executor_, Defer::yes, std::move(handler), error_code(error::invalid_argument),
                   false);
  }
  auto op = std::make_shared<CompareOp>(std::move(handler));
  op->keys = make_keys(options_.key_prefix, resource);
  op->token = std::move(token);
  op->arg = to_decimal(ttl.count());
  on_strand([self = shared_from_this(), op]() mutable {
    self->compare_script(extend_script, std::move(op));
  });
}

}  // namespace redis_lock::detail
