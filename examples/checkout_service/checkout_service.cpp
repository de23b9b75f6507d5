// SPDX-License-Identifier: MIT
// The scenario redis_lock exists for: an HTTP checkout service run as several processes on one
// port, where the same order may arrive twice at once (a retrying client, a double click).
//
//   POST /checkout {"order_id": "A-17", "amount": 1299}
//     201 Created   {"status": "charged", ...}          this request charged the order
//     200 OK        {"status": "already_charged", ...}  a repeat: the stored result, no charge
//     409 Conflict  {"error": "order_in_progress", ...}  another request is charging it now
//     400 / 404 / 405 / 413 for bad requests, 503 when Redis cannot be reached
//   GET /healthz
//
// One lock per order (redis_lock, auto-renewed while the charge runs). The charge is written
// to a ledger that rejects writes carrying a stale fencing token (see ledger.hpp), so even a
// holder that lost its lock mid-charge cannot write.
//
//   checkout_service [--url redis://127.0.0.1:6379] [--listen 127.0.0.1] [--port 8080]
//                    [--workers N] [--charge-ms 20] [--ledger-prefix checkout:]
//                    [--lock-ttl-ms 5000] [--no-renew]
//
// --workers N forks N processes that each accept on the same port (SO_REUSEPORT), each with
// its own LockManager: the lock, not the process, keeps orders apart.
#include "ledger.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
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

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using boost::system::error_code;

namespace {

struct Options {
  std::string url = "redis://127.0.0.1:6379";
  std::string listen = "127.0.0.1";
  unsigned short port = 8080;
  int workers = 1;
  std::chrono::milliseconds charge_time{20};
  std::chrono::milliseconds lock_ttl{5000};
  bool renew = true;  // --no-renew: to watch fencing stop a holder whose lease ran out
  std::string ledger_prefix = "checkout:";
};

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response reply(const Request& req, http::status status, const json::object& body) {
  Response res{status, req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = json::serialize(body);
  res.body() += '\n';
  res.prepare_payload();
  return res;
}

json::object error_body(std::string_view code, std::string_view message) {
  return {{"error", code}, {"message", message}};
}

json::object charge_body(const checkout::Charge& c, std::string_view status) {
  return {{"status", status},
          {"order_id", c.order_id},
          {"amount", c.amount},
          {"charge_id", c.charge_id},
          {"fencing_token", c.fencing_token}};
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

/// One worker process: an acceptor on the shared port, a LockManager, the ledger's pool.
class Worker {
 public:
  Worker(asio::io_context& io, const Options& opt, redis_lock::ConnectionConfig config, int index)
      : io_(io),
        opt_(opt),
        index_(index),
        locks_(io.get_executor(), config, {.key_prefix = opt.ledger_prefix + "lock:"}),
        ledger_(config, opt.ledger_prefix),
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
  }

  /// Stops accepting; requests in progress finish; the process exits when they have.
  void stop() {
    error_code ignored;
    acceptor_.close(ignored);
    stopping_ = true;
    if (sessions_ == 0) return io_.stop();
    // Idle keep-alive connections would hold us for their read timeout: give requests in
    // progress a moment, then go.
    grace_.expires_after(3s);
    grace_.async_wait([this](error_code ec) {
      if (!ec) io_.stop();
    });
  }

  void print_summary() const {
    std::printf("checkout worker %d (pid %d): %d charged, %d already charged, %d conflicts, "
                "%d stale, %d errors\n",
                index_, ::getpid(), charged_, replayed_, conflicts_, stale_, errors_);
    std::fflush(stdout);
  }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec) continue;  // e.g. out of file descriptors for a moment
      asio::co_spawn(io_, session(beast::tcp_stream(std::move(socket))), asio::detached);
    }
  }

  asio::awaitable<void> session(beast::tcp_stream stream) {
    ++sessions_;
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(8 * 1024);
      stream.expires_after(30s);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser,
                                               asio::as_tuple(asio::use_awaitable));
      if (ec == http::error::body_limit) {
        Request req = parser.release();
        co_await write(stream, reply(req, http::status::payload_too_large,
                                     error_body("too_large", "the body is limited to 8 KiB")));
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
    if (--sessions_ == 0 && stopping_) io_.stop();
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
      co_return reply(req, http::status::not_found, error_body("not_found", "try POST /checkout"));
    }
    if (req.method() != http::verb::post) {
      auto res = reply(req, http::status::method_not_allowed,
                       error_body("method_not_allowed", "use POST"));
      res.set(http::field::allow, "POST");
      co_return res;
    }
    error_code ec;
    const json::value body = json::parse(req.body(), ec);
    const json::object* obj = ec ? nullptr : body.if_object();
    const json::value* order_value = obj ? obj->if_contains("order_id") : nullptr;
    const json::string* order = order_value ? order_value->if_string() : nullptr;
    const json::value* amount = obj ? obj->if_contains("amount") : nullptr;
    if (!order || !valid_order_id(*order) || !amount || !amount->is_int64() ||
        amount->as_int64() <= 0 || amount->as_int64() > 100'000'000'00) {
      co_return reply(req, http::status::bad_request,
                      error_body("bad_request",
                                 "expected {\"order_id\": \"[A-Za-z0-9_.:-]{1,128}\", "
                                 "\"amount\": <cents, 1..10000000000>}"));
    }
    co_return co_await checkout(req, std::string(*order), amount->as_int64());
  }

  asio::awaitable<Response> checkout(const Request& req, std::string order_id,
                                     std::int64_t amount) {
    // One attempt, no waiting: a second request for an order in progress is told so at once.
    // auto_renew keeps the lease for as long as the charge takes.
    auto [ec, guard] = co_await locks_.async_acquire(
        "order:" + order_id, {.ttl = opt_.lock_ttl, .auto_renew = opt_.renew},
        asio::as_tuple(asio::use_awaitable));
    if (ec) {
      ++errors_;
      co_return reply(req, http::status::service_unavailable,
                      error_body("lock_unavailable", ec.message()));
    }
    if (!guard) {
      ++conflicts_;
      json::object body = error_body("order_in_progress",
                                     "another request is processing this order; retry later");
      body["order_id"] = order_id;
      auto res = reply(req, http::status::conflict, body);
      res.set(http::field::retry_after, "1");
      co_return res;
    }
    checkout::Charge charge{order_id, amount, "", guard.fencing_token()};
    try {
      auto begun = co_await on_pool([&] { return ledger_.begin(order_id, charge.fencing_token); });
      if (begun.outcome == checkout::Ledger::Outcome::already_charged) {
        co_return replay(req, *begun.existing, amount);
      }
      if (begun.outcome == checkout::Ledger::Outcome::stale) {
        ++stale_;
        co_return reply(req, http::status::conflict,
                        error_body("stale_lock", "a newer request owns this order"));
      }
      // The payment provider (simulated). Bound to the guard's lost signal: if renewal fails
      // and the lease lapses, the charge is abandoned instead of finishing unprotected.
      asio::steady_timer payment(io_, opt_.charge_time);
      auto [lost] = co_await payment.async_wait(
          asio::bind_cancellation_slot(guard.lost_slot(), asio::as_tuple(asio::use_awaitable)));
      if (lost) {
        ++stale_;
        co_return reply(req, http::status::service_unavailable,
                        error_body("lock_lost", "the order's lock was lost mid-charge; retry"));
      }
      charge.charge_id = "ch_" + std::to_string(charge.fencing_token) + "_" + std::to_string(::getpid());
      auto committed = co_await on_pool([&] { return ledger_.commit(charge); });
      co_await guard.async_release(asio::as_tuple(asio::use_awaitable));
      switch (committed.outcome) {
        case checkout::Ledger::Outcome::go_ahead:
          ++charged_;
          co_return reply(req, http::status::created, charge_body(charge, "charged"));
        case checkout::Ledger::Outcome::already_charged:
          co_return replay(req, *committed.existing, amount);
        case checkout::Ledger::Outcome::stale:
          break;
      }
      ++stale_;
      co_return reply(req, http::status::conflict,
                      error_body("stale_lock", "a newer request took this order over"));
    } catch (const checkout::LedgerError& e) {
      ++errors_;
      co_return reply(req, http::status::service_unavailable,
                      error_body("ledger_unavailable", e.what()));
    }
  }

  Response replay(const Request& req, const checkout::Charge& stored, std::int64_t amount) {
    if (stored.amount != amount) {
      ++conflicts_;
      return reply(req, http::status::conflict,
                   error_body("amount_mismatch", "this order was charged with another amount"));
    }
    ++replayed_;
    return reply(req, http::status::ok, charge_body(stored, "already_charged"));
  }

  /// Runs the blocking ledger call on the pool and comes back to this worker's thread.
  template <class Fn>
  asio::awaitable<std::invoke_result_t<Fn>> on_pool(Fn fn) {
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
  redis_lock::LockManager locks_;
  checkout::Ledger ledger_;
  asio::thread_pool pool_{4};
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer grace_{io_};
  int sessions_ = 0;
  bool stopping_ = false;
  int charged_ = 0, replayed_ = 0, conflicts_ = 0, stale_ = 0, errors_ = 0;
};

int run_worker(const Options& opt, const redis_lock::ConnectionConfig& config, int index) {
  try {
    asio::io_context io;
    Worker worker(io, opt, config, index);
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
      "usage: checkout_service [--url URL] [--listen ADDR] [--port P] [--workers N]\n"
      "                        [--charge-ms MS] [--ledger-prefix PREFIX]\n"
      "                        [--lock-ttl-ms MS] [--no-renew]\n"
      "  URL defaults to $REDIS_LOCK_URL or redis://127.0.0.1:6379\n",
      code == 0 ? stdout : stderr);
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options opt;
  if (const char* env = std::getenv("REDIS_LOCK_URL")) opt.url = env;
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
      if (arg == "--url") {
        opt.url = value;
      } else if (arg == "--listen") {
        opt.listen = value;
      } else if (arg == "--port") {
        opt.port = static_cast<unsigned short>(std::stoul(value));
      } else if (arg == "--workers") {
        opt.workers = std::stoi(value);
      } else if (arg == "--charge-ms") {
        opt.charge_time = std::chrono::milliseconds(std::stoi(value));
      } else if (arg == "--lock-ttl-ms") {
        opt.lock_ttl = std::chrono::milliseconds(std::stoi(value));
      } else if (arg == "--ledger-prefix") {
        opt.ledger_prefix = value;
      } else {
        usage(2);
      }
    } catch (const std::exception&) {
      usage(2);
    }
  }
  if (opt.workers < 1 || opt.workers > 64 || opt.charge_time.count() < 0 ||
      opt.lock_ttl.count() <= 0) {
    usage(2);
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const auto config = redis_lock::ConnectionConfig::from_url(opt.url);
  if (!config) {
    std::fputs("checkout_service: --url is not a valid redis:// or unix:// URL\n", stderr);
    return 2;
  }
  if (opt.workers == 1) return run_worker(opt, *config, 0);

  // Fork before any thread or io_context exists; each child is a complete service. The
  // parent blocks the signals it waits for first, so that none is lost before sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &set, &old);
  std::vector<pid_t> children;
  for (int i = 0; i < opt.workers; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t c : children) ::kill(c, SIGTERM);
      return 1;
    }
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &old, nullptr);
      std::_Exit(run_worker(opt, *config, i));
    }
    children.push_back(pid);
  }
  // The parent only forwards SIGINT/SIGTERM and waits for its workers.
  int failed = 0;
  std::size_t alive = children.size();
  while (alive > 0) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGINT || sig == SIGTERM) {
      for (pid_t c : children) ::kill(c, SIGTERM);
      continue;
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      --alive;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}
