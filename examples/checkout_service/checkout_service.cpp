// SPDX-License-Identifier: MIT
// The scenario redis_lock exists for: an HTTP checkout service run as several processes on one
// port, where the same order may arrive twice at once (a retrying client, a double click), in
// front of a payment provider that must charge each order once, through crashes.
//
//   POST /checkout {"order_id": "A-17", "amount": 1299, "currency": "EUR"}
//     201 Created    {"status": "charged", "charge_id": ...}   charged (now or, on a replay,
//                                                               before)
//     402 Payment Required {"status": "declined", ...}         the provider declined the card
//     402 Payment Required {"status": "failed", ...}   the provider refused the charge for good
//                                                       (a 4xx other than 402/409/429): nothing
//                                                       was charged; a new order is needed
//     202 Accepted   {"status": "pending"} + Retry-After      the outcome is not known yet: retry
//                                                               with the same order_id
//     409 Conflict   {"error": "order_in_progress"} + Retry-After   another request has it now
//     422 Unprocessable {"error": "order_mismatch"}   this order exists with another amount
//                                                     or currency
//     503 {"error": "temporarily_unavailable"} + Retry-After   retry with the same order_id
//     400 / 404 / 405 / 413 for bad requests
//   A decided order's stored response is replayed, byte for byte, with the same status and
//   `Idempotent-Replayed: true`, for --retention-s (24 h by default).
//   GET /healthz
//
// The flow (see docs/guide.md, "Payments: what the lock does and what the key does"):
//   1. a decided order is answered from the ledger, without the lock;
//   2. one lock per order, one attempt: a concurrent duplicate gets 409;
//   3. under the lock, a pending attempt {order, amount, currency, idempotency key} is written
//      to the ledger (or an earlier one found) before the provider is called;
//   4. the provider is called with that key and a deadline below the lease's valid_until();
//   5. its answer is recorded as the order's final response; if no answer came, the client
//      gets 202 and the pending attempt stays;
//   6. a reconciler in every worker finishes pending attempts left by crashed workers or
//      unanswered calls, by calling the provider again with the same key.
// The lock keeps concurrent duplicates apart; the idempotency key is what makes a retry after
// a crash harmless: the provider answers a repeated key with the first call's result.
//
//   checkout_service --ledger-url URL --provider HOST:PORT [--url redis://127.0.0.1:6379]
//                    [--listen 127.0.0.1] [--port 8080] [--workers N] [--lock-ttl-ms 5000]
//                    [--no-renew] [--provider-timeout-ms 2000] [--retention-s 86400]
//                    [--reconcile-ms 1000] [--reconcile-max-backoff-ms 300000]
//                    [--shutdown-grace-ms MS] [--prefix checkout:]
//                    [--provider-concurrency N]
//
// --provider-concurrency N: at most N charges are in flight to the provider at once, from
// all workers together (a provider's rate or concurrency limit, shared by the fleet): each
// call holds a permit of the semaphore "payment-provider" (redis_lock's
// async_acquire_permit), waited for within the order's lease. No permit in time: 503 with
// Retry-After, nothing was sent (the pending attempt stays for the retry or the reconciler).
//
// --url is the lock's Redis; --ledger-url a Redis of its own with appendfsync always (the
// ledger must not share the lock server's fate: see README). --workers N forks N processes
// that each accept on the same port (SO_REUSEPORT), each with its own LockManager: the lock,
// not the process, keeps orders apart.
#include "http_call.hpp"
#include "ledger.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string url = "redis://127.0.0.1:6379";
  std::string ledger_url;
  std::string provider;  // host:port
  std::string listen = "127.0.0.1";
  unsigned short port = 8080;
  int workers = 1;
  std::chrono::milliseconds lock_ttl{5000};
  bool renew = true;  // --no-renew: the lease is not renewed; the provider deadline still fits it
  std::chrono::milliseconds provider_timeout{2000};
  std::chrono::seconds retention{86400};
  std::chrono::milliseconds reconcile_every{1000};
  // The longest a pending order waits between two reconcile retries (beyond the lock ttl).
  std::chrono::milliseconds reconcile_max_backoff{300000};
  std::string prefix = "checkout:";
  // How long SIGTERM waits for requests in progress before leaving as a crash would; by
  // default longer than any charge can take (the provider deadline), plus the ledger's steps.
  std::optional<std::chrono::milliseconds> shutdown_grace;
  std::uint32_t provider_concurrency = 0;  // 0: no bound
};

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response reply(const Request& req, http::status status, std::string body) {
  Response res{status, req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response reply(const Request& req, http::status status, const json::object& body) {
  return reply(req, status, json::serialize(body) + "\n");
}

Response retry_later(const Request& req, http::status status, std::string_view code,
                     std::string_view message, const std::string& order_id) {
  auto res = reply(req, status, {{"error", code}, {"message", message}, {"order_id", order_id}});
  res.set(http::field::retry_after, "1");
  return res;
}

Response unavailable(const Request& req, const std::string& order_id) {
  return retry_later(req, http::status::service_unavailable, "temporarily_unavailable",
                     "temporarily unavailable; retry with the same order_id", order_id);
}

Response in_progress(const Request& req, const std::string& order_id) {
  return retry_later(req, http::status::conflict, "order_in_progress",
                     "another request is processing this order; retry later", order_id);
}

// An order id goes into Redis keys and JSON: keep it to a safe, bounded alphabet.
bool valid_order_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

bool valid_currency(std::string_view c) {
  return c.size() == 3 &&
         std::all_of(c.begin(), c.end(), [](char x) { return x >= 'A' && x <= 'Z'; });
}

/// 128 bits straight from the system's random source (a seeded generator would repeat
/// whenever two threads drew the same seed).
std::string new_idempotency_key() {
  static thread_local std::random_device random;
  char buf[40];
  std::snprintf(buf, sizeof buf, "chk_%08x%08x%08x%08x", random(), random(), random(), random());
  return buf;
}

asio::ip::tcp::endpoint parse_endpoint(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("expected HOST:PORT");
  return {asio::ip::make_address(host_port.substr(0, colon)),
          static_cast<unsigned short>(std::stoul(host_port.substr(colon + 1)))};
}

/// What the order's client is told once the provider has answered: the same bytes whoever
/// learns the answer (this request, a retry, the reconciler), so a replay is the original.
struct Decided {
  int status = 0;  // 201 or 402
  std::string body;
  std::string charge_id;  // empty when the provider refused the request
};

/// The provider's answer as the order's final outcome, or nullopt while it is not known:
///   201 charged, 402 declined (both carry the provider's charge id);
///   any other 4xx but 409 (the key's first call is still running) and 429 (slow down): the
///     provider refused the request and charged nothing, and would refuse it again (it keeps
///     a key's answer): a final failure, so that neither the client nor the reconciler
///     retries it forever;
///   no answer, 409, 429, 5xx: not known (a 5xx may come after a charge): the attempt stays
///     pending and is retried with the same key.
std::optional<Decided> decided(const checkout::HttpAnswer& a, const checkout::Record& order) {
  if (a.status >= 400 && a.status < 500 && a.status != 402 && a.status != 409 && a.status != 429) {
    const json::object body{{"status", "failed"},
                            {"order_id", order.order_id},
                            {"amount", order.amount},
                            {"currency", order.currency},
                            {"failure_code", "payment_refused"},
                            {"message",
                             "the payment provider refused this payment; nothing was "
                             "charged"}};
    return Decided{402, json::serialize(body) + "\n", ""};
  }
  if (a.status != 201 && a.status != 402) return std::nullopt;
  error_code ec;
  const json::value v = json::parse(a.body, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  const json::value* id = o ? o->if_contains("id") : nullptr;
  if (!id || !id->is_string()) return std::nullopt;
  json::object body{{"status", a.status == 201 ? "charged" : "declined"},
                    {"order_id", order.order_id},
                    {"amount", order.amount},
                    {"currency", order.currency},
                    {"charge_id", id->get_string()}};
  if (a.status == 402) body["decline_code"] = "card_declined";
  return Decided{a.status, json::serialize(body) + "\n", std::string(id->get_string())};
}

/// One worker process: an acceptor on the shared port, a LockManager, the ledger's pool, the
/// reconciler.
class Worker {
 public:
  Worker(asio::io_context& io, const Options& opt, redis_lock::ConnectionConfig lock_config,
         redis_lock::ConnectionConfig ledger_config, int index)
      : io_(io),
        opt_(opt),
        index_(index),
        provider_(parse_endpoint(opt.provider)),
        locks_(io.get_executor(), lock_config, {.key_prefix = opt.prefix + "lock:"}),
        ledger_(ledger_config, opt.prefix, opt.retention),
        acceptor_(io) {}

  void listen() {
    const asio::ip::tcp::endpoint ep(asio::ip::make_address(opt_.listen), opt_.port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    const int on = 1;  // every worker binds the same port; the kernel spreads connections
    if (::setsockopt(acceptor_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
      throw std::runtime_error(std::string("SO_REUSEPORT: ") + std::strerror(errno));
    }
    acceptor_.bind(ep);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    std::printf("checkout worker %d (pid %d) listening on %s:%u\n", index_, ::getpid(),
                opt_.listen.c_str(), acceptor_.local_endpoint().port());
    std::fflush(stdout);
    asio::co_spawn(io_, accept_loop(), asio::detached);
    asio::co_spawn(io_, reconcile_loop(), asio::detached);
  }

  /// Stops accepting and closes idle connections; requests and charges in progress finish
  /// (each is bounded: the provider deadline, the ledger's timeouts), and io.run() returns
  /// when they have. Nothing is abandoned mid-step, so no coroutine is destroyed suspended.
  void stop() {
    error_code ignored;
    acceptor_.close(ignored);
    stopping_ = true;
    reconcile_timer_.cancel();
    for (auto* idle : reading_) idle->cancel();
    if (busy_ == 0) return;
    // A last resort, should a step hang after all (or a charge outlast a --shutdown-grace-ms
    // set shorter than it): leave as a crash would (the ledger's pending attempts are
    // finished by a retry or the other workers' reconcilers).
    grace_.expires_after(opt_.shutdown_grace.value_or(opt_.provider_timeout + 10s));
    grace_.async_wait([this](error_code ec) {
      if (ec) return;
      std::fprintf(stderr, "checkout worker %d (pid %d): shutdown grace ran out; exiting\n", index_,
                   ::getpid());
      print_summary();
      std::_Exit(1);
    });
  }

  void print_summary() const {
    std::printf(
        "checkout worker %d (pid %d): %d charged, %d declined, %d failed, %d replayed, "
        "%d conflicts, %d pending, %d unavailable, %d reconciled\n",
        index_, ::getpid(), charged_, declined_, failed_, replayed_, conflicts_, pending_,
        unavailable_, reconciled_);
    std::fflush(stdout);
  }

 private:
  /// Counts a connection or a reconciliation as work that shutdown waits for.
  struct Busy {
    Worker* w;
    explicit Busy(Worker* worker) : w(worker) { ++w->busy_; }
    ~Busy() {
      if (--w->busy_ == 0 && w->stopping_) w->grace_.cancel();
    }
  };

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec) continue;  // e.g. out of file descriptors for a moment
      asio::co_spawn(io_, session(beast::tcp_stream(std::move(socket))), asio::detached);
    }
  }

  asio::awaitable<void> session(beast::tcp_stream stream) {
    Busy busy(this);
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(8 * 1024);
      stream.expires_after(30s);
      if (stopping_) break;
      reading_.insert(&stream);  // idle until a request comes: stop() cancels the read
      auto [ec, n] =
          co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
      reading_.erase(&stream);
      if (ec == http::error::body_limit) {
        Request req = parser.release();
        Response res = reply(req, http::status::payload_too_large,
                             {{"error", "too_large"}, {"message", "the body is limited to 8 KiB"}});
        co_await write(stream, std::move(res));
        break;
      }
      if (ec) break;  // closed, timed out or garbage: nothing to answer
      Request req = parser.release();
      Response res = co_await handle(req);
      const bool keep = res.keep_alive() && !stopping_;
      res.keep_alive(keep);
      if (!co_await write(stream, std::move(res)) || !keep) break;
    }
    error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  }

  static asio::awaitable<bool> write(beast::tcp_stream& stream, Response res) {
    auto [ec, n] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    co_return !ec;
  }

  asio::awaitable<Response> handle(const Request& req) {
    if (req.target() == "/healthz") {
      co_return reply(req, http::status::ok, {{"status", "ok"}, {"worker", index_}});
    }
    if (req.target() != "/checkout") {
      co_return reply(req, http::status::not_found,
                      {{"error", "not_found"}, {"message", "try POST /checkout"}});
    }
    if (req.method() != http::verb::post) {
      auto res = reply(req, http::status::method_not_allowed,
                       {{"error", "method_not_allowed"}, {"message", "use POST"}});
      res.set(http::field::allow, "POST");
      co_return res;
    }
    error_code ec;
    const json::value body = json::parse(req.body(), ec);
    const json::object* obj = ec ? nullptr : body.if_object();
    const json::value* order_value = obj ? obj->if_contains("order_id") : nullptr;
    const json::string* order = order_value ? order_value->if_string() : nullptr;
    const json::value* amount = obj ? obj->if_contains("amount") : nullptr;
    const json::value* currency_value = obj ? obj->if_contains("currency") : nullptr;
    const json::string* currency = currency_value ? currency_value->if_string() : nullptr;
    if (!order || !valid_order_id(*order) || !amount || !amount->is_int64() ||
        amount->as_int64() <= 0 || amount->as_int64() > 100'000'000'00 ||
        (currency_value && (!currency || !valid_currency(*currency)))) {
      co_return reply(req, http::status::bad_request,
                      {{"error", "bad_request"},
                       {"message",
                        "expected {\"order_id\": \"[A-Za-z0-9_.:-]{1,128}\", "
                        "\"amount\": <minor units, 1..10000000000>, "
                        "\"currency\": \"[A-Z]{3}\" (default EUR)}"}});
    }
    // (named first: GCC 12 miscompiles a conditional with a literal inside a co_await)
    std::string order_id(order->data(), order->size());
    std::string currency_code = "EUR";
    if (currency) currency_code.assign(currency->data(), currency->size());
    co_return co_await checkout(req, std::move(order_id), amount->as_int64(),
                                std::move(currency_code));
  }

  asio::awaitable<Response> checkout(const Request& req, std::string order_id, std::int64_t amount,
                                     std::string currency) {
    // 1. A decided order is answered from the ledger: no lock, no provider.
    std::optional<checkout::Record> stored;
    try {
      stored = co_await on_pool([&] { return ledger_.find(order_id); });
    } catch (const checkout::LedgerError&) {
      ++unavailable_;
      co_return unavailable(req, order_id);
    }
    if (stored && (stored->amount != amount || stored->currency != currency)) {
      co_return mismatch(req, order_id);
    }
    if (stored && stored->state == "final") co_return replay(req, *stored);

    // 2. One attempt at the order's lock: a duplicate in flight is told so at once.
    auto [ec, guard] = co_await locks_.async_acquire("order:" + order_id, lock_options(),
                                                     asio::as_tuple(asio::use_awaitable));
    if (ec) {
      ++unavailable_;
      co_return unavailable(req, order_id);
    }
    if (!guard) {
      ++conflicts_;
      co_return in_progress(req, order_id);
    }
    const Settled s = co_await settle(guard, order_id, amount, currency);
    co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
    switch (s.outcome) {
      case Settled::decided:
        (s.order.status == 201 ? charged_ : s.order.charge_id.empty() ? failed_ : declined_)++;
        co_return reply(req, static_cast<http::status>(s.order.status), s.order.body);
      case Settled::already_final:
        co_return replay(req, s.order);
      case Settled::mismatch:
        co_return mismatch(req, order_id);
      case Settled::taken_over:
        ++conflicts_;
        co_return in_progress(req, order_id);
      case Settled::unavailable:
        ++unavailable_;
        co_return unavailable(req, order_id);
      case Settled::unknown:
        break;
    }
    ++pending_;
    auto res = reply(req, http::status::accepted,
                     {{"status", "pending"},
                      {"order_id", order_id},
                      {"message",
                       "the payment's outcome is not known yet; retry with the same "
                       "order_id to learn it (it will not be charged twice)"}});
    res.set(http::field::retry_after, "1");
    co_return res;
  }

  redis_lock::LockOptions lock_options() const {
    // max_hold: a wedged but live worker stops renewing after the longest a charge can take,
    // so the order passes to a retry or the reconciler (which reuse the idempotency key).
    return {.ttl = opt_.lock_ttl,
            .auto_renew = opt_.renew,
            .max_hold = opt_.renew ? opt_.provider_timeout + 5s : 0ms};
  }

  struct Settled {
    enum Outcome { decided, already_final, mismatch, taken_over, unavailable, unknown } outcome;
    checkout::Record order;  // decided / already_final: status and body to send
  };

  /// Steps 3-5, under the order's lock: for a client request and for the reconciler alike.
  asio::awaitable<Settled> settle(const redis_lock::LockGuard& guard, const std::string& order_id,
                                  std::int64_t amount, const std::string& currency) {
    // (the fault scenarios read which token each holder of an order got from here)
    std::printf("checkout worker %d (pid %d) holds %s with fencing token %llu\n", index_,
                ::getpid(), order_id.c_str(),
                static_cast<unsigned long long>(guard.fencing_token()));
    std::fflush(stdout);
    checkout::Ledger::BeginResult begun;
    try {
      begun = co_await on_pool([&] {
        return ledger_.begin(order_id, amount, currency, guard.fencing_token(),
                             new_idempotency_key());
      });
    } catch (const checkout::LedgerError&) {
      // Nothing was sent to the provider by this attempt; whether the pending record was
      // written is unknown, and either way harmless: the next attempt finds it or writes it.
      co_return Settled{Settled::unavailable, {}};
    }
    using Begun = checkout::Ledger::Begun;
    const checkout::Record& order = begun.record;
    if (begun.outcome == Begun::stale) co_return Settled{Settled::taken_over, {}};
    if (order.amount != amount || order.currency != currency) {
      co_return Settled{Settled::mismatch, {}};  // also for a decided order: never its replay
    }
    if (begun.outcome == Begun::final) co_return Settled{Settled::already_final, order};

    // 4. The provider, with the attempt's key and a deadline inside the lease: a holder never
    // calls on a lease that could lapse before the answer is back.
    const auto now = Clock::now();
    const auto margin = std::max<std::chrono::milliseconds>(opt_.lock_ttl / 10, 50ms);
    const auto lease_left = guard.valid_until() - margin - now;
    if (guard.lost() || lease_left <= 0ms) co_return Settled{Settled::unknown, {}};
    auto deadline = now + std::min<Clock::duration>(opt_.provider_timeout, lease_left);
    // At most N calls to the provider at once, fleet-wide: a permit for the call, waited for
    // at most half of what is left (the call needs the rest), and the call's deadline inside
    // the permit's lease too. Released as soon as the answer is in (or the call gave up).
    redis_lock::LockGuard permit;
    if (opt_.provider_concurrency > 0) {
      const auto patience = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::min<Clock::duration>(opt_.provider_timeout, lease_left) / 2);
      auto [pec, granted] = co_await locks_.async_acquire_permit(
          "payment-provider", opt_.provider_concurrency,
          {.ttl = opt_.lock_ttl, .wait = patience},  // the call's deadline fits its lease
          asio::as_tuple(asio::use_awaitable));
      if (pec || !granted) co_return Settled{Settled::unavailable, {}};  // nothing was sent
      permit = std::move(granted);
      const auto later = Clock::now();
      const auto left = std::min(guard.valid_until(), permit.valid_until()) - margin - later;
      if (guard.lost() || left <= 0ms) co_return Settled{Settled::unknown, {}};
      deadline = later + std::min<Clock::duration>(opt_.provider_timeout, left);
    }
    std::printf("checkout worker %d (pid %d) calling the provider for %s\n", index_, ::getpid(),
                order_id.c_str());
    std::fflush(stdout);
    // (built outside the co_await: GCC 12 cannot keep literal arrays in a coroutine frame)
    std::string request = json::serialize(json::object{
        {"amount", order.amount}, {"currency", order.currency}, {"reference", order.order_id}});
    std::vector<std::pair<std::string, std::string>> headers{
        {"Idempotency-Key", order.idempotency_key}};
    const auto answer =
        co_await checkout::http_call(provider_, http::verb::post, "/v1/charges", std::move(request),
                                     deadline, std::move(headers));
    std::printf("checkout worker %d (pid %d) provider answered %d for %s\n", index_, ::getpid(),
                answer.status, order_id.c_str());  // 0: no answer
    std::fflush(stdout);
    if (permit) co_await permit.async_release(asio::as_tuple(asio::use_awaitable));
    const auto result = decided(answer, order);
    if (!result) co_return Settled{Settled::unknown, {}};

    // 5. The provider's answer is the order's one outcome (every caller of this key gets the
    // same): record it; if the ledger is down, the client still hears it, and the pending
    // record lets the reconciler record the same bytes later.
    checkout::Record final_order = order;
    final_order.status = result->status;
    final_order.body = result->body;
    final_order.charge_id = result->charge_id;
    try {
      auto stored = co_await on_pool([&] {
        return ledger_.finish(order_id, order.idempotency_key, result->status, result->body,
                              result->charge_id);
      });
      if (stored.state == "final") final_order = std::move(stored);
    } catch (const checkout::LedgerError&) {
      std::printf(
          "checkout worker %d (pid %d) could not record the answer for %s: ledger "
          "unavailable (the reconciler will)\n",
          index_, ::getpid(), order_id.c_str());
      std::fflush(stdout);
    }
    co_return Settled{Settled::decided, std::move(final_order)};
  }

  /// Finishes pending attempts that nobody is working on (a worker died, a call went
  /// unanswered): the same steps under the lock, with the same idempotency key.
  asio::awaitable<void> reconcile_loop() {
    while (!stopping_) {
      reconcile_timer_.expires_after(opt_.reconcile_every);
      co_await reconcile_timer_.async_wait(asio::as_tuple(asio::use_awaitable));  // or cancelled
      if (stopping_) co_return;
      Busy busy(this);
      std::vector<std::string> overdue;
      try {
        overdue = co_await on_pool([&] { return ledger_.overdue(opt_.lock_ttl, 32); });
      } catch (const checkout::LedgerError&) {
        continue;
      }
      for (const auto& order_id : overdue) {
        if (stopping_) break;
        std::optional<checkout::Record> order;
        try {
          order = co_await on_pool([&] { return ledger_.find(order_id); });
        } catch (const checkout::LedgerError&) {
          break;
        }
        if (!order || order->state != "pending") continue;
        auto [lec, guard] = co_await locks_.async_acquire("order:" + order_id, lock_options(),
                                                          asio::as_tuple(asio::use_awaitable));
        if (lec || !guard) continue;  // someone is on it, or the lock server is away
        // Under the lock, claim the retry: another worker that listed the order too may have
        // retried it meanwhile, and then it is not due. The claim also moves the order back
        // in the line, later each time, so that a few stuck orders cannot keep the reconciler
        // from newer ones and a struggling provider is not asked every round.
        std::optional<checkout::Ledger::Retry> retry;
        try {
          retry = co_await on_pool([&] {
            return ledger_.claim_retry(order_id, opt_.lock_ttl, opt_.lock_ttl,
                                       opt_.reconcile_max_backoff);
          });
        } catch (const checkout::LedgerError&) {
        }
        if (!retry) {
          co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
          continue;
        }
        const Settled s = co_await settle(guard, order_id, order->amount, order->currency);
        co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
        if (s.outcome == Settled::decided) {
          ++reconciled_;
        } else {
          // Each undecided retry is logged: an order that stays pending for hours needs a
          // person (the provider keeps an idempotency key for a limited time, 24 h at the
          // common ones).
          std::fprintf(stderr,
                       "checkout worker %d (pid %d): %s still pending after reconcile retry %d; "
                       "next in about %lld ms\n",
                       index_, ::getpid(), order_id.c_str(), retry->n,
                       static_cast<long long>((retry->delay + opt_.lock_ttl).count()));
        }
      }
    }
  }

  Response replay(const Request& req, const checkout::Record& stored) {
    ++replayed_;
    auto res = reply(req, static_cast<http::status>(stored.status), stored.body);
    res.set("Idempotent-Replayed", "true");
    return res;
  }

  Response mismatch(const Request& req, const std::string& order_id) {
    ++conflicts_;
    return reply(req, http::status::unprocessable_entity,
                 {{"error", "order_mismatch"},
                  {"message", "this order was placed with another amount or currency"},
                  {"order_id", order_id}});
  }

  /// Runs the blocking ledger call on the pool and comes back to this worker's thread.
  template <class Fn>
  asio::awaitable<std::invoke_result_t<Fn>> on_pool(Fn fn) {
    const auto io_busy = asio::make_work_guard(io_);  // io.run() must wait for our way back
    co_await asio::post(asio::bind_executor(pool_, asio::use_awaitable));
    std::exception_ptr failure;
    std::optional<std::invoke_result_t<Fn>> result;
    try {
      result.emplace(fn());
    } catch (...) {
      failure = std::current_exception();
    }
    co_await asio::post(asio::bind_executor(io_.get_executor(), asio::use_awaitable));
    if (failure) std::rethrow_exception(failure);
    co_return std::move(*result);
  }

  asio::io_context& io_;
  const Options& opt_;
  int index_;
  asio::ip::tcp::endpoint provider_;
  redis_lock::LockManager locks_;
  checkout::Ledger ledger_;
  asio::thread_pool pool_{4};
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer grace_{io_};
  std::set<beast::tcp_stream*> reading_;  // connections waiting for their next request
  asio::steady_timer reconcile_timer_{io_};
  int busy_ = 0;
  bool stopping_ = false;
  int charged_ = 0, declined_ = 0, failed_ = 0, replayed_ = 0, conflicts_ = 0, pending_ = 0,
      unavailable_ = 0, reconciled_ = 0;
};

struct Configs {
  redis_lock::ConnectionConfig lock, ledger;
};

int run_worker(const Options& opt, const Configs& configs, int index) {
  try {
    asio::io_context io;
    Worker worker(io, opt, configs.lock, configs.ledger, index);
    worker.listen();
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](error_code ec, int) {
      if (!ec) worker.stop();
    });
    io.run();
    worker.print_summary();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkout worker %d: %s\n", index, e.what());
    return 1;
  }
}

[[noreturn]] void usage(int code) {
  std::fputs(
      "usage: checkout_service --ledger-url URL --provider HOST:PORT [--url URL]\n"
      "                        [--listen ADDR] [--port P] [--workers N] [--lock-ttl-ms MS]\n"
      "                        [--no-renew] [--provider-timeout-ms MS] [--retention-s S]\n"
      "                        [--reconcile-ms MS] [--reconcile-max-backoff-ms MS]\n"
      "                        [--shutdown-grace-ms MS] [--prefix PREFIX]\n"
      "                        [--provider-concurrency N]\n"
      "  --url (the lock's Redis) defaults to $REDIS_LOCK_URL or redis://127.0.0.1:6379;\n"
      "  --ledger-url is a Redis of its own (appendfsync always); the provider deadline must\n"
      "  be shorter than the lock's ttl; --shutdown-grace-ms defaults to the provider deadline\n"
      "  plus 10 s; a pending order the reconciler could not finish is retried later each time\n"
      "  (the waits between its retries are 1, 2, 4, 8, ... times the lock ttl), waiting at\n"
      "  most the lock ttl plus --reconcile-max-backoff-ms (5 minutes by default, at most 24 h;\n"
      "  0: no backoff); --provider-concurrency N: at most N provider calls at once, from all\n"
      "  workers together (0, the default: no bound)\n",
      code == 0 ? stdout : stderr);
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options opt;
  if (const char* env = std::getenv("REDIS_LOCK_URL")) opt.url = env;
  const auto ms = [](const std::string& v) { return std::chrono::milliseconds(std::stol(v)); };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage(0);
    if (arg == "--no-renew") {
      opt.renew = false;
      continue;
    }
    if (i + 1 >= argc) usage(2);
    const std::string value = argv[++i];
    try {
      if (arg == "--url")
        opt.url = value;
      else if (arg == "--ledger-url")
        opt.ledger_url = value;
      else if (arg == "--provider")
        opt.provider = value;
      else if (arg == "--listen")
        opt.listen = value;
      else if (arg == "--port")
        opt.port = static_cast<unsigned short>(std::stoul(value));
      else if (arg == "--workers")
        opt.workers = std::stoi(value);
      else if (arg == "--lock-ttl-ms")
        opt.lock_ttl = ms(value);
      else if (arg == "--provider-timeout-ms")
        opt.provider_timeout = ms(value);
      else if (arg == "--retention-s")
        opt.retention = std::chrono::seconds(std::stol(value));
      else if (arg == "--reconcile-ms")
        opt.reconcile_every = ms(value);
      else if (arg == "--reconcile-max-backoff-ms")
        opt.reconcile_max_backoff = ms(value);
      else if (arg == "--shutdown-grace-ms")
        opt.shutdown_grace = ms(value);
      else if (arg == "--prefix")
        opt.prefix = value;
      else if (arg == "--provider-concurrency")
        opt.provider_concurrency = static_cast<std::uint32_t>(std::stoul(value));
      else
        usage(2);
    } catch (const std::exception&) {
      usage(2);
    }
  }
  if (opt.workers < 1 || opt.workers > 64 || opt.lock_ttl.count() <= 0 ||
      opt.provider_timeout.count() <= 0 || opt.provider_timeout >= opt.lock_ttl ||
      opt.retention.count() <= 0 || opt.reconcile_every.count() <= 0 ||
      opt.reconcile_max_backoff.count() < 0 || opt.reconcile_max_backoff > std::chrono::hours(24) ||
      (opt.shutdown_grace && opt.shutdown_grace->count() <= 0) || opt.ledger_url.empty() ||
      opt.provider.empty()) {
    usage(2);
  }
  try {
    parse_endpoint(opt.provider);
  } catch (const std::exception&) {
    std::fputs("checkout_service: --provider must be IP:PORT\n", stderr);
    std::exit(2);
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  // hiredis writes with plain write(2): a ledger that went away must be an error to handle,
  // not a SIGPIPE that kills the worker (Asio's own sockets never raise it).
  std::signal(SIGPIPE, SIG_IGN);
  const Options opt = parse(argc, argv);
  const auto lock = redis_lock::ConnectionConfig::from_url(opt.url);
  const auto ledger = redis_lock::ConnectionConfig::from_url(opt.ledger_url);
  if (!lock || !ledger) {
    std::fprintf(stderr, "checkout_service: --%s is not a valid redis:// or unix:// URL\n",
                 lock ? "ledger-url" : "url");
    return 2;
  }
  const Configs configs{*lock, *ledger};
  if (opt.workers == 1) return run_worker(opt, configs, 0);

  // Fork before any thread or io_context exists; each child is a complete service. The
  // parent blocks the signals it waits for first, so that none is lost before sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &set, &old);
  struct Child {
    pid_t pid = -1;
    std::chrono::steady_clock::time_point started;
  };
  std::vector<Child> children(static_cast<std::size_t>(opt.workers));
  const pid_t parent = ::getpid();
  const auto spawn = [&](std::size_t i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      // A worker outliving its parent (kill -9 of the parent) stops as if told to.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) std::_Exit(0);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      std::_Exit(run_worker(opt, configs, static_cast<int>(i)));
    }
    children[i] = {pid, std::chrono::steady_clock::now()};
    return pid > 0;
  };
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (!spawn(i)) {
      std::perror("fork");
      for (const auto& c : children) {
        if (c.pid > 0 && ::kill(c.pid, SIGTERM) == 0) ::waitpid(c.pid, nullptr, 0);
      }
      return 1;
    }
  }
  // The parent forwards SIGINT/SIGTERM, waits for its workers, and replaces a worker killed
  // by a signal (a crash, kill -9) unless that happened within 100 ms of its start (a crash
  // loop); a worker that exits with an error (it could not start) is not replaced. A dead
  // worker's pending charges are finished by the reconcilers.
  int failed = 0;
  bool stopping = false;
  std::size_t alive = children.size();
  while (alive > 0) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGINT || sig == SIGTERM) {
      stopping = true;
      for (const auto& c : children)
        if (c.pid > 0) ::kill(c.pid, SIGTERM);
      continue;
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      const auto it = std::find_if(children.begin(), children.end(),
                                   [pid](const Child& c) { return c.pid == pid; });
      if (it == children.end()) continue;
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      const bool young = std::chrono::steady_clock::now() - it->started < 100ms;
      it->pid = -1;
      if (WIFSIGNALED(status) && !stopping && !young) {
        std::printf("checkout worker %td (pid %d) died; starting another\n", it - children.begin(),
                    pid);
        std::fflush(stdout);
        if (spawn(static_cast<std::size_t>(it - children.begin()))) continue;
      }
      --alive;
      if (!clean) ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}
