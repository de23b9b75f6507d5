// SPDX-License-Identifier: MIT
// The scenario redis_lock exists for: an HTTP checkout service run as several processes on one
// port, where the same order may arrive twice at once (a retrying client, a double click), in
// front of a payment provider that must charge each order once, through crashes, failovers and
// a ledger that forgets.
//
//   POST /checkout {"order_id": "A-17", "amount": 1299, "currency": "EUR"}
//     201 Created    {"status": "charged", "charge_id": ...}   charged (now or, on a replay,
//                                                               before)
//     402 Payment Required {"status": "declined", ...}         the provider declined the card
//     402 Payment Required {"status": "failed", ...}   the provider refused the charge for good
//                                                       (a 4xx other than those below): nothing
//                                                       was charged; a new order is needed
//     202 Accepted   {"status": "pending"} + Retry-After      the outcome is not known yet: retry
//                                                               with the same order_id after
//                                                               Retry-After (when the service
//                                                               will next look at it)
//     202 Accepted   {"status": "under_review"}   a person is checking the outcome with the
//                                                 provider: it will not be charged twice
//     409 Conflict   {"error": "order_in_progress"} + Retry-After   another request has it now
//     422 Unprocessable {"error": "order_mismatch"}   this order exists with another amount
//                                                     or currency
//     503 {"error": "temporarily_unavailable" | "provider_unavailable"} + Retry-After
//                    nothing was charged by this request and nothing is left to charge later:
//                    retry with the same order_id
//     400 / 404 / 405 / 413 for bad requests (currency is required)
//   A decided order's stored response is replayed, byte for byte, with the same status and
//   `Idempotent-Replayed: true`, for good (the order's record is its financial record); so is
//   an answer the provider gave as a replay of an earlier call.
//   GET /healthz
//   GET /metrics (with --metrics-port, on a port of each worker's own): the lock's metrics
//     (redis_lock::PrometheusObserver) and the service's (service_metrics.hpp)
//
// The flow (see docs/guide.md, "Payments: what gives exactly-once and what the lock adds"), done
// by redis_lock::IdempotentRequests ("Idempotent requests"); this file supplies the charge
// (charge()), the lookup of an attempt (resolve()) and the classification of the provider's
// answers (judge()), and keeps its HTTP and its words:
//   1. a decided order is answered from the ledger, without the lock;
//   2. one lock per order, one attempt: a concurrent duplicate gets 409;
//   3. under the lock, a pending attempt {order, amount, currency, attempt, key} is written to
//      the ledger (or an earlier one found) before the provider is called; the key is derived
//      from the order and the attempt number, so no loss of the record can mint a second key;
//   4. an earlier attempt is looked up at the provider by its key before anything is sent;
//      an attempt the provider never saw is sent (with its key); one it is executing is left
//      to finish;
//   5. the provider is called with the key and a deadline below the lease's valid_until();
//   6. its answer is recorded as the order's final response; if no answer came, the client
//      gets 202 and the pending attempt stays; if the call was never made or never executed,
//      the attempt is void and the client gets 503: nothing will be charged later;
//   7. a reconciler in every worker looks pending attempts up at the provider (by key, then
//      by reference after a 5xx): it records what happened, voids an attempt the provider
//      never saw (it never charges late), makes a new attempt only after a definite failure,
//      and escalates an attempt it could not learn within half the provider's key window;
//      it sends that new attempt itself, from the order kept with its record.
//   --show ORDER prints an order's record (a probe for the scenarios and for people).
//
//   checkout_service --ledger-url URL --provider HOST:PORT [--url redis://127.0.0.1:6379]
//                    [--listen 127.0.0.1] [--port 8080] [--workers N] [--lock-ttl-ms 5000]
//                    [--no-renew] [--no-lock] [--provider-timeout-ms 2000]
//                    [--provider-key-window-s 86400] [--reconcile-ms 1000]
//                    [--reconcile-max-backoff-ms 300000] [--shutdown-grace-ms MS]
//                    [--prefix checkout:] [--provider-concurrency N]
//                    [--ledger-replicas N] [--ledger-unchecked] [--metrics-port P]
//   checkout_service --ledger-url URL [--prefix checkout:] --list-escalated
//   checkout_service --ledger-url URL [--prefix checkout:] --resolve ORDER
//                    (--charge-id ID | --declined-charge-id ID | --not-charged)
//
// --provider-concurrency N: at most N charges are in flight to the provider at once, from
// all workers together (a provider's rate or concurrency limit, shared by the fleet): each
// call holds a permit of the semaphore "payment-provider" (redis_lock's
// async_acquire_permit), waited for within the order's lease. No permit in time: 503 with
// Retry-After, nothing was sent and the attempt is void.
//
// --no-lock: no order lock and so no ledger either (a measurement of what the lock saves: the
// derived key alone keeps each order charged once, every duplicate reaching the provider; a
// 5xx the provider keeps for the key stays the answer: not a mode to run a shop on; see the
// no_lock scenario).
//
// --url is the lock's Redis; --ledger-url a Redis of its own, which the service checks at
// start-up (appendonly yes, appendfsync always, maxmemory-policy noeviction; --ledger-unchecked
// to run without the check, for a server that refuses CONFIG); --ledger-replicas N makes
// every ledger write wait for N replicas (WAIT). --workers N forks N processes that each
// accept on the same port (SO_REUSEPORT), each with its own LockManager: the lock, not the
// process, keeps orders apart. CHECKOUT_PROVIDER_API_KEY in the environment is sent to the
// provider as a bearer token.
#include "http_call.hpp"
#include "service_metrics.hpp"

#include <redis_lock/idempotency.hpp>
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
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
  bool use_lock = true;  // --no-lock: a measurement of what the lock saves
  std::chrono::milliseconds provider_timeout{2000};
  // How long the provider keeps an idempotency key: an attempt still undecided after half of
  // it is escalated (a lookup after the window could not tell "never charged" from "forgotten").
  std::chrono::milliseconds provider_key_window{std::chrono::hours(24)};
  std::chrono::milliseconds reconcile_every{1000};
  // The longest a pending order waits between two reconcile retries (beyond the lock ttl).
  std::chrono::milliseconds reconcile_max_backoff{300000};
  std::string prefix = "checkout:";
  // How long SIGTERM waits for requests in progress before leaving as a crash would; by
  // default longer than any charge can take (the provider deadline), plus the ledger's steps.
  std::optional<std::chrono::milliseconds> shutdown_grace;
  std::uint32_t provider_concurrency = 0;  // 0: no bound
  int max_connections = 1000;              // per worker, and within the descriptor limit
  int ledger_replicas = 0;
  bool ledger_unchecked = false;
  std::string provider_api_key;  // from CHECKOUT_PROVIDER_API_KEY
  // /metrics on this port + the worker's index (0: a free port each, printed).
  std::optional<unsigned short> metrics_port;
  // Admin modes.
  bool list_escalated = false;
  std::string resolve;  // an escalated order to resolve
  std::string resolve_charge_id;
  bool resolve_declined = false;
  bool resolve_not_charged = false;
  std::string show;  // an order whose record to print
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
                     std::string_view message, const std::string& order_id,
                     std::chrono::seconds after = 1s) {
  auto res = reply(req, status, {{"error", code}, {"message", message}, {"order_id", order_id}});
  res.set(http::field::retry_after, std::to_string(std::max<long long>(after.count(), 1)));
  return res;
}

Response unavailable(const Request& req, const std::string& order_id) {
  return retry_later(req, http::status::service_unavailable, "temporarily_unavailable",
                     "temporarily unavailable; nothing was charged by this request and "
                     "nothing will be charged later; retry with the same order_id",
                     order_id);
}

Response provider_unavailable(const Request& req, const std::string& order_id) {
  return retry_later(req, http::status::service_unavailable, "provider_unavailable",
                     "the payment provider did not take the payment; nothing was charged; "
                     "retry with the same order_id",
                     order_id, 5s);
}

Response in_progress(const Request& req, const std::string& order_id) {
  return retry_later(req, http::status::conflict, "order_in_progress",
                     "another request is processing this order; retry later", order_id);
}

// An order id goes into Redis keys, idempotency keys and JSON: keep it to a safe, bounded
// alphabet.
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

asio::ip::tcp::endpoint parse_endpoint(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("expected HOST:PORT");
  return {asio::ip::make_address(host_port.substr(0, colon)),
          static_cast<unsigned short>(std::stoul(host_port.substr(colon + 1)))};
}

/// True when some object in the JSON text repeats a key (`{"amount": 1, "amount": 2}`):
/// Boost.JSON keeps the last, and a body that says two things must not be charged for one of
/// them. A SAX pass over the text (at most 8 KiB) that remembers each open object's keys.
struct DuplicateKeys {  // Boost.JSON SAX handler
  constexpr static std::size_t max_object_size = std::size_t(-1);
  constexpr static std::size_t max_array_size = std::size_t(-1);
  constexpr static std::size_t max_key_size = std::size_t(-1);
  constexpr static std::size_t max_string_size = std::size_t(-1);
  std::vector<std::set<std::string, std::less<>>> open;
  std::string key;
  bool repeated = false;
  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) {
    open.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t, error_code&) {
    open.pop_back();
    return true;
  }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t, error_code&) { return true; }
  bool on_key_part(json::string_view s, std::size_t, error_code&) {
    key.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, error_code&) {
    key.append(s.data(), s.size());
    if (!open.back().insert(key).second) repeated = true;
    key.clear();
    return true;
  }
  bool on_string_part(json::string_view, std::size_t, error_code&) { return true; }
  bool on_string(json::string_view, std::size_t, error_code&) { return true; }
  bool on_number_part(json::string_view, error_code&) { return true; }
  bool on_int64(std::int64_t, json::string_view, error_code&) { return true; }
  bool on_uint64(std::uint64_t, json::string_view, error_code&) { return true; }
  bool on_double(double, json::string_view, error_code&) { return true; }
  bool on_bool(bool, error_code&) { return true; }
  bool on_null(error_code&) { return true; }
  bool on_comment_part(json::string_view, error_code&) { return true; }
  bool on_comment(json::string_view, error_code&) { return true; }
};
bool repeats_a_key(std::string_view text) {
  json::basic_parser<DuplicateKeys> parser(json::parse_options{});
  error_code ec;
  parser.write_some(false, text.data(), text.size(), ec);
  return !ec && parser.handler().repeated;
}

/// An order as the client placed it. (Not an aggregate: GCC 12 miscompiles an aggregate
/// built from a braced list inside a coroutine, and the copies the charges capture died of it.)
struct Order {
  Order() = default;
  Order(std::string id, std::int64_t minor_units, std::string code)
      : order_id(std::move(id)), amount(minor_units), currency(std::move(code)) {}
  std::string order_id;
  std::int64_t amount = 0;  // in minor units (cents)
  std::string currency;
};

/// What identifies an order's request (another amount or currency for the same order id is
/// a mismatch, 422): its amount and currency.
std::string fingerprint_of(const Order& o) { return std::to_string(o.amount) + " " + o.currency; }

/// The order's bytes, kept with its record while it is undecided: what the reconciler sends
/// when it makes the next attempt itself.
std::string payload_of(const Order& o) {
  return json::serialize(
      json::object{{"order_id", o.order_id}, {"amount", o.amount}, {"currency", o.currency}});
}
std::optional<Order> order_of(const std::string& payload) {
  error_code ec;
  const json::value v = json::parse(payload, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  const json::value* id = o ? o->if_contains("order_id") : nullptr;
  const json::value* amount = o ? o->if_contains("amount") : nullptr;
  const json::value* currency = o ? o->if_contains("currency") : nullptr;
  if (!id || !id->is_string() || !amount || !amount->is_int64() || !currency ||
      !currency->is_string()) {
    return std::nullopt;
  }
  return Order{std::string(id->get_string()), amount->as_int64(),
               std::string(currency->get_string())};
}

json::object charge_body(const Order& order, bool charged, std::string_view id) {
  json::object body{{"status", charged ? "charged" : "declined"},
                    {"order_id", order.order_id},
                    {"amount", order.amount},
                    {"currency", order.currency},
                    {"charge_id", id}};
  if (!charged) body["decline_code"] = "card_declined";
  return body;
}

/// What a provider's answer (to a charge, or a key's stored result) says about the attempt.
struct Verdict {
  enum Kind {
    decided,       // charged, declined, or refused for good: the order's outcome
    not_executed,  // 401/403/404/408/425/429: the request never ran; the key stays unused
    key_reused,    // 422: the key was first used with other parameters
    undecided,     // no answer, 409 (running), 5xx, or a success without a charge id
  } kind;
  /// What the order's client is told once the provider has answered: the same bytes
  /// whoever learns the answer (this request, a retry, the reconciler), so a replay is the
  /// original. Its external id is the charge id (empty when the provider refused).
  redis_lock::StoredResponse outcome;  // decided only
};

///   any 2xx carrying a charge id with status "succeeded": charged (201 to the client);
///   402 carrying a charge id: declined;
///   401, 403, 404, 408, 425, 429: not executed (the merchant's problem or a transient one,
///     never the customer's: nothing ran, the key is unused);
///   422: the key was used with other parameters (this order, another amount);
///   any other 4xx but 409: the provider refused the request for good and keeps that answer
///     for the key: a final failure, so that neither the client nor the reconciler retries it
///     forever;
///   no answer, 409, 5xx: not known (a 5xx may come after a charge).
Verdict judge(int status, const json::value* body, const Order& order) {
  const json::object* o = body ? body->if_object() : nullptr;
  const json::value* id = o ? o->if_contains("id") : nullptr;
  const json::value* state = o ? o->if_contains("status") : nullptr;
  // (bounded: an id is recorded with the order, and a response over the component's bound
  // could not be)
  const bool has_id =
      id && id->is_string() && !id->get_string().empty() && id->get_string().size() <= 256;
  if (status >= 200 && status < 300) {
    if (has_id && state && state->is_string() && state->get_string() == "succeeded") {
      return {Verdict::decided,
              {201, json::serialize(charge_body(order, true, id->get_string())) + "\n",
               std::string(id->get_string())}};
    }
    return {Verdict::undecided, {}};
  }
  if (status == 402 && has_id) {
    return {Verdict::decided,
            {402, json::serialize(charge_body(order, false, id->get_string())) + "\n",
             std::string(id->get_string())}};
  }
  if (status == 401 || status == 403 || status == 404 || status == 408 || status == 425 ||
      status == 429) {
    return {Verdict::not_executed, {}};
  }
  if (status == 422) return {Verdict::key_reused, {}};
  if (status >= 400 && status < 500 && status != 409) {
    const json::object failed{{"status", "failed"},
                              {"order_id", order.order_id},
                              {"amount", order.amount},
                              {"currency", order.currency},
                              {"failure_code", "payment_refused"},
                              {"message",
                               "the payment provider refused this payment; nothing was "
                               "charged"}};
    return {Verdict::decided, {402, json::serialize(failed) + "\n", ""}};
  }
  return {Verdict::undecided, {}};
}

Verdict judge(const checkout::HttpAnswer& a, const Order& order) {
  if (a.status == 0) return {Verdict::undecided, {}};
  error_code ec;
  const json::value v = json::parse(a.body, ec);
  return judge(a.status, ec ? nullptr : &v, order);
}

/// The lock manager's observer: the Prometheus series, and the reconciler's log lines (what
/// each look at a pending order did), which the fault scenarios read.
class Logs final : public redis_lock::Observer {
 public:
  Logs(std::shared_ptr<redis_lock::Observer> metrics, checkout::ServiceMetrics& service,
       const Options& opt, int index)
      : metrics_(std::move(metrics)), service_(service), prefix_(opt.prefix), index_(index) {}

  /// A reconciler's round ended: the highest retry count of its looks becomes the gauge.
  void round_done() { service_.round_done(round_max_.exchange(0)); }
  void on_acquire(const redis_lock::AcquireEvent& e) noexcept override { metrics_->on_acquire(e); }
  void on_lease(const redis_lock::LeaseEvent& e) noexcept override { metrics_->on_lease(e); }
  void on_lost(std::string_view r) noexcept override { metrics_->on_lost(r); }
  void on_admin(const redis_lock::AdminEvent& e) noexcept override { metrics_->on_admin(e); }
  void on_wait(const redis_lock::WaitEvent& e) noexcept override { metrics_->on_wait(e); }
  void on_hold_end(const redis_lock::HoldEvent& e) noexcept override { metrics_->on_hold_end(e); }
  void on_server_notice(const redis_lock::ServerNotice& e) noexcept override {
    metrics_->on_server_notice(e);
  }
  void on_idempotency(const redis_lock::IdempotencyEvent& e) noexcept override {
    metrics_->on_idempotency(e);
    if (e.error) return;
    const std::string key(e.key);
    using Kind = redis_lock::RunKind;
    if (e.reconciler && e.result != Kind::absent && e.result != Kind::busy) {
      service_.retried(e.result == Kind::executed || e.result == Kind::replayed ? "decided"
                       : e.result == Kind::not_executed                         ? "voided"
                       : e.result == Kind::escalated                            ? "escalated"
                                                                                : "pending");
      if (e.result == Kind::pending) {
        service_.backoff(e.retry_after);
        const int retry = e.looks > 0 ? static_cast<int>(e.looks) - 1 : 0;
        if (retry > round_max_.load()) round_max_.store(retry);
      }
    }
    if (e.result == Kind::escalated && e.resolves > 0) {
      std::fprintf(stderr,
                   "checkout worker %d (pid %d): %s escalated: attempt %u (key %s%s/%u) "
                   "undecided past half the provider's key window\n",
                   index_, ::getpid(), key.c_str(), e.attempt, prefix_.c_str(), key.c_str(),
                   e.attempt);
    } else if (e.reconciler && e.result == Kind::not_executed && e.works == 0) {
      std::fprintf(stderr,
                   "checkout worker %d (pid %d): %s attempt %u void: the provider never saw its "
                   "key\n",
                   index_, ::getpid(), key.c_str(), e.attempt);
    } else if (e.reconciler && e.result == Kind::pending) {
      std::fprintf(stderr,
                   "checkout worker %d (pid %d): %s still pending after reconcile retry %u; "
                   "next in about %lld ms\n",
                   index_, ::getpid(), key.c_str(), e.looks > 0 ? e.looks - 1 : 0,
                   static_cast<long long>(e.retry_after.count()));
    }
  }

 private:
  std::shared_ptr<redis_lock::Observer> metrics_;
  checkout::ServiceMetrics& service_;
  std::string prefix_;
  int index_;
  std::atomic<int> round_max_{0};
};

/// One worker process: an acceptor on the shared port, a LockManager for the locks, one for
/// the ledger, the component on them, and its reconciler.
class Worker {
 public:
  Worker(asio::io_context& io, const Options& opt, redis_lock::ConnectionConfig lock_config,
         redis_lock::ConnectionConfig ledger_config, int index)
      : io_(io),
        opt_(opt),
        index_(index),
        provider_(parse_endpoint(opt.provider)),
        logs_(std::make_shared<Logs>(metrics_.lock_observer(), metrics_, opt, index)),
        locks_(io.get_executor(), lock_config,
               {.key_prefix = opt.prefix + "lock:", .observer = logs_}),
        ledger_(io.get_executor(), ledger_config, {.key_prefix = opt.prefix}),
        requests_(
            locks_, ledger_,
            [this](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
              asio::co_spawn(io_, resolve(a, std::move(done)), asio::detached);
            },
            request_options(opt)),
        acceptor_(io) {}

  /// The component's options from the service's: the lock and its lease, the records kept
  /// for good, the reconciler's backoff, the escalation at half the provider's key window,
  /// the ledger's checks.
  static redis_lock::IdempotencyOptions request_options(const Options& opt) {
    redis_lock::IdempotencyOptions o;
    o.lock_prefix = "order:";
    o.lease = opt.lock_ttl;
    o.margin = margin_of(opt);
    // max_hold: a wedged but live worker stops renewing after the longest a run can take (a
    // key lookup, a reference lookup, a charge), so the order passes to a retry or the
    // reconciler (which look the key up before anything else).
    if (opt.renew) o.max_hold = opt.provider_timeout * 3 + 5s;
    o.retention = 0ms;  // the order's record is its financial record: kept for good
    o.first_look = opt.lock_ttl;
    o.look_cap = opt.lock_ttl + opt.reconcile_max_backoff;
    o.escalate_after =
        std::chrono::duration_cast<std::chrono::milliseconds>(opt.provider_key_window / 2);
    o.max_key_bytes = 128;
    o.unchecked_store = opt.ledger_unchecked;
    o.store_replicas = opt.ledger_replicas;
    // An attempt the provider never saw is voided for the client's retry, never charged late
    // (a client may have been told 503, "nothing will be charged"); the next attempt after a
    // definite failure is sent by the reconciler.
    o.resend_unsent = false;
    return o;
  }

  void listen() {
    // Each connection may hold a second descriptor (its provider call) while it works; 64
    // are kept for the ledger, the lock server and the rest.
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    const auto by_limit = files.rlim_cur == RLIM_INFINITY
                              ? opt_.max_connections
                              : static_cast<int>(std::max<rlim_t>(files.rlim_cur, 80) - 64) / 2;
    max_connections_ = std::min(opt_.max_connections, by_limit);
    const asio::ip::tcp::endpoint ep(asio::ip::make_address(opt_.listen), opt_.port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    const int on = 1;  // every worker binds the same port; the kernel spreads connections
    if (::setsockopt(acceptor_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
      throw std::runtime_error(std::string("SO_REUSEPORT: ") + std::strerror(errno));
    }
    acceptor_.bind(ep);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    std::printf("checkout worker %d (pid %d) listening on %s:%u (at most %d connections)\n", index_,
                ::getpid(), opt_.listen.c_str(), acceptor_.local_endpoint().port(),
                max_connections_);
    std::fflush(stdout);
    asio::co_spawn(io_, accept_loop(), asio::detached);
    asio::co_spawn(io_, reconcile_loop(), asio::detached);
    if (opt_.metrics_port) listen_metrics();
  }

  /// Stops accepting and closes idle connections; requests and charges in progress finish
  /// (each is bounded: the provider deadline, the ledger's timeouts), and io.run() returns
  /// when they have. Nothing is abandoned mid-step, so no coroutine is destroyed suspended.
  void stop() {
    error_code ignored;
    acceptor_.close(ignored);
    metrics_acceptor_.close(ignored);
    stopping_ = true;
    reconcile_timer_.cancel();
    room_.cancel();
    for (auto& [idle, since] : reading_) idle->cancel();
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
        "%d conflicts, %d pending, %d unavailable, %d under review, %d reconciled, %d voided, "
        "%d escalated\n",
        index_, ::getpid(), charged_, declined_, failed_, replayed_, conflicts_, pending_,
        unavailable_, under_review_, reconciled_, voided_, escalated_);
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

  /// Accepts while there is room: at most max_connections_ open at once (the descriptor
  /// limit minus a reserve for the ledger, the lock server and the provider). At the cap, or
  /// when accept() itself runs out of descriptors, the connection that has waited longest
  /// for its next request is closed to make room (a slow or idle client gives way to a new
  /// one, so /healthz and real requests still get in); when every connection is in the middle
  /// of a request, it waits for one to end. Out of descriptors, it backs off 100 ms instead
  /// of retrying at once (55,000 failing accepts a second, before).
  asio::awaitable<void> accept_loop() {
    bool complained = false;
    for (;;) {
      if (open_ >= max_connections_ && !shed_oldest_idle()) {
        room_.expires_after(100ms);  // a session that ends cancels it
        co_await room_.async_wait(asio::as_tuple(asio::use_awaitable));
        if (stopping_ || !acceptor_.is_open()) co_return;
        continue;
      }
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE || ec.value() == ENOBUFS ||
          ec.value() == ENOMEM) {
        if (!complained) {
          std::fprintf(stderr,
                       "checkout worker %d (pid %d): accept: %s with %d connections open; "
                       "backing off\n",
                       index_, ::getpid(), ec.message().c_str(), open_);
          complained = true;
        }
        shed_oldest_idle();
        room_.expires_after(100ms);
        co_await room_.async_wait(asio::as_tuple(asio::use_awaitable));
        if (stopping_ || !acceptor_.is_open()) co_return;
        continue;
      }
      if (ec) continue;  // the client gave up before we took it (ECONNABORTED)
      complained = false;
      asio::co_spawn(io_, session(beast::tcp_stream(std::move(socket))), asio::detached);
    }
  }

  /// Closes the connection that has waited longest for its next request; false if none is
  /// waiting (every open connection is in the middle of one).
  bool shed_oldest_idle() {
    auto oldest = reading_.end();
    for (auto it = reading_.begin(); it != reading_.end(); ++it) {
      if (oldest == reading_.end() || it->second < oldest->second) oldest = it;
    }
    if (oldest == reading_.end()) return false;
    ++shed_;
    oldest->first->cancel();  // its read ends with operation_aborted: the session closes
    reading_.erase(oldest);
    return true;
  }

  asio::awaitable<void> session(beast::tcp_stream stream) {
    Busy busy(this);
    struct Open {  // counts the connection's descriptor until it is closed
      Worker* w;
      explicit Open(Worker* worker) : w(worker) { ++w->open_; }
      ~Open() {
        --w->open_;
        w->room_.cancel();
      }
    } open(this);
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(8 * 1024);
      stream.expires_after(30s);
      if (stopping_) break;
      reading_.emplace(&stream, Clock::now());  // idle until a request comes: stop() and
                                                // shedding cancel the read
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
      if (ec) break;  // closed, timed out, shed or garbage: nothing to answer
      Request req = parser.release();
      Response res = co_await handle(req);
      const bool keep = res.keep_alive() && !stopping_;
      res.keep_alive(keep);
      if (!co_await write(stream, std::move(res)) || !keep) break;
    }
    error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    stream.socket().close(ignored);
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
    Response res = co_await post_checkout(req);
    metrics_.response(res.result_int(), res.count("Idempotent-Replayed") > 0);
    co_return res;
  }

  asio::awaitable<Response> post_checkout(const Request& req) {
    error_code ec;
    const json::value body = json::parse(req.body(), ec);
    const json::object* obj = ec || repeats_a_key(req.body()) ? nullptr : body.if_object();
    const json::value* order_value = obj ? obj->if_contains("order_id") : nullptr;
    const json::string* order = order_value ? order_value->if_string() : nullptr;
    const json::value* amount = obj ? obj->if_contains("amount") : nullptr;
    const json::value* currency_value = obj ? obj->if_contains("currency") : nullptr;
    const json::string* currency = currency_value ? currency_value->if_string() : nullptr;
    if (!order || !valid_order_id(*order) || !amount || !amount->is_int64() ||
        amount->as_int64() <= 0 || amount->as_int64() > 100'000'000'00 || !currency ||
        !valid_currency(*currency)) {
      co_return reply(req, http::status::bad_request,
                      {{"error", "bad_request"},
                       {"message",
                        "expected {\"order_id\": \"[A-Za-z0-9_.:-]{1,128}\", "
                        "\"amount\": <minor units, 1..10000000000>, "
                        "\"currency\": \"[A-Z]{3}\"}"}});
    }
    // (named first: GCC 12 miscompiles a conditional with a literal inside a co_await)
    std::string order_id(order->data(), order->size());
    std::string currency_code(currency->data(), currency->size());
    co_return co_await checkout(req, std::move(order_id), amount->as_int64(),
                                std::move(currency_code));
  }

  asio::awaitable<Response> checkout(const Request& req, std::string order_id, std::int64_t amount,
                                     std::string currency) {
    const Order order(std::move(order_id), amount, std::move(currency));
    if (!opt_.use_lock) co_return co_await checkout_without_lock(req, order);
    // The component does the flow (docs/guide.md, "Idempotent requests"): a decided order
    // replayed from the ledger without the lock; the order's lock, one attempt (409 when
    // held); the pending attempt written before the provider is called; an earlier attempt
    // looked up (resolve) before anything is sent; the answer recorded; the reconciler.
    auto note = std::make_shared<Note>();
    // (Named, not temporaries of the co_await: GCC 12 destroys such temporaries wrongly.)
    redis_lock::AttemptFunction work = [this, order, note](const redis_lock::Attempt& a,
                                                           redis_lock::AttemptHandler done) {
      asio::co_spawn(io_, charge(order, a, note, std::move(done), "request", cancelled_flag(a)),
                     asio::detached);
    };
    std::string fingerprint = fingerprint_of(order), payload = payload_of(order);
    auto [ec, r] =
        co_await requests_.async_run(order.order_id, std::move(fingerprint), std::move(payload),
                                     std::move(work), asio::as_tuple(asio::use_awaitable));
    if (ec == redis_lock::error::lock_lost) {
      // A newer holder began on the order while this one was on its way: it is theirs now.
      ++conflicts_;
      co_return in_progress(req, order.order_id);
    }
    if (ec) co_return co_await after_error(req, order.order_id);
    using Kind = redis_lock::RunResult::Kind;
    switch (r.kind) {
      case Kind::executed: {
        if (!r.recorded) {
          std::printf(
              "checkout worker %d (pid %d) could not record the answer for %s: ledger "
              "unavailable (the reconciler will)\n",
              index_, ::getpid(), order.order_id.c_str());
          std::fflush(stdout);
        }
        // Decided by an earlier call (the provider replayed it, or a lookup found it): the
        // client hears a replay, as it would from the ledger.
        const bool replayed = note->replayed || found_by_lookup_.erase(r.downstream_key) > 0;
        (replayed                         ? replayed_
         : r.response.status == 201       ? charged_
         : r.response.external_id.empty() ? failed_
                                          : declined_)++;
        auto res = reply(req, static_cast<http::status>(r.response.status), r.response.body);
        if (replayed) res.set("Idempotent-Replayed", "true");
        co_return res;
      }
      case Kind::replayed:
        co_return replay(req, r.response);
      case Kind::busy:
        ++conflicts_;
        co_return in_progress(req, order.order_id);
      case Kind::mismatch:
        co_return mismatch(req, order.order_id);
      case Kind::escalated:
        co_return under_review(req, order.order_id);
      case Kind::not_executed:
        ++unavailable_;

        if (note->why == Note::provider_refused) {
          co_return provider_unavailable(req, order.order_id);
        }
        co_return unavailable(req, order.order_id);
      case Kind::pending:
      case Kind::absent:
        break;
    }
    // The attempt stays pending: the client is asked back when the reconciler will next look
    // at it (a retry before that would find the same), not every second.
    co_return pending(req, order.order_id, r.retry_after);
  }

  /// The run failed (the ledger, the lock, a response it could not record). Before it, nothing
  /// was sent; but a run that resumed an attempt may have failed after it: the order's record
  /// says which, and the client is told that (503 only when nothing is left to charge).
  asio::awaitable<Response> after_error(const Request& req, std::string order_id) {
    auto [ec, r] = co_await requests_.async_lookup(order_id, asio::as_tuple(asio::use_awaitable));
    using S = redis_lock::RequestRecord::State;
    if (!ec && r.state == S::decided) co_return replay(req, r.response);
    if (!ec && r.state == S::escalated) co_return under_review(req, order_id);
    if (!ec && r.state == S::running) co_return pending(req, order_id, opt_.lock_ttl);
    ++unavailable_;
    co_return unavailable(req, order_id);
  }

  /// What one request's charge saw, for its answer: the provider's answer was a replay of an
  /// earlier call, or it did not take the charge (and why).
  struct Note {
    bool replayed = false;
    enum { none, no_permit, provider_refused } why = none;
  };

  /// The lock holder's line (the fault scenarios read which token each holder got from it),
  /// once per holder.
  void holds(const redis_lock::Attempt& a) {
    if (fence_told_.size() > 10'000) fence_told_.clear();  // (at worst a line said twice)
    auto& last = fence_told_[a.key];
    if (last == a.fencing_token) return;
    last = a.fencing_token;
    std::printf("checkout worker %d (pid %d) holds %s with fencing token %llu\n", index_,
                ::getpid(), a.key.c_str(), static_cast<unsigned long long>(a.fencing_token));
    std::fflush(stdout);
  }

  /// A provider request with the merchant's API key; status 0 when no answer came in time.
  asio::awaitable<checkout::HttpAnswer> provider_call(http::verb method, std::string path,
                                                      std::string body, Clock::time_point deadline,
                                                      std::string key = {}) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!key.empty()) headers.emplace_back("Idempotency-Key", std::move(key));
    if (!opt_.provider_api_key.empty()) {
      headers.emplace_back("Authorization", "Bearer " + opt_.provider_api_key);
    }
    const auto sent = Clock::now();
    auto answer = co_await checkout::http_call(provider_, method, std::move(path), std::move(body),
                                               deadline, std::move(headers));
    metrics_.provider(method == http::verb::post, answer.status, Clock::now() - sent);
    co_return answer;
  }

  /// The component's work (and the reconciler's resend): one charge at the provider under
  /// the attempt's key, within the attempt's deadline, classified by judge().
  /// The attempt's cancellation (its deadline, or its lease lost), as a flag charge() reads
  /// before it sends. Called where the component calls work (on `a.executor`).
  static std::shared_ptr<bool> cancelled_flag(const redis_lock::Attempt& a) {
    auto flag = std::make_shared<bool>(false);
    auto slot = a.cancellation;
    if (slot.is_connected()) slot.assign([flag](asio::cancellation_type) { *flag = true; });
    return flag;
  }

  asio::awaitable<void> charge(Order order, redis_lock::Attempt a, std::shared_ptr<Note> note,
                               redis_lock::AttemptHandler done, const char* via,
                               std::shared_ptr<bool> cancelled = std::make_shared<bool>(false)) {
    Busy busy(this);
    if (stopping_) co_return done(redis_lock::AttemptOutcome::not_executed());  // nothing sent
    holds(a);
    const auto now = Clock::now();
    auto deadline = std::min<Clock::time_point>(now + opt_.provider_timeout, a.deadline);
    // At most N calls to the provider at once, fleet-wide: a permit for the call, waited for
    // at most half of what is left (the call needs the rest), and the call's deadline inside
    // the permit's lease too. Released as soon as the answer is in (or the call gave up).
    redis_lock::LockGuard permit;
    if (opt_.provider_concurrency > 0) {
      redis_lock::LockOptions permit_options;
      permit_options.ttl = opt_.lock_ttl;
      permit_options.wait = std::max<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>((deadline - now) / 2), 0ms);
      auto [pec, granted] =
          co_await locks_.async_acquire_permit("payment-provider", opt_.provider_concurrency,
                                               permit_options, asio::as_tuple(asio::use_awaitable));
      if (pec || !granted) {  // nothing was sent: the attempt is void, the 503 true
        note->why = Note::no_permit;
        co_return done(redis_lock::AttemptOutcome::not_executed());
      }
      permit = std::move(granted);
      deadline = std::min(deadline, permit.valid_until() - margin_of(opt_));
      if (Clock::now() >= deadline) {
        co_await permit.async_release(asio::as_tuple(asio::use_awaitable));
        note->why = Note::no_permit;
        co_return done(redis_lock::AttemptOutcome::not_executed());
      }
    }
    if (*cancelled) {
      // The attempt ended while this call waited (its deadline, or its lease lost: another
      // holder may be resolving it now): nothing is sent.
      if (permit) co_await permit.async_release(asio::as_tuple(asio::use_awaitable));
      co_return done(redis_lock::AttemptOutcome::not_executed());
    }
    std::printf("checkout worker %d (pid %d) calling the provider for %s\n", index_, ::getpid(),
                order.order_id.c_str());
    std::fflush(stdout);
    // (built outside the co_await: GCC 12 cannot keep literal arrays in a coroutine frame)
    std::string request = json::serialize(json::object{
        {"amount", order.amount}, {"currency", order.currency}, {"reference", order.order_id}});
    const auto answer = co_await provider_call(http::verb::post, "/v1/charges", std::move(request),
                                               deadline, opt_.prefix + a.downstream_key);
    std::printf("checkout worker %d (pid %d) provider answered %d for %s\n", index_, ::getpid(),
                answer.status, order.order_id.c_str());  // 0: no answer
    std::fflush(stdout);
    if (permit) co_await permit.async_release(asio::as_tuple(asio::use_awaitable));
    const Verdict verdict = judge(answer, order);
    switch (verdict.kind) {
      case Verdict::decided:
        note->replayed = answer.replayed;
        if (!answer.replayed && verdict.outcome.status == 201) metrics_.charge(via);
        co_return done(redis_lock::AttemptOutcome::decided(verdict.outcome));
      case Verdict::not_executed:
        note->why = Note::provider_refused;
        co_return done(redis_lock::AttemptOutcome::not_executed());
      case Verdict::key_reused:
        // The key was first used with other parameters: only after the record was lost (the
        // fingerprint keeps other amounts out otherwise), and what the first use did is not
        // this answer's to say: unknown, resolved later or escalated, never voided (a void
        // record would take this request's amount and hide the first charge).
        break;
      case Verdict::undecided:
        break;
    }
    done(redis_lock::AttemptOutcome::unknown());
  }

  /// The component's resolve: what happened to an attempt whose outcome is unknown (a crash,
  /// a timeout), asked of the provider before anything is sent again.
  asio::awaitable<void> resolve(redis_lock::Attempt a, redis_lock::AttemptHandler done) {
    Busy busy(this);
    // Shutting down: learn nothing (the attempt stays as it is, for a later look).
    if (stopping_) co_return done(redis_lock::AttemptOutcome::unknown());
    holds(a);
    const auto order = order_of(a.payload);
    if (!order) co_return done(redis_lock::AttemptOutcome::unknown());
    // (named before each co_await: GCC 12 mishandles temporaries that live across one)
    const Clock::time_point deadline =
        std::min<Clock::time_point>(Clock::now() + opt_.provider_timeout, a.deadline);
    std::string key_path = "/v1/keys/" + opt_.prefix + a.downstream_key;
    const auto found = co_await provider_call(http::verb::get, std::move(key_path), "", deadline);
    std::optional<Verdict> stored;
    if (found.status == 200) {
      error_code ec;
      const json::value v = json::parse(found.body, ec);
      const json::object* o = ec ? nullptr : v.if_object();
      const json::value* status = o ? o->if_contains("http_status") : nullptr;
      const json::value* body = o ? o->if_contains("body") : nullptr;
      if (status && status->is_int64()) {
        stored = judge(static_cast<int>(status->as_int64()), body, *order);
      }
    }
    if (stored && stored->kind == Verdict::decided) {
      remember_lookup(a.downstream_key);
      co_return done(redis_lock::AttemptOutcome::decided(stored->outcome));
    }
    // Past half the key window, "never seen" may mean "forgotten after a charge", and a
    // running call may outlive the key: unknown (escalated past half the window).
    const auto age = std::chrono::system_clock::now() - a.began;
    const bool inconclusive = !stored || stored->kind != Verdict::undecided;  // no 5xx kept
    if (inconclusive && age > opt_.provider_key_window / 2) {
      co_return done(redis_lock::AttemptOutcome::unknown());
    }
    // The provider never saw this key: the attempt was never sent (a crash before the call,
    // a 503 for want of a permit) or never arrived. A client asking now sends it; the
    // reconciler voids it instead of charging late (resend_unsent is off).
    if (found.status == 404) co_return done(redis_lock::AttemptOutcome::not_executed());
    if (!stored || stored->kind != Verdict::undecided) {
      co_return done(redis_lock::AttemptOutcome::unknown());  // running, or unreachable
    }
    // The key's kept result is a 5xx. Money may have moved all the same: look for a charge
    // for the order under any of its keys; none is a definite failure, and only then the
    // next attempt, under a new key.
    const Clock::time_point by_then =
        std::min<Clock::time_point>(Clock::now() + opt_.provider_timeout, a.deadline);
    std::string reference_path = "/v1/charges?reference=" + order->order_id;
    const auto by_reference =
        co_await provider_call(http::verb::get, std::move(reference_path), "", by_then);
    error_code ec;
    const json::value v =
        by_reference.status == 200 ? json::parse(by_reference.body, ec) : json::value();
    const json::object* o = by_reference.status == 200 && !ec ? v.if_object() : nullptr;
    const json::value* results = o ? o->if_contains("results") : nullptr;
    if (!results || !results->is_array()) co_return done(redis_lock::AttemptOutcome::unknown());
    const std::string ours = opt_.prefix + a.key + "/";  // this order's keys
    for (const auto& r : results->as_array()) {
      const json::object* c = r.if_object();
      const json::value* key = c ? c->if_contains("idempotency_key") : nullptr;
      const json::value* status = c ? c->if_contains("http_status") : nullptr;
      if (!key || !key->is_string() || !status || !status->is_int64() ||
          key->get_string().subview(0, ours.size()) != ours) {
        continue;
      }
      const Verdict v2 = judge(static_cast<int>(status->as_int64()), &r, *order);
      if (v2.kind == Verdict::decided) {
        remember_lookup(a.downstream_key);
        co_return done(redis_lock::AttemptOutcome::decided(v2.outcome));
      }
    }
    done(redis_lock::AttemptOutcome::key_spent());
  }

  /// --no-lock: the provider's key alone, no lock and no record (a measurement of what the
  /// lock saves: every duplicate reaches the provider, which answers it from the key).
  asio::awaitable<Response> checkout_without_lock(const Request& req, const Order& order) {
    redis_lock::Attempt a;
    a.key = order.order_id;
    a.number = 1;
    a.downstream_key = order.order_id + "/1";
    a.deadline = Clock::now() + opt_.provider_timeout;
    auto note = std::make_shared<Note>();
    std::optional<redis_lock::AttemptOutcome> said;
    redis_lock::AttemptHandler told = [&](redis_lock::AttemptOutcome o) { said = std::move(o); };
    co_await charge(order, a, note, std::move(told), "request");
    if (said && said->kind == redis_lock::AttemptOutcome::Kind::decided) {
      (note->replayed                       ? replayed_
       : said->response.status == 201       ? charged_
       : said->response.external_id.empty() ? failed_
                                            : declined_)++;
      auto res = reply(req, static_cast<http::status>(said->response.status), said->response.body);
      if (note->replayed) res.set("Idempotent-Replayed", "true");
      co_return res;
    }
    if (said && said->kind == redis_lock::AttemptOutcome::Kind::not_executed) {
      ++unavailable_;
      if (note->why == Note::provider_refused) {
        co_return provider_unavailable(req, order.order_id);
      }
      co_return unavailable(req, order.order_id);
    }
    // Not known (no answer, the provider still running the key for a duplicate, a 5xx): the
    // client asks again with the same key. (No record: a 5xx the provider keeps for the key
    // stays the answer; this mode measures the lock, it is not one to run a shop on.)
    co_return pending(req, order.order_id, 1s);
  }

  /// An attempt a lookup decided: its request's client hears a replay. (Bounded: one the
  /// reconciler decided has no client to take it out; at worst a replay is told as fresh.)
  void remember_lookup(const std::string& downstream_key) {
    if (found_by_lookup_.size() > 10'000) found_by_lookup_.clear();
    found_by_lookup_.insert(downstream_key);
  }

  /// What an attempt keeps free of its lease: a tenth of the lock's ttl, at least 50 ms.
  static std::chrono::milliseconds margin_of(const Options& opt) {
    return std::max<std::chrono::milliseconds>(opt.lock_ttl / 10, 50ms);
  }

  /// Every --reconcile-ms, a round of the component's reconciler: pending attempts nobody is
  /// working on (a worker died, a call went unanswered, the provider failed) looked up, and
  /// the next attempt sent after a definite failure; what each look did is logged by the
  /// observer (Logs).
  asio::awaitable<void> reconcile_loop() {
    while (!stopping_) {
      reconcile_timer_.expires_after(opt_.reconcile_every);
      co_await reconcile_timer_.async_wait(asio::as_tuple(asio::use_awaitable));  // or cancelled
      if (stopping_) co_return;
      Busy busy(this);
      redis_lock::AttemptFunction resend = [this](const redis_lock::Attempt& a,
                                                  redis_lock::AttemptHandler done) {
        const auto order = order_of(a.payload);
        if (!order) return done(redis_lock::AttemptOutcome::unknown());
        asio::co_spawn(io_,
                       charge(*order, a, std::make_shared<Note>(), std::move(done), "reconciler",
                              cancelled_flag(a)),
                       asio::detached);
      };
      auto [ec, report] = co_await requests_.async_reconcile_sending(
          std::move(resend), asio::as_tuple(asio::use_awaitable));
      logs_->round_done();
      reconciled_ += static_cast<int>(report.decided);
      voided_ += static_cast<int>(report.voided);
      escalated_ += static_cast<int>(report.escalated);
    }
  }

  /// /metrics on its own port, one request per connection (a scraper connects each time).
  void listen_metrics() {
    const auto port = *opt_.metrics_port ? *opt_.metrics_port + index_ : 0;
    const asio::ip::tcp::endpoint ep(asio::ip::make_address(opt_.listen),
                                     static_cast<unsigned short>(port));
    metrics_acceptor_.open(ep.protocol());
    metrics_acceptor_.set_option(asio::socket_base::reuse_address(true));
    metrics_acceptor_.bind(ep);
    metrics_acceptor_.listen();
    std::printf("checkout worker %d (pid %d) serves /metrics on %s:%u\n", index_, ::getpid(),
                opt_.listen.c_str(), metrics_acceptor_.local_endpoint().port());
    std::fflush(stdout);
    asio::co_spawn(io_, metrics_loop(), asio::detached);
  }

  asio::awaitable<void> metrics_loop() {
    for (;;) {
      auto [ec, socket] =
          co_await metrics_acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || !metrics_acceptor_.is_open()) co_return;
      if (ec) {
        // Out of descriptors (or another failing accept): a pause, not a spin (accept_loop).
        asio::steady_timer pause(io_, 100ms);
        co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      asio::co_spawn(io_, metrics_session(beast::tcp_stream(std::move(socket))), asio::detached);
    }
  }

  asio::awaitable<void> metrics_session(beast::tcp_stream stream) {
    stream.expires_after(5s);  // a scraper that sends nothing does not hold shutdown up
    beast::flat_buffer buffer;
    Request req;
    auto [ec, n] =
        co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    Response res{http::status::ok, req.version()};
    if (req.target() != "/metrics" || req.method() != http::verb::get) {
      res = reply(req, http::status::not_found,
                  {{"error", "not_found"}, {"message", "GET /metrics on this port"}});
    } else {
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = metrics_.text();
    }
    res.keep_alive(false);
    res.prepare_payload();
    co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  }

  Response replay(const Request& req, const redis_lock::StoredResponse& stored) {
    ++replayed_;
    auto res = reply(req, static_cast<http::status>(stored.status), stored.body);
    res.set("Idempotent-Replayed", "true");
    return res;
  }

  /// 202: the outcome is not known yet; ask again after `after` (when the next look is).
  Response pending(const Request& req, const std::string& order_id,
                   std::chrono::milliseconds after) {
    ++pending_;
    auto res = reply(req, http::status::accepted,
                     {{"status", "pending"},
                      {"order_id", order_id},
                      {"message",
                       "the payment's outcome is not known yet; retry with the same "
                       "order_id to learn it (it will not be charged twice)"}});
    res.set(http::field::retry_after,
            std::to_string(std::max<long long>((after.count() + 999) / 1000, 1)));
    return res;
  }

  Response under_review(const Request& req, const std::string& order_id) {
    ++under_review_;
    auto res = reply(req, http::status::accepted,
                     {{"status", "under_review"},
                      {"order_id", order_id},
                      {"message",
                       "the payment's outcome is being checked with the provider by a person; "
                       "it will not be charged twice; do not place a new order"}});
    res.set(http::field::retry_after, "600");
    return res;
  }

  Response mismatch(const Request& req, const std::string& order_id) {
    ++conflicts_;
    return reply(req, http::status::unprocessable_entity,
                 {{"error", "order_mismatch"},
                  {"message", "this order was placed with another amount or currency"},
                  {"order_id", order_id}});
  }

  asio::io_context& io_;
  const Options& opt_;
  int index_;
  asio::ip::tcp::endpoint provider_;
  checkout::ServiceMetrics metrics_;  // (before locks_: its observer is theirs)
  std::shared_ptr<Logs> logs_;
  redis_lock::LockManager locks_;
  redis_lock::LockManager ledger_;  // the records' store
  redis_lock::IdempotentRequests requests_;
  // This worker's holders' last told token per order, and the attempts a lookup decided
  // (their clients hear a replay).
  std::map<std::string, std::uint64_t> fence_told_;
  std::set<std::string> found_by_lookup_;
  asio::ip::tcp::acceptor acceptor_;
  asio::ip::tcp::acceptor metrics_acceptor_{io_};
  asio::steady_timer grace_{io_};
  // Connections waiting for their next request, and since when.
  std::map<beast::tcp_stream*, Clock::time_point> reading_;
  asio::steady_timer room_{io_};  // accept_loop waits on it for room; a closed session cancels
  int open_ = 0;                  // connections open now
  int max_connections_ = 0;
  int shed_ = 0;  // idle connections closed to make room
  asio::steady_timer reconcile_timer_{io_};
  int busy_ = 0;
  bool stopping_ = false;
  int charged_ = 0, declined_ = 0, failed_ = 0, replayed_ = 0, conflicts_ = 0, pending_ = 0,
      unavailable_ = 0, under_review_ = 0, reconciled_ = 0, voided_ = 0, escalated_ = 0;
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
      "                        [--no-renew] [--no-lock] [--provider-timeout-ms MS]\n"
      "                        [--provider-key-window-s S] [--reconcile-ms MS]\n"
      "                        [--reconcile-max-backoff-ms MS] [--shutdown-grace-ms MS]\n"
      "                        [--prefix PREFIX] [--provider-concurrency N]\n"
      "                        [--ledger-replicas N] [--ledger-unchecked]\n"
      "                        [--max-connections N] [--metrics-port P]\n"
      "       checkout_service --ledger-url URL [--prefix PREFIX] --list-escalated\n"
      "       checkout_service --ledger-url URL [--prefix PREFIX] --show ORDER\n"
      "       checkout_service --ledger-url URL [--prefix PREFIX] --resolve ORDER\n"
      "                        (--charge-id ID | --declined-charge-id ID | --not-charged)\n"
      "  --url (the lock's Redis) defaults to $REDIS_LOCK_URL or redis://127.0.0.1:6379;\n"
      "  --ledger-url is a Redis of its own with appendonly yes, appendfsync always and\n"
      "  maxmemory-policy noeviction, checked at start-up (--ledger-unchecked skips the check);\n"
      "  --ledger-replicas N: every ledger write waits for N replicas; the provider deadline\n"
      "  must be shorter than the lock's ttl; --shutdown-grace-ms defaults to the provider\n"
      "  deadline plus 10 s; a pending order the reconciler could not finish is retried later\n"
      "  each time (the waits between its retries are 1, 2, 4, 8, ... times the lock ttl),\n"
      "  waiting at most the lock ttl plus --reconcile-max-backoff-ms (5 minutes by default, at\n"
      "  most 24 h; 0: no backoff), and escalated once undecided for half of\n"
      "  --provider-key-window-s (how long the provider keeps an idempotency key, 24 h by\n"
      "  default); --provider-concurrency N: at most N provider calls at once, from all\n"
      "  workers together (0, the default: no bound); --no-lock: no order lock (to measure\n"
      "  what it saves); --max-connections N: per worker (1000 by default), and never more\n"
      "  than half the descriptor limit left after 64 (each request may hold a provider\n"
      "  connection too); --metrics-port P: each worker serves GET /metrics (the lock's\n"
      "  metrics and the service's, Prometheus' text format) on --listen's address, port P\n"
      "  plus its index (0: a free port each, printed). CHECKOUT_PROVIDER_API_KEY: the\n"
      "  provider's API key;\n"
      "  REDIS_LOCK_PASSWORD and CHECKOUT_LEDGER_PASSWORD: the passwords of the lock's and\n"
      "  the ledger's Redis, when their URLs carry none (a URL's password shows in ps).\n"
      "  --list-escalated prints the escalated orders, one JSON object a line; --resolve\n"
      "  records a person's finding for one: the provider's charge id (charged), a declined\n"
      "  charge's id, or --not-charged (the client's next retry charges it, with a new key)\n",
      code == 0 ? stdout : stderr);
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options opt;
  if (const char* env = std::getenv("REDIS_LOCK_URL")) opt.url = env;
  if (const char* env = std::getenv("CHECKOUT_PROVIDER_API_KEY")) opt.provider_api_key = env;
  const auto ms = [](const std::string& v) { return std::chrono::milliseconds(std::stol(v)); };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage(0);
    if (arg == "--no-renew") {
      opt.renew = false;
      continue;
    }
    if (arg == "--no-lock") {
      opt.use_lock = false;
      continue;
    }
    if (arg == "--ledger-unchecked") {
      opt.ledger_unchecked = true;
      continue;
    }
    if (arg == "--list-escalated") {
      opt.list_escalated = true;
      continue;
    }
    if (arg == "--not-charged") {
      opt.resolve_not_charged = true;
      continue;
    }
    if (arg == "--retention-s") {
      std::fputs(
          "checkout_service: --retention-s is gone: an order's record is kept for good (it is "
          "the order's financial record), and its response replayed for good\n",
          stderr);
      std::exit(2);
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
      else if (arg == "--provider-key-window-s")
        opt.provider_key_window = std::chrono::seconds(std::stol(value));
      else if (arg == "--provider-key-window-ms")  // for the tests' short windows
        opt.provider_key_window = ms(value);
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
      else if (arg == "--ledger-replicas")
        opt.ledger_replicas = std::stoi(value);
      else if (arg == "--metrics-port")
        opt.metrics_port = static_cast<unsigned short>(std::stoul(value));
      else if (arg == "--max-connections")
        opt.max_connections = std::stoi(value);
      else if (arg == "--resolve")
        opt.resolve = value;
      else if (arg == "--show")
        opt.show = value;
      else if (arg == "--charge-id")
        opt.resolve_charge_id = value;
      else if (arg == "--declined-charge-id")
        opt.resolve_charge_id = value, opt.resolve_declined = true;
      else
        usage(2);
    } catch (const std::exception&) {
      usage(2);
    }
  }
  if (opt.ledger_url.empty()) usage(2);
  if (!opt.show.empty()) {
    if (opt.list_escalated || !opt.resolve.empty() || !valid_order_id(opt.show)) usage(2);
    return opt;
  }
  if (opt.list_escalated || !opt.resolve.empty()) {
    if (opt.list_escalated == !opt.resolve.empty() ||
        (!opt.resolve.empty() && opt.resolve_not_charged == !opt.resolve_charge_id.empty()) ||
        (!opt.resolve.empty() && !valid_order_id(opt.resolve))) {
      usage(2);
    }
    return opt;
  }
  if (opt.workers < 1 || opt.workers > 64 || opt.lock_ttl.count() <= 0 ||
      opt.provider_timeout.count() <= 0 || opt.provider_timeout >= opt.lock_ttl ||
      opt.provider_key_window <= opt.lock_ttl * 4 || opt.reconcile_every.count() <= 0 ||
      opt.reconcile_max_backoff.count() < 0 || opt.reconcile_max_backoff > std::chrono::hours(24) ||
      (opt.shutdown_grace && opt.shutdown_grace->count() <= 0) || opt.ledger_replicas < 0 ||
      opt.max_connections < 1 || opt.provider.empty() || opt.resolve_not_charged ||
      !opt.resolve_charge_id.empty()) {
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

/// Runs `op(requests)` (a coroutine) against the ledger's records, on an io_context of its own,
/// and returns its result: the admin modes' and the start-up check's one-shot calls.
template <class Op>
auto with_records(const Options& opt, const redis_lock::ConnectionConfig& ledger_config,
                  bool unchecked, Op op) {
  asio::io_context io;
  redis_lock::LockManager store(io.get_executor(), ledger_config, {.key_prefix = opt.prefix});
  auto options = Worker::request_options(opt);
  options.unchecked_store = unchecked;
  redis_lock::IdempotentRequests requests(store, store, {}, options);
  std::optional<typename decltype(op(requests, io))::value_type> result;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { result.emplace(co_await op(requests, io)); },
      [&](std::exception_ptr) { io.stop(); });
  io.run();
  if (!result) throw std::runtime_error("the ledger's call did not complete");
  return std::move(*result);
}

/// The checkout's word for a record's state.
const char* order_state(redis_lock::RequestRecord::State s) {
  using S = redis_lock::RequestRecord::State;
  switch (s) {
    case S::running:
      return "pending";
    case S::unsent:
      return "void";
    case S::decided:
      return "final";
    case S::escalated:
      return "escalated";
    case S::none:
      break;
  }
  return "none";
}

/// The order's amount and currency, from its record's fingerprint (`<amount> <currency>`).
Order order_from(const std::string& id, const std::string& fingerprint) {
  const auto space = fingerprint.find(' ');
  Order o{id, 0, space == std::string::npos ? "" : fingerprint.substr(space + 1)};
  try {
    o.amount = std::stoll(fingerprint.substr(0, space));
  } catch (const std::exception&) {
  }
  return o;
}

/// --list-escalated, --resolve and --show: a person's tools for orders the reconciler gave up
/// on, and a look at one order's record.
int admin(const Options& opt, const redis_lock::ConnectionConfig& ledger_config) {
  using Requests = redis_lock::IdempotentRequests;
  const auto tuple = asio::as_tuple(asio::use_awaitable);
  if (!opt.show.empty()) {
    auto [ec, r] = with_records(opt, ledger_config, true, [&](Requests& q, asio::io_context&) {
      return q.async_lookup(opt.show, tuple);
    });
    if (ec) {
      std::fprintf(stderr, "checkout_service: ledger: %s\n", ec.message().c_str());
      return 3;
    }
    std::printf("%s\n", json::serialize(
                            json::object{
                                {"order_id", opt.show},
                                {"state", order_state(r.state)},
                                {"attempt", r.attempt},
                                {"fence", std::to_string(r.fencing_token)},
                                {"idempotency_key", r.attempt ? opt.prefix + r.downstream_key : ""},
                                {"charge_id", r.response.external_id},
                                {"status", r.response.status},
                                {"expires_ms", r.expires_in ? r.expires_in->count() : -1}})
                            .c_str());
    return 0;
  }
  if (opt.list_escalated) {
    auto [ec, keys] = with_records(opt, ledger_config, true, [&](Requests& q, asio::io_context&) {
      return q.async_escalated(tuple);
    });
    if (ec) {
      std::fprintf(stderr, "checkout_service: ledger: %s\n", ec.message().c_str());
      return 3;
    }
    // (one connection for the listing and every look-up)
    using Found = std::vector<std::pair<std::string, redis_lock::RequestRecord>>;
    auto [lec, found] = with_records(
        opt, ledger_config, true,
        [&](Requests& q, asio::io_context&) -> asio::awaitable<std::pair<error_code, Found>> {
          Found out;
          for (const auto& key : keys) {
            auto [e, r] = co_await q.async_lookup(key, tuple);
            if (e) co_return std::pair{e, Found{}};
            out.emplace_back(key, std::move(r));
          }
          co_return std::pair{error_code{}, std::move(out)};
        });
    if (lec) {
      std::fprintf(stderr, "checkout_service: ledger: %s\n", lec.message().c_str());
      return 3;
    }
    for (const auto& [key, r] : found) {
      const Order o = order_from(key, r.fingerprint);
      std::printf(
          "%s\n",
          json::serialize(
              json::object{{"order_id", key},
                           {"amount", o.amount},
                           {"currency", o.currency},
                           {"attempt", r.attempt},
                           {"idempotency_key", opt.prefix + r.downstream_key},
                           {"began_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                            r.began.time_since_epoch())
                                            .count()}})
              .c_str());
    }
    return 0;
  }
  auto [lec, r] = with_records(opt, ledger_config, true, [&](Requests& q, asio::io_context&) {
    return q.async_lookup(opt.resolve, tuple);
  });
  if (lec) {
    std::fprintf(stderr, "checkout_service: ledger: %s\n", lec.message().c_str());
    return 3;
  }
  if (r.state != redis_lock::RequestRecord::State::escalated) {
    std::fprintf(stderr, "checkout_service: %s is not escalated (%s)\n", opt.resolve.c_str(),
                 order_state(r.state));
    return 1;
  }
  const Order order = order_from(opt.resolve, r.fingerprint);
  auto [ec, done] = with_records(opt, ledger_config, true, [&](Requests& q, asio::io_context&) {
    if (opt.resolve_not_charged) return q.async_reopen(opt.resolve, tuple);
    const bool charged = !opt.resolve_declined;
    redis_lock::StoredResponse response{
        charged ? 201 : 402,
        json::serialize(charge_body(order, charged, opt.resolve_charge_id)) + "\n",
        opt.resolve_charge_id};
    return q.async_settle(opt.resolve, std::move(response), tuple);
  });
  if (ec) {
    std::fprintf(stderr, "checkout_service: ledger: %s\n", ec.message().c_str());
    return 3;
  }
  std::printf("%s: %s\n", opt.resolve.c_str(),
              !done                     ? "not resolved (it changed meanwhile)"
              : opt.resolve_not_charged ? "reopened: the client's next retry charges it"
                                        : "recorded as final");
  return done ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that went away must be an error to handle, never a SIGPIPE that kills a worker
  // (Asio's own sockets never raise it; this guards any plain write(2) in what it links).
  std::signal(SIGPIPE, SIG_IGN);
  const Options opt = parse(argc, argv);
  auto lock = redis_lock::ConnectionConfig::from_url(opt.url);
  auto ledger = redis_lock::ConnectionConfig::from_url(opt.ledger_url);
  // Passwords from the environment keep them out of `ps` (a URL's stays visible there).
  if (const char* pw = std::getenv("REDIS_LOCK_PASSWORD"); pw && lock && lock->password.empty()) {
    lock->password = pw;
  }
  if (const char* pw = std::getenv("CHECKOUT_LEDGER_PASSWORD");
      pw && ledger && ledger->password.empty()) {
    ledger->password = pw;
  }
  if (!lock || !ledger) {
    std::fprintf(stderr, "checkout_service: --%s is not a valid redis:// or unix:// URL\n",
                 lock ? "ledger-url" : "url");
    return 2;
  }
  if (opt.list_escalated || !opt.resolve.empty() || !opt.show.empty()) return admin(opt, *ledger);
  {
    // The ledger must keep what it answered through a crash and never evict it (and have
    // the replicas asked for); a service started on one that does not is refused, not warned
    // about. (The component's own check, as each worker's first call would make it.)
    std::string problem;
    const auto ec = with_records(
        opt, *ledger, opt.ledger_unchecked,
        [&](redis_lock::IdempotentRequests& q, asio::io_context&) -> asio::awaitable<error_code> {
          auto [e] = co_await q.async_check_store(asio::as_tuple(asio::use_awaitable));
          problem = q.store_problem();
          co_return e;
        });
    const bool refused =
        ec == redis_lock::error::store_not_durable || ec == redis_lock::error::invalid_argument;
    if (ec && !refused && !opt.ledger_unchecked) {
      std::fprintf(stderr, "checkout_service: the ledger could not be checked: %s\n",
                   problem.empty() ? ec.message().c_str() : problem.c_str());
      return 2;
    }
    if (refused) {
      if (problem.empty()) problem = ec.message();
      std::fputs("checkout_service: the ledger is not durable enough:\n", stderr);
      std::size_t at = 0;
      while (at <= problem.size()) {
        const auto end = std::min(problem.find("; ", at), problem.size());
        std::fprintf(stderr, "  %s\n", problem.substr(at, end - at).c_str());
        at = end + 2;
      }
      std::fputs("  (--ledger-unchecked runs without this check; see docs/guide.md)\n", stderr);
      return 2;
    }
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
