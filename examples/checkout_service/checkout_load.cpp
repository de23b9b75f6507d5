// SPDX-License-Identifier: MIT
// Fires a storm of concurrent checkouts at checkout_service, duplicates included, and retries
// every request as a client should (same order_id, after Retry-After) until it hears a final
// answer. Then it checks the outcome where it happened: the payment provider's own records
// (each order charged exactly once), the ledger (each order recorded once, with the provider's
// charge), and what the clients were told (one answer per order, the provider's).
//
//   checkout_load --port P --provider HOST:PORT --ledger-url URL [--host 127.0.0.1]
//                 [--requests 400] [--orders 50] [--run-id ID] [--prefix checkout:]
//                 [--retry-for-s 60] [--provider-concurrency N]
// With --provider-concurrency N it also checks, from the provider's own count, that never
// more than N charges were in flight at once (the service's bound); it prints the peak.
//   checkout_load --port P --probe-bad-input     malformed requests must get 400/404/405/413
//   checkout_load --port P --one ORDER_ID [--amount CENTS] [--currency EUR]
//                 one request: prints "<status>[ replayed][ retry-after=<s>] <body>"
//                 ("replayed" when it was one, Retry-After when it came with one)
//
// Order ids are "run<ID>-order-<k>"; --run-id lets a test arm provider faults for them first.
// Exit status 0 when everything held, 1 otherwise.
#include "http_call.hpp"

#include <redis_lock/idempotency.hpp>

#include <boost/asio/as_tuple.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using checkout::HttpAnswer;

namespace {

json::value parse_json(const std::string& text) {
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  return ec ? json::value{} : v;
}

std::string field(const json::value& body, const char* name) {
  const auto* obj = body.if_object();
  const auto* v = obj ? obj->if_contains(name) : nullptr;
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

asio::awaitable<HttpAnswer> post_checkout(asio::ip::tcp::endpoint target, std::string order_id,
                                          std::int64_t amount, std::string currency) {
  return checkout::http_call(
      target, http::verb::post, "/checkout",
      json::serialize(
          json::object{{"order_id", order_id}, {"amount", amount}, {"currency", currency}}),
      Clock::now() + 10s);
}

bool is_final(int status) { return status == 201 || status == 402 || status == 422; }

// A client that wants an answer: the same request again after Retry-After (or 200 ms when the
// service did not answer at all) until a final status or `give_up`. `first`: the first answer.
// Every answer the storm got (retries and the replays afterwards included), by status and
// whether it was a replay: what the service's checkout_responses_total must add up to.
std::map<std::pair<int, bool>, int> every_answer;

asio::awaitable<HttpAnswer> until_final(asio::ip::tcp::endpoint target, std::string order_id,
                                        std::int64_t amount, Clock::time_point give_up,
                                        HttpAnswer& first, int& attempts) {
  asio::steady_timer pause(co_await asio::this_coro::executor);
  for (;;) {
    ++attempts;
    HttpAnswer a = co_await post_checkout(target, order_id, amount, "EUR");
    ++every_answer[{a.status, a.replayed}];
    if (attempts == 1) first = a;
    if (is_final(a.status) || Clock::now() >= give_up) co_return a;
    pause.expires_after(a.retry_after > 0 ? std::chrono::milliseconds(a.retry_after * 1000)
                                          : 200ms);
    co_await pause.async_wait(asio::use_awaitable);
  }
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
      {"order_id not a string", http::verb::post, "/checkout", R"({"order_id": 7, "amount": 5})",
       400},
      {"order_id with a space", http::verb::post, "/checkout",
       R"({"order_id": "a b", "amount": 5})", 400},
      {"order_id too long", http::verb::post, "/checkout",
       R"({"order_id": ")" + std::string(129, 'x') + R"(", "amount": 5})", 400},
      {"amount zero", http::verb::post, "/checkout", R"({"order_id": "a", "amount": 0})", 400},
      {"amount negative", http::verb::post, "/checkout", R"({"order_id": "a", "amount": -3})", 400},
      {"amount not an integer", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 1.5})", 400},
      {"amount too large", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 10000000001})", 400},
      {"no currency", http::verb::post, "/checkout", R"({"order_id": "a", "amount": 5})", 400},
      {"a repeated key", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 1, "amount": 2, "currency": "EUR"})", 400},
      {"a repeated key, nested", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 1, "currency": "EUR", "x": {"k": 1, "k": 2}})", 400},
      {"currency lower case", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 5, "currency": "eur"})", 400},
      {"currency not a string", http::verb::post, "/checkout",
       R"({"order_id": "a", "amount": 5, "currency": 978})", 400},
      {"body over 8 KiB", http::verb::post, "/checkout", std::string(9000, ' '), 413},
      {"wrong method", http::verb::get, "/checkout", "", 405},
      {"unknown path", http::verb::post, "/nope", "{}", 404},
  };
  asio::io_context io;
  std::vector<int> got(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    asio::co_spawn(io,
                   checkout::http_call(target, cases[i].method, cases[i].path, cases[i].body,
                                       Clock::now() + 10s),
                   [&got, i](std::exception_ptr e, HttpAnswer a) {
                     if (!e) got[i] = a.status;
                   });
  }
  io.run();
  int wrong = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (got[i] != cases[i].expected) {
      ++wrong;
      std::printf("bad input '%s': got %d, expected %d\n", cases[i].what, got[i],
                  cases[i].expected);
    }
  }
  std::printf("bad input: %zu/%zu requests refused with the right status\n",
              cases.size() - static_cast<std::size_t>(wrong), cases.size());
  return wrong == 0 ? 0 : 1;
}

std::string random_run_id() {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", std::random_device{}());
  return buf;
}

struct Counts {
  int exactly_once = 0, doubled = 0, missing = 0;
};

void print_counts(const char* where, const Counts& c, int orders) {
  std::printf("%s: %d/%d orders charged exactly once, %d double charges, %d missing\n", where,
              c.exactly_once, orders, c.doubled, c.missing);
}

Counts count(const std::map<std::string, int>& per_order, const std::vector<std::string>& orders) {
  Counts c;
  for (const auto& id : orders) {
    const auto it = per_order.find(id);
    const int n = it == per_order.end() ? 0 : it->second;
    (n == 1 ? c.exactly_once : n == 0 ? c.missing : c.doubled)++;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // the ledger is read with hiredis (plain write(2))
  std::string host = "127.0.0.1", ledger_url, provider, prefix = "checkout:", run, one,
              currency = "EUR";
  unsigned short port = 8080;
  int requests = 400, orders = 50, retry_for_s = 60, provider_bound = 0;
  bool probe = false, no_ledger = false;
  std::int64_t one_amount = 1000;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--probe-bad-input") {
      probe = true;
      --i;
      continue;
    }
    if (arg == "--no-ledger") {  // the service ran --no-lock: the provider's key alone
      no_ledger = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "checkout_load: %s needs a value\n", arg.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (arg == "--host")
      host = value;
    else if (arg == "--port")
      port = static_cast<unsigned short>(std::atoi(value.c_str()));
    else if (arg == "--ledger-url")
      ledger_url = value;
    else if (arg == "--provider")
      provider = value;
    else if (arg == "--prefix")
      prefix = value;
    else if (arg == "--requests")
      requests = std::atoi(value.c_str());
    else if (arg == "--orders")
      orders = std::atoi(value.c_str());
    else if (arg == "--run-id")
      run = value;
    else if (arg == "--retry-for-s")
      retry_for_s = std::atoi(value.c_str());
    else if (arg == "--one")
      one = value;
    else if (arg == "--amount")
      one_amount = std::atoll(value.c_str());
    else if (arg == "--currency")
      currency = value;
    else if (arg == "--provider-concurrency")
      provider_bound = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "checkout_load: unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  const asio::ip::tcp::endpoint target(asio::ip::make_address(host), port);
  if (probe) return probe_bad_input(target);
  if (!one.empty()) {
    asio::io_context io;
    HttpAnswer answer;
    asio::co_spawn(io, post_checkout(target, one, one_amount, currency),
                   [&](std::exception_ptr e, HttpAnswer a) {
                     if (!e) answer = std::move(a);
                   });
    io.run();
    while (!answer.body.empty() && answer.body.back() == '\n') answer.body.pop_back();
    const std::string retry_after =
        answer.retry_after >= 0 ? " retry-after=" + std::to_string(answer.retry_after) : "";
    std::printf("%d%s%s %s\n", answer.status, answer.replayed ? " replayed" : "",
                retry_after.c_str(), answer.body.c_str());
    return answer.status == 0 ? 1 : 0;
  }
  const auto ledger_config = redis_lock::ConnectionConfig::from_url(ledger_url);
  const auto colon = provider.rfind(':');
  if (orders < 1 || requests < orders || !ledger_config || colon == std::string::npos) {
    std::fputs(
        "checkout_load: need --provider HOST:PORT, --ledger-url URL, --orders >= 1 and "
        "--requests >= --orders\n",
        stderr);
    return 2;
  }
  const asio::ip::tcp::endpoint provider_at(
      asio::ip::make_address(provider.substr(0, colon)),
      static_cast<unsigned short>(std::atoi(provider.c_str() + colon + 1)));
  if (run.empty()) run = random_run_id();
  std::vector<std::string> order_ids;
  for (int k = 0; k < orders; ++k) order_ids.push_back("run" + run + "-order-" + std::to_string(k));
  const auto amount_of = [](int k) { return static_cast<std::int64_t>(1000 + k); };

  // The provider's counters before the storm: what the storm cost it is the difference.
  const auto ask_provider = [&](const char* path) {
    asio::io_context pio;
    HttpAnswer answer;
    asio::co_spawn(pio,
                   checkout::http_call(provider_at, http::verb::get, path, "", Clock::now() + 10s),
                   [&](std::exception_ptr e, HttpAnswer a) {
                     if (!e) answer = std::move(a);
                   });
    pio.run();
    return answer;
  };
  const auto provider_stats = [&] {
    std::map<std::string, long long> out;
    const json::value stats = parse_json(ask_provider("/v1/stats").body);
    if (const auto* o = stats.if_object()) {
      for (const auto& [name, value] : *o) {
        if (value.is_number()) out[std::string(name)] = value.to_number<long long>();
      }
    }
    return out;
  };
  const auto stats_before = provider_stats();

  // The storm: every request in flight at once, orders interleaved in a random order, each
  // retried until it hears a final answer.
  std::vector<int> plan;
  for (int i = 0; i < requests; ++i) plan.push_back(i % orders);
  std::shuffle(plan.begin(), plan.end(), std::mt19937(std::random_device{}()));
  std::vector<HttpAnswer> first(plan.size()), last(plan.size());
  std::vector<int> attempts(plan.size());
  asio::io_context io;
  const auto give_up = Clock::now() + std::chrono::seconds(retry_for_s);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          last[i] = co_await until_final(target, order_ids[plan[i]], amount_of(plan[i]), give_up,
                                         first[i], attempts[i]);
        },
        asio::detached);
  }
  const auto started = Clock::now();
  io.run();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);

  std::map<int, int> by_status;                       // a replay counts under -status
  std::map<std::string, std::set<std::string>> told;  // order -> distinct final bodies
  int unfinished = 0, retries = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    ++by_status[first[i].replayed ? -first[i].status : first[i].status];
    retries += attempts[i] - 1;
    if (!is_final(last[i].status))
      ++unfinished;
    else
      told[order_ids[plan[i]]].insert(std::to_string(last[i].status) + " " + last[i].body);
  }

  // Afterwards, each order once more: the stored response comes back, marked as a replay.
  asio::io_context again;
  std::vector<HttpAnswer> replays(orders);
  for (int k = 0; k < orders; ++k) {
    asio::co_spawn(again, post_checkout(target, order_ids[k], amount_of(k), "EUR"),
                   [&replays, k](std::exception_ptr e, HttpAnswer a) {
                     if (e) return;
                     ++every_answer[{a.status, a.replayed}];
                     replays[k] = std::move(a);
                   });
  }
  again.run();

  // The provider's own records: succeeded charges per order of this run, the most charges
  // it ever worked on at once, and the calls the storm and its replays cost it.
  std::map<std::string, int> provider_charges;
  std::map<std::string, std::string> provider_id;
  const auto stats_after = provider_stats();
  const auto delta = [&](const char* name) {
    const auto a = stats_after.find(name);
    const auto b = stats_before.find(name);
    return (a == stats_after.end() ? 0 : a->second) - (b == stats_before.end() ? 0 : b->second);
  };
  const long long peak =
      stats_after.count("peak_in_flight") ? stats_after.at("peak_in_flight") : -1;
  {
    const HttpAnswer list = ask_provider("/v1/charges");
    const json::value all = parse_json(list.body);
    const auto* results = all.is_object() ? all.as_object().if_contains("results") : nullptr;
    if (list.status != 200 || !results || !results->is_array()) {
      std::printf("FAILED: the provider's records could not be read (HTTP %d)\n", list.status);
      return 1;
    }
    for (const auto& r : results->as_array()) {
      if (field(r, "status") != "succeeded") continue;
      const std::string ref = field(r, "reference");
      ++provider_charges[ref];
      provider_id[ref] = field(r, "id");
    }
  }
  // The ledger: each order's record, read through the component the service keeps them
  // with (a decided record is never overwritten: one charge recorded is what it says).
  std::map<std::string, redis_lock::RequestRecord> records;
  if (!no_ledger) {
    asio::io_context reading;
    redis_lock::LockManager store(reading.get_executor(), *ledger_config, {.key_prefix = prefix});
    redis_lock::IdempotencyOptions read_only;
    read_only.unchecked_store = true;  // (the service checked it)
    redis_lock::IdempotentRequests ledger(store, store, {}, read_only);
    asio::co_spawn(
        reading,
        [&]() -> asio::awaitable<void> {
          for (const auto& id : order_ids) {
            auto [ec, r] = co_await ledger.async_lookup(id, asio::as_tuple(asio::use_awaitable));
            if (!ec) records[id] = std::move(r);
          }
        },
        [&](std::exception_ptr) { reading.stop(); });
    reading.run();
  }
  std::map<std::string, int> ledger_charges;
  for (const auto& [id, r] : records) {
    if (r.state == redis_lock::RequestRecord::State::decided && r.response.status == 201) {
      ++ledger_charges[id];
    }
  }
  int ledger_agrees = 0, clients_agree = 0, replay_ok = 0;
  for (int k = 0; k < orders; ++k) {
    const auto& id = order_ids[k];
    const auto it = records.find(id);
    const redis_lock::RequestRecord* stored = it == records.end() ? nullptr : &it->second;
    const bool agrees =
        no_ledger ? provider_id.count(id) > 0
                  : stored && stored->state == redis_lock::RequestRecord::State::decided &&
                        provider_id.count(id) && stored->response.external_id == provider_id[id] &&
                        stored->fingerprint == std::to_string(amount_of(k)) + " EUR";
    ledger_agrees += agrees;
    const std::string truth =
        no_ledger ? (told[id].size() == 1 ? *told[id].begin() : "")
        : stored  ? std::to_string(stored->response.status) + " " + stored->response.body
                  : "";
    if (agrees && told[id].size() == 1 && *told[id].begin() == truth) ++clients_agree;
    if (agrees && replays[k].replayed &&
        std::to_string(replays[k].status) + " " + replays[k].body == truth) {
      ++replay_ok;
    }
  }

  std::printf("%d concurrent requests for %d orders in %lld ms (%d retries):\n", requests, orders,
              static_cast<long long>(took.count()), retries);
  const std::map<int, const char*> names = {{201, "201 Created      (charged)"},
                                            {-201, "201 Created      (replayed: charged before)"},
                                            {202, "202 Accepted     (outcome pending: retry)"},
                                            {409, "409 Conflict     (order in progress: retry)"},
                                            {503, "503 Unavailable  (not known yet: retry)"},
                                            {0, "no answer"}};
  std::printf("  first answers:\n");
  for (const auto& [status, n] : by_status) {
    const auto it = names.find(status);
    std::printf("    %-44s %4d\n", it != names.end() ? it->second : std::to_string(status).c_str(),
                n);
  }
  std::printf("  every answer (status, r: replayed):");
  for (const auto& [what, n] : every_answer) {
    std::printf(" %d%s=%d", what.first, what.second ? "r" : "", n);
  }
  std::printf("\n");
  const Counts at_provider = count(provider_charges, order_ids);
  const Counts in_ledger = count(ledger_charges, order_ids);
  print_counts("provider", at_provider, orders);
  std::printf(
      "provider calls: %lld charge requests (%lld answered 'key in use', %lld replayed), %lld "
      "lookups\n",
      delta("charge_requests"), delta("key_in_use"), delta("replays"), delta("lookups"));
  if (no_ledger) {
    std::printf("ledger: none kept (the service ran --no-lock)\n");
  } else {
    print_counts("ledger", in_ledger, orders);
  }
  std::printf(
      "%s: %d/%d; clients told that one outcome: %d/%d (%d never heard a final answer); "
      "repeats afterwards replayed byte for byte: %d/%d\n",
      no_ledger ? "orders with a charge at the provider"
                : "ledger records matching the provider's charge",
      ledger_agrees, orders, clients_agree, orders, unfinished, replay_ok, orders);
  bool bounded = true;
  if (provider_bound > 0) {
    bounded = peak >= 0 && peak <= provider_bound;
    std::printf("provider: at most %lld charges in flight at once (bound %d): %s\n", peak,
                provider_bound, bounded ? "within it" : "BOUND EXCEEDED");
  } else {
    std::printf("provider: at most %lld charges in flight at once since it started (not checked)\n",
                peak);
  }
  const bool ok = at_provider.exactly_once == orders &&
                  (no_ledger || in_ledger.exactly_once == orders) && ledger_agrees == orders &&
                  clients_agree == orders && unfinished == 0 && replay_ok == orders && bounded;
  std::printf("%s\n", ok ? "OK: every order charged exactly once, and every client told so"
                         : "FAILED: see the counts above");
  return ok ? 0 : 1;
}
