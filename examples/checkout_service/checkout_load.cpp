// SPDX-License-Identifier: MIT
// Fires a storm of concurrent checkouts at checkout_service, duplicates included, then checks
// the ledger directly in Redis: every order charged exactly once, with the amount asked, and
// every later repeat answered with the stored charge.
//
//   checkout_load --port P [--host 127.0.0.1] [--url redis://...] [--requests 400]
//                 [--orders 50] [--ledger-prefix checkout:]
//   checkout_load --port P --probe-bad-input     malformed requests must get 400/404/405/413
//   checkout_load --port P --one ORDER_ID [--amount CENTS]     one request: prints
//                 "<status> <body>" and exits 0 if it got an HTTP answer
//
// Exit status 0 when everything held, 1 otherwise.
#include "ledger.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

struct Answer {
  int status = 0;  // 0: no HTTP answer at all
  json::value body;
};

// One request on a connection of its own; the status (0 if no HTTP answer came within
// `limit`) and the body parsed as JSON (null if it is not).
asio::awaitable<Answer> request(asio::ip::tcp::endpoint target, http::verb method,
                                std::string path, std::string body,
                                std::chrono::seconds limit) {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(limit);
  auto [ec] = co_await stream.async_connect(target, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return Answer{};
  http::request<http::string_body> req{method, path, 11};
  req.set(http::field::host, "checkout");
  req.set(http::field::content_type, "application/json");
  req.keep_alive(false);
  req.body() = std::move(body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
  if (wec) co_return Answer{};
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  auto [rec, rn] = co_await http::async_read(stream, buffer, res, asio::as_tuple(asio::use_awaitable));
  if (rec) co_return Answer{};
  boost::system::error_code jec;
  auto parsed = json::parse(res.body(), jec);
  co_return Answer{static_cast<int>(res.result_int()), jec ? json::value{} : parsed};
}

asio::awaitable<Answer> post_checkout(asio::ip::tcp::endpoint target, std::string order_id,
                                      std::int64_t amount) {
  return request(target, http::verb::post, "/checkout",
                 json::serialize(json::object{{"order_id", order_id}, {"amount", amount}}), 30s);
}

// Bad requests get the right 4xx and charge nothing.
int probe_bad_input(asio::ip::tcp::endpoint target) {
  struct Case {
    const char* what;
    http::verb method;
    std::string path, body;
    int expected;
  };
  const std::vector<Case> cases = {
      {"not JSON", http::verb::post, "/checkout", "{order", 400},
      {"JSON but not an object", http::verb::post, "/checkout", "[1,2]", 400},
      {"no order_id", http::verb::post, "/checkout", R"({"amount": 5})", 400},
      {"order_id not a string", http::verb::post, "/checkout", R"({"order_id": 7, "amount": 5})", 400},
      {"order_id with a space", http::verb::post, "/checkout", R"({"order_id": "a b", "amount": 5})", 400},
      {"order_id too long", http::verb::post, "/checkout",
       R"({"order_id": ")" + std::string(129, 'x') + R"(", "amount": 5})", 400},
      {"amount zero", http::verb::post, "/checkout", R"({"order_id": "a", "amount": 0})", 400},
      {"amount negative", http::verb::post, "/checkout", R"({"order_id": "a", "amount": -3})", 400},
      {"amount not an integer", http::verb::post, "/checkout", R"({"order_id": "a", "amount": 1.5})", 400},
      {"amount too large", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 10000000001})", 400},
      {"body over 8 KiB", http::verb::post, "/checkout", std::string(9000, ' '), 413},
      {"wrong method", http::verb::get, "/checkout", "", 405},
      {"unknown path", http::verb::post, "/nope", "{}", 404},
  };
  asio::io_context io;
  std::vector<int> got(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    asio::co_spawn(io, request(target, cases[i].method, cases[i].path, cases[i].body, 10s),
                   [&got, i](std::exception_ptr e, Answer a) {
                     if (!e) got[i] = a.status;
                   });
  }
  io.run();
  int wrong = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (got[i] != cases[i].expected) {
      ++wrong;
      std::printf("bad input '%s': got %d, expected %d\n", cases[i].what, got[i], cases[i].expected);
    }
  }
  std::printf("bad input: %zu/%zu requests refused with the right status\n",
              cases.size() - static_cast<std::size_t>(wrong), cases.size());
  return wrong == 0 ? 0 : 1;
}

std::string text(const json::value& body, const char* field) {
  const auto* obj = body.if_object();
  const auto* v = obj ? obj->if_contains(field) : nullptr;
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

std::string random_run_id() {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", url = "redis://127.0.0.1:6379", prefix = "checkout:";
  if (const char* env = std::getenv("REDIS_LOCK_URL")) url = env;
  unsigned short port = 8080;
  int requests = 400, orders = 50;
  std::string one;
  bool probe = false;
  std::int64_t one_amount = 1000;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--probe-bad-input") {
      probe = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "checkout_load: %s needs a value\n", arg.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (arg == "--host") host = value;
    else if (arg == "--port") port = static_cast<unsigned short>(std::atoi(value.c_str()));
    else if (arg == "--url") url = value;
    else if (arg == "--requests") requests = std::atoi(value.c_str());
    else if (arg == "--orders") orders = std::atoi(value.c_str());
    else if (arg == "--ledger-prefix") prefix = value;
    else if (arg == "--one") one = value;
    else if (arg == "--amount") one_amount = std::atoll(value.c_str());
    else {
      std::fprintf(stderr, "checkout_load: unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  if (orders < 1 || requests < orders) {
    std::fputs("checkout_load: need --orders >= 1 and --requests >= --orders\n", stderr);
    return 2;
  }
  const auto config = redis_lock::ConnectionConfig::from_url(url);
  if (!config) {
    std::fputs("checkout_load: --url is not a valid URL\n", stderr);
    return 2;
  }
  if (probe) return probe_bad_input({asio::ip::make_address(host), port});
  if (!one.empty()) {
    asio::io_context io;
    Answer answer;
    asio::co_spawn(io, post_checkout({asio::ip::make_address(host), port}, one, one_amount),
                   [&](std::exception_ptr e, Answer a) {
                     if (!e) answer = std::move(a);
                   });
    io.run();
    std::printf("%d %s\n", answer.status, json::serialize(answer.body).c_str());
    return answer.status == 0 ? 1 : 0;
  }
  const std::string run = random_run_id();
  const auto order_id = [&](int k) { return "run" + run + "-order-" + std::to_string(k); };
  const auto amount_of = [](int k) { return static_cast<std::int64_t>(1000 + k); };
  const asio::ip::tcp::endpoint target(asio::ip::make_address(host), port);

  // The storm: every request in flight at once, orders interleaved in a random order.
  std::vector<int> plan;
  for (int i = 0; i < requests; ++i) plan.push_back(i % orders);
  std::shuffle(plan.begin(), plan.end(), std::mt19937(std::random_device{}()));
  std::vector<Answer> answers(plan.size());
  asio::io_context io;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    asio::co_spawn(io, post_checkout(target, order_id(plan[i]), amount_of(plan[i])),
                   [&answers, i](std::exception_ptr e, Answer a) {
                     if (!e) answers[i] = std::move(a);
                   });
  }
  const auto started = std::chrono::steady_clock::now();
  io.run();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);

  std::map<int, int> by_status;
  std::map<std::string, std::vector<std::string>> charged_by_response;  // order -> charge ids
  int failures = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& a = answers[i];
    ++by_status[a.status];
    if (a.status == 201) charged_by_response[order_id(plan[i])].push_back(text(a.body, "charge_id"));
    if (a.status != 200 && a.status != 201 &&
        !(a.status == 409 && text(a.body, "error") == "order_in_progress")) {
      ++failures;
    }
  }

  // What the ledger says: exactly one charge per order of this run.
  checkout::Ledger ledger(*config, prefix);
  std::map<std::string, int> charges;
  for (const auto& id : ledger.all_charges()) {
    if (id.rfind("run" + run + "-", 0) == 0) ++charges[id];
  }
  int exactly_once = 0, double_charged = 0, missing = 0, wrong_amount = 0;
  for (int k = 0; k < orders; ++k) {
    const int n = charges.count(order_id(k)) ? charges[order_id(k)] : 0;
    if (n == 1) ++exactly_once;
    if (n > 1) ++double_charged;
    if (n == 0) ++missing;
    const auto stored = ledger.find(order_id(k));
    if (stored && stored->amount != amount_of(k)) ++wrong_amount;
  }

  // Afterwards, each order once more: the stored charge comes back, nothing is charged.
  asio::io_context again;
  std::vector<Answer> replays(orders);
  for (int k = 0; k < orders; ++k) {
    asio::co_spawn(again, post_checkout(target, order_id(k), amount_of(k)),
                   [&replays, k](std::exception_ptr e, Answer a) {
                     if (!e) replays[k] = std::move(a);
                   });
  }
  again.run();
  int replay_ok = 0;
  for (int k = 0; k < orders; ++k) {
    const auto stored = ledger.find(order_id(k));
    if (replays[k].status == 200 && stored &&
        text(replays[k].body, "charge_id") == stored->charge_id) {
      ++replay_ok;
    }
  }
  int responses_agree = 0;  // the one 201 of each order names the ledger's charge
  for (const auto& [id, ids] : charged_by_response) {
    const auto stored = ledger.find(id);
    if (ids.size() == 1 && stored && stored->charge_id == ids.front()) ++responses_agree;
  }

  std::printf("%d concurrent requests for %d orders in %lld ms:\n", requests, orders,
              static_cast<long long>(took.count()));
  const std::map<int, const char*> names = {{201, "201 Created      (charged now)"},
                                            {200, "200 OK           (already charged: replay)"},
                                            {409, "409 Conflict     (order in progress)"},
                                            {0, "no answer"}};
  for (const auto& [status, count] : by_status) {
    const auto it = names.find(status);
    std::printf("  %-44s %4d\n", it != names.end() ? it->second : std::to_string(status).c_str(),
                count);
  }
  std::printf("ledger: %d/%d orders charged exactly once, %d double charges, %d missing, "
              "%d wrong amounts\n",
              exactly_once, orders, double_charged, missing, wrong_amount);
  std::printf("201 responses matching the ledger: %d/%d; repeats afterwards answered with the "
              "stored charge: %d/%d\n",
              responses_agree, orders, replay_ok, orders);
  const bool ok = failures == 0 && exactly_once == orders && wrong_amount == 0 &&
                  replay_ok == orders && responses_agree == orders &&
                  by_status[201] == orders;
  std::printf("%s\n", ok ? "OK: every order charged exactly once"
                         : "FAILED: see the counts above");
  return ok ? 0 : 1;
}
