// SPDX-License-Identifier: MIT
// A stand-in for a card payment provider, as a separate process: the checkout example's
// "other system", the one whose side effect (money moving) must happen once per order. It is
// as strict as the real ones, so that the service's tests meet what production would:
//
// - Idempotent by key: every charge request carries an `Idempotency-Key`; the first request
//   with a key that the provider starts executing decides the key's result, whatever it is
//   (a charge, a decline, a refusal, a 5xx), and every later request with that key gets the
//   same result back (same status, same body, plus `Idempotent-Replayed: true`) without
//   executing again. A request that never started executing (a bad API key: 401; a fault
//   armed with 401, 403, 404, 408, 425 or 429) leaves the key unused. A key whose first
//   request is still executing gets 409; a key reused with other parameters gets 422.
// - Keys are forgotten after --key-ttl-ms (0, the default: never), as real providers prune
//   them after about 24 hours: a request with a forgotten key is executed anew. Charges are
//   never forgotten: they can be looked up by reference.
// - Success is 200 (--success-status), as at the common providers, not 201.
// - With PAYMENT_PROVIDER_API_KEY set in its environment, the merchant endpoints (charge,
//   lookups) need `Authorization: Bearer <that key>`, and answer 401 without it.
// - Every executed request's result is written to an append-only journal (mode 0600,
//   fdatasync before the answer) and read back at start: a restarted provider still knows every
//   key that has not expired and every charge.
//
// Merchant endpoints:
//   POST /v1/charges     Idempotency-Key: K
//                        {"amount": 1299, "currency": "EUR", "reference": "A-17"}
//     200 {"id": "ch_...", "status": "succeeded", "amount", "currency", "reference"}
//     402 {"id": "ch_...", "status": "declined", "decline_code": "card_declined", ...}
//     409 idempotency_key_in_use, 422 idempotency_key_reused, 400 bad request, 401
//   GET  /v1/keys/K      the key's stored result: 200 {"idempotency_key", "http_status",
//                        "body"}; 404 unknown_key (never executed, or forgotten); 409 while
//                        its first request executes
//   GET  /v1/charges?reference=R   {"results": [...]} every charge (succeeded or declined)
//                        made for reference R, each with "idempotency_key" and "http_status"
// Test endpoints (no API key):
//   GET  /v1/charges     every charge ever made, for checkers: {"results": [...]}
//   GET  /v1/stats       {"in_flight", "peak_in_flight", "charge_requests", "key_in_use",
//                        "replays", "lookups"}: charges being executed now and the most at
//                        once (what --provider-concurrency bounds), charge requests received,
//                        409s for a key in use, results answered again, lookups served
//   POST /v1/faults      {"reference": R, "action": "decline" | "delay" | "delay_response" |
//                         "drop_response" | "drop_and_freeze" | "error", "delay_ms": N,
//                         "status": S, "times": T,
//                         "charged": B}
//                        the next T charges for R (1 if not given) misbehave, on demand:
//                        delay: the charge happens after N ms (a slow or timed-out call);
//                        delay_response: the charge happens at once, its answer leaves N ms
//                        later (the caller can die knowing nothing of a charge that is made);
//                        drop_response: the charge happens, then the connection is closed
//                        without an answer;
//                        drop_and_freeze: as drop_response, then the whole provider stops
//                        for N ms (its one thread sleeps: connections queue unanswered, as
//                        under SIGSTOP), from the instant the answer is lost, so that no
//                        caller can reach it in between;
//                        error: the answer is S (400-599, not 402 or 409) with {"error": ...};
//                        nothing is charged unless "charged" is true (a 5xx after the money
//                        moved). 401/403/404/408/425/429 are answered as not executed (the key
//                        stays unused); any other S is the key's stored result.
//                        A faulted request is logged on stdout once it is decided:
//                        "payment_provider: charged R (STATUS, fault ACTION)",
//                        "payment_provider: refused R (STATUS, fault error; nothing charged)".
//   GET  /healthz
//
//   payment_provider --journal FILE [--listen 127.0.0.1] [--port 0] [--latency-ms 2]
//                    [--key-ttl-ms 0] [--success-status 200]
// Prints "payment_provider listening on ADDR:PORT" once it accepts.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using boost::system::error_code;

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Result {
  int status = 0;
  json::object body;
  json::object params;  // amount, currency, reference: what the key was first used with
  std::int64_t at = 0;  // unix ms when it was decided
};

struct Fault {
  std::string action;
  std::chrono::milliseconds delay{0};
  int status = 0;          // error: the status to answer with
  bool charged = false;    // error: the money moved before the error
  std::int64_t times = 1;  // how many charges it still applies to
};

// Answers that mean the request never started executing: the key stays unused.
bool not_executed(int status) {
  return status == 401 || status == 403 || status == 404 || status == 408 || status == 425 ||
         status == 429;
}

Response answer(const Request& req, int status, const json::object& body) {
  Response res{static_cast<http::status>(status), req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = json::serialize(body) + "\n";
  res.prepare_payload();
  return res;
}

json::object error_body(std::string_view code) { return {{"error", code}}; }

// The members of a JSON object body (null where the body is not an object or lacks one).
struct Body {
  json::value parsed;
  explicit Body(const std::string& text) {
    error_code ec;
    parsed = json::parse(text, ec);
    if (ec) parsed = nullptr;
  }
  const json::value* operator[](const char* name) const {
    const json::object* o = parsed.if_object();
    return o ? o->if_contains(name) : nullptr;
  }
};

class Provider {
 public:
  Provider(asio::io_context& io, std::string journal, std::chrono::milliseconds latency,
           std::chrono::milliseconds key_ttl, int success_status, std::string api_key)
      : io_(io),
        journal_path_(std::move(journal)),
        latency_(latency),
        key_ttl_(key_ttl),
        success_status_(success_status),
        api_key_(std::move(api_key)) {
    load();
    fd_ = ::open(journal_path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) throw std::runtime_error("journal " + journal_path_ + ": " + std::strerror(errno));
    // The file's directory entry is made durable too (the file may have just been created).
    const auto dir = std::filesystem::absolute(journal_path_).parent_path();
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
      throw std::runtime_error("journal directory " + dir.string() + ": " + std::strerror(errno));
    }
    ::close(dir_fd);
  }
  ~Provider() { ::close(fd_); }

  asio::awaitable<void> session(beast::tcp_stream stream) {
    beast::flat_buffer buffer;
    for (;;) {
      Request req;
      stream.expires_after(60s);
      auto [ec, n] =
          co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
      if (ec) break;
      std::optional<Response> res = co_await handle(req);
      if (!res) break;  // drop_response: the charge happened, the answer never leaves
      const bool keep = res->keep_alive();
      auto [wec, wn] =
          co_await http::async_write(stream, *res, asio::as_tuple(asio::use_awaitable));
      if (wec || !keep) break;
    }
    error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    if (freeze_ > std::chrono::milliseconds::zero()) {
      // drop_and_freeze: the one thread stops, so nothing is accepted or answered (a frozen
      // process, without the race of a SIGSTOP sent from outside after the answer was lost)
      std::this_thread::sleep_for(std::exchange(freeze_, std::chrono::milliseconds::zero()));
    }
  }

  std::size_t known_keys() const { return keys_.size(); }

 private:
  asio::awaitable<std::optional<Response>> handle(const Request& req) {
    const std::string_view target = req.target();
    const std::string_view path = target.substr(0, target.find('?'));
    const std::string_view query =
        path.size() < target.size() ? target.substr(path.size() + 1) : std::string_view();
    if (path == "/healthz") co_return answer(req, 200, {{"status", "ok"}});
    if (path == "/v1/stats" && req.method() == http::verb::get) {
      co_return answer(req, 200,
                       {{"in_flight", in_flight_.size()},
                        {"peak_in_flight", peak_in_flight_},
                        {"charge_requests", charge_requests_},
                        {"key_in_use", key_in_use_},
                        {"replays", replays_},
                        {"lookups", lookups_}});
    }
    if (path == "/v1/faults" && req.method() == http::verb::post) co_return add_fault(req);
    if (path == "/v1/charges" && req.method() == http::verb::get && query.empty()) {
      co_return answer(req, 200, {{"results", charges_for({})}});  // the checkers' view
    }
    // The merchant's endpoints.
    if (!api_key_.empty()) {
      const auto auth = req.find(http::field::authorization);
      if (auth == req.end() || auth->value() != "Bearer " + api_key_) {
        co_return answer(req, 401, error_body("invalid_api_key"));  // not executed
      }
    }
    if (path == "/v1/charges" && req.method() == http::verb::get) {
      constexpr std::string_view by_reference = "reference=";
      if (query.substr(0, by_reference.size()) != by_reference) {
        co_return answer(req, 400, error_body("bad_query"));
      }
      ++lookups_;
      co_return answer(req, 200,
                       {{"results", charges_for(std::string(query.substr(by_reference.size())))}});
    }
    constexpr std::string_view keys = "/v1/keys/";
    if (path.substr(0, keys.size()) == keys && req.method() == http::verb::get) {
      ++lookups_;
      const std::string key(path.substr(keys.size()));
      if (const Result* r = find_key(key)) {
        co_return answer(req, 200,
                         {{"idempotency_key", key}, {"http_status", r->status}, {"body", r->body}});
      }
      if (in_flight_.count(key)) co_return answer(req, 409, error_body("idempotency_key_in_use"));
      co_return answer(req, 404, error_body("unknown_key"));
    }
    if (path == "/v1/charges" && req.method() == http::verb::post) {
      co_return co_await charge(req);
    }
    co_return answer(req, 404, error_body("not_found"));
  }

  // The key's stored result, unless it has expired (then it is forgotten here).
  const Result* find_key(const std::string& key) {
    const auto it = keys_.find(key);
    if (it == keys_.end()) return nullptr;
    if (key_ttl_.count() > 0 && unix_ms() - it->second.at >= key_ttl_.count()) {
      keys_.erase(it);
      return nullptr;
    }
    return &it->second;
  }

  // Every charge (or those for `reference`), each with its key and HTTP status.
  json::array charges_for(const std::optional<std::string>& reference) const {
    json::array all;
    for (const auto& c : charges_) {
      if (reference && c.body.at("reference").as_string() != *reference) continue;
      json::object entry = c.body;
      entry["idempotency_key"] = c.key;
      entry["http_status"] = c.status;
      all.push_back(std::move(entry));
    }
    return all;
  }

  Response add_fault(const Request& req) {
    const Body body(req.body());
    const json::value* ref = body["reference"];
    const json::value* action = body["action"];
    const json::value* delay = body["delay_ms"];
    const json::value* status = body["status"];
    const json::value* times = body["times"];
    const json::value* charged = body["charged"];
    static const std::set<std::string_view> actions = {
        "decline", "delay", "delay_response", "drop_response", "drop_and_freeze", "error"};
    if (!ref || !ref->is_string() || !action || !action->is_string() ||
        !actions.count(action->get_string()) || (delay && !delay->is_int64()) ||
        (status && !status->is_int64()) ||
        (times && (!times->is_int64() || times->as_int64() < 1)) ||
        (charged && !charged->is_bool())) {
      return answer(req, 400, error_body("bad_fault"));
    }
    const int error_status = status ? static_cast<int>(status->as_int64()) : 0;
    if (action->get_string() == "error" &&
        (error_status < 400 || error_status > 599 || error_status == 402 || error_status == 409)) {
      return answer(req, 400, error_body("bad_fault"));
    }
    faults_[std::string(ref->get_string())] = Fault{
        std::string(action->get_string()), std::chrono::milliseconds(delay ? delay->as_int64() : 0),
        error_status, charged && charged->as_bool(), times ? times->as_int64() : 1};
    return answer(req, 200, {{"armed", true}});
  }

  asio::awaitable<std::optional<Response>> charge(const Request& req) {
    ++charge_requests_;
    const auto key_field = req.find("Idempotency-Key");
    const std::string key = key_field == req.end() ? "" : std::string(key_field->value());
    if (key.empty() || key.size() > 255)
      co_return answer(req, 400, error_body("idempotency_key_required"));
    const Body body(req.body());
    const json::value* amount = body["amount"];
    const json::value* currency = body["currency"];
    const json::value* reference = body["reference"];
    if (!amount || !amount->is_int64() || amount->as_int64() <= 0 || !currency ||
        !currency->is_string() || currency->get_string().size() != 3 || !reference ||
        !reference->is_string() || reference->get_string().empty()) {
      co_return answer(req, 400, error_body("bad_request"));
    }
    json::object params{{"amount", amount->as_int64()},
                        {"currency", currency->get_string()},
                        {"reference", reference->get_string()}};
    if (const Result* stored = find_key(key)) {
      if (stored->params != params)
        co_return answer(req, 422, error_body("idempotency_key_reused"));
      ++replays_;
      Response res = answer(req, stored->status, stored->body);
      res.set("Idempotent-Replayed", "true");
      co_return res;
    }
    if (!in_flight_.insert(key).second) {
      ++key_in_use_;
      co_return answer(req, 409, error_body("idempotency_key_in_use"));
    }
    peak_in_flight_ = std::max(peak_in_flight_, in_flight_.size());
    struct Done {  // the key is free again however this ends
      std::set<std::string>& keys;
      const std::string& key;
      ~Done() { keys.erase(key); }
    } done{in_flight_, key};

    Fault fault;
    if (const auto it = faults_.find(std::string(reference->get_string())); it != faults_.end()) {
      fault = it->second;
      if (--it->second.times == 0) faults_.erase(it);
    }
    const std::string ref(reference->get_string());
    if (fault.action == "error" && not_executed(fault.status)) {
      std::printf("payment_provider: refused %s (%d, fault error; nothing charged)\n", ref.c_str(),
                  fault.status);
      std::fflush(stdout);
      co_return answer(req, fault.status, error_body("request_not_executed"));
    }
    // The work of a charge (a card network round trip), then any injected slowness.
    const bool answer_late = fault.action == "delay_response" || fault.action == "drop_and_freeze";
    asio::steady_timer work(io_, latency_ + (answer_late ? 0ms : fault.delay));
    co_await work.async_wait(asio::as_tuple(asio::use_awaitable));

    Result r;
    r.params = params;
    r.at = unix_ms();
    if (fault.action == "error") {  // the key's result, kept like any other
      if (fault.charged) record_charge(key, success_status_, made_charge(params, false));
      r.status = fault.status;
      r.body = error_body(fault.status >= 500 ? "provider_error" : "request_refused");
      record(key, r);
      std::printf("payment_provider: %s %s (%d, fault error; %s)\n",
                  fault.charged ? "charged" : "refused", ref.c_str(), r.status,
                  fault.charged ? "charged, then the error" : "nothing charged");
      std::fflush(stdout);
      co_return answer(req, r.status, r.body);
    }
    const bool declined = fault.action == "decline";
    r.status = declined ? 402 : success_status_;
    r.body = made_charge(params, declined);
    record_charge(key, r.status, r.body);
    record(key, r);  // from here a repeated key is answered with this result
    if (!fault.action.empty()) {
      std::printf("payment_provider: charged %s (%d, fault %s)\n", ref.c_str(), r.status,
                  fault.action.c_str());
      std::fflush(stdout);
    }
    if (fault.action == "drop_response") co_return std::nullopt;
    if (fault.action == "drop_and_freeze") {
      freeze_ = fault.delay;
      co_return std::nullopt;
    }
    if (answer_late) {
      work.expires_after(fault.delay);
      co_await work.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    co_return answer(req, r.status, r.body);
  }

  json::object made_charge(const json::object& params, bool declined) {
    json::object body = params;
    body["id"] = "ch_" + std::to_string(++sequence_) + "_" + salt_;
    body["status"] = declined ? "declined" : "succeeded";
    if (declined) body["decline_code"] = "card_declined";
    return body;
  }

  struct Charge {
    std::string key;
    int status = 0;
    json::object body;
  };

  void record_charge(const std::string& key, int status, const json::object& body) {
    append(json::object{{"charge", true}, {"key", key}, {"status", status}, {"body", body}});
    charges_.push_back({key, status, body});
  }

  void record(const std::string& key, const Result& r) {
    append(json::object{
        {"key", key}, {"status", r.status}, {"body", r.body}, {"params", r.params}, {"at", r.at}});
    keys_[key] = r;
  }

  // One JSON line per charge and per decided key, on disk before anyone is told.
  void append(const json::object& entry) {
    const std::string line = json::serialize(entry) + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
        ::fdatasync(fd_) != 0) {
      std::fprintf(stderr, "payment_provider: journal write failed: %s\n", std::strerror(errno));
      std::abort();  // a provider that cannot record a charge must not answer for it
    }
  }

  // Reads every complete line back. A torn last line (a crash mid-write: that result was
  // never answered) is cut off, so that the next record does not land on its fragment.
  void load() {
    std::ifstream in(journal_path_, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (complete < text.size() &&
        ::truncate(journal_path_.c_str(), static_cast<off_t>(complete)) != 0) {
      throw std::runtime_error("journal " + journal_path_ + ": " + std::strerror(errno));
    }
    std::size_t at = 0;
    while (at < complete) {
      const std::size_t end = text.find('\n', at);
      error_code ec;
      const json::value v = json::parse(std::string_view(text).substr(at, end - at), ec);
      at = end + 1;
      const json::object* o = ec ? nullptr : v.if_object();
      if (!o) throw std::runtime_error("journal " + journal_path_ + ": a damaged record");
      const std::string key(o->at("key").as_string());
      const int status = static_cast<int>(o->at("status").as_int64());
      if (o->contains("charge")) {
        charges_.push_back({key, status, o->at("body").as_object()});
        ++sequence_;
        continue;
      }
      Result r;
      r.status = status;
      r.body = o->at("body").as_object();
      r.params = o->at("params").as_object();
      r.at = o->at("at").as_int64();
      keys_[key] = std::move(r);
    }
  }

  asio::io_context& io_;
  std::chrono::milliseconds freeze_{0};  // drop_and_freeze: how long to stop once dropped
  std::string journal_path_;
  std::chrono::milliseconds latency_;
  std::chrono::milliseconds key_ttl_;
  int success_status_;
  std::string api_key_;
  int fd_ = -1;
  std::map<std::string, Result> keys_;  // the idempotency keys' results, until they expire
  std::vector<Charge> charges_;         // every charge made, never forgotten
  std::set<std::string> in_flight_;     // keys whose charge is being executed
  std::size_t peak_in_flight_ = 0;      // the most at once
  std::uint64_t charge_requests_ = 0, key_in_use_ = 0, replays_ = 0, lookups_ = 0;
  std::map<std::string, Fault> faults_;
  std::uint64_t sequence_ = 0;
  std::string salt_ = [] {  // charge ids stay unique across restarts and journals
    char buf[12];
    std::snprintf(buf, sizeof buf, "%08x", std::random_device{}());
    return std::string(buf);
  }();
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1", journal;
  unsigned short port = 0;
  long latency_ms = 2, key_ttl_ms = 0, success_status = 200;
  if (argc % 2 == 0) argc = 0;  // an option without its value: usage
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--journal")
      journal = value;
    else if (arg == "--listen")
      listen = value;
    else if (arg == "--port")
      port = static_cast<unsigned short>(std::atoi(value.c_str()));
    else if (arg == "--latency-ms")
      latency_ms = std::atol(value.c_str());
    else if (arg == "--key-ttl-ms")
      key_ttl_ms = std::atol(value.c_str());
    else if (arg == "--success-status")
      success_status = std::atol(value.c_str());
    else
      journal.clear(), argc = 0;
  }
  if (journal.empty() || latency_ms < 0 || key_ttl_ms < 0 || success_status < 200 ||
      success_status > 299) {
    std::fputs(
        "usage: payment_provider --journal FILE [--listen ADDR] [--port P] [--latency-ms MS]\n"
        "                        [--key-ttl-ms MS] [--success-status 2XX]\n"
        "  PAYMENT_PROVIDER_API_KEY in the environment: the API key merchants must send\n",
        stderr);
    return 2;
  }
  try {
    asio::io_context io;
    const char* api_key = std::getenv("PAYMENT_PROVIDER_API_KEY");
    Provider provider(io, journal, std::chrono::milliseconds(latency_ms),
                      std::chrono::milliseconds(key_ttl_ms), static_cast<int>(success_status),
                      api_key ? api_key : "");
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address(listen), port});
    std::printf("payment_provider listening on %s:%u (%zu keys from the journal)\n", listen.c_str(),
                acceptor.local_endpoint().port(), provider.known_keys());
    std::fflush(stdout);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
            if (!acceptor.is_open()) co_return;
            if (!ec)
              asio::co_spawn(io, provider.session(beast::tcp_stream(std::move(socket))),
                             asio::detached);
          }
        },
        asio::detached);
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](error_code, int) { io.stop(); });
    io.run();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payment_provider: %s\n", e.what());
    return 1;
  }
}
