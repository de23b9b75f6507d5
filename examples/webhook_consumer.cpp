// SPDX-License-Identifier: MIT
// A webhook consumer that applies each delivery once. The sender retries: every delivery
// arrives three times, two of them at once, on two consumers (two LockManagers, as two
// processes would have). Applying a delivery credits an account (an effect that is not
// idempotent: a second application would credit twice). IdempotentRequests keys each
// application by the delivery's id, replays the answer to the duplicates, and, when an
// application's outcome is unknown (here: one consumer "crashes" after applying and before
// answering), looks it up before anything is applied again.
//
//   webhook_consumer [redis://127.0.0.1:6379] [--unchecked-store]
// The records' store must be durable (appendonly yes, appendfsync always, noeviction);
// --unchecked-store runs on a server that is not (a test server). Exit 0 when every delivery
// was applied exactly once; 2 when the store is refused at start-up (it says why).
#include <redis_lock/idempotency.hpp>

#include <hiredis/hiredis.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

/// The account the deliveries credit: a plain Redis client (it could be any database). One
/// script applies a credit and remembers which delivery attempt applied it, at once.
struct Account {
  redisContext* c;
  std::string balance, applied;
  Account(const redis_lock::ConnectionConfig& cfg, const std::string& name)
      : c(redisConnect(cfg.host.c_str(), cfg.port)),
        balance("webhook:" + name + ":balance"),
        applied("webhook:" + name + ":applied") {
    if (c == nullptr || c->err) throw std::runtime_error("cannot reach the account's Redis");
  }
  ~Account() { redisFree(c); }
  std::string run(std::vector<std::string> words) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& w : words) {
      argv.push_back(w.data());
      lens.push_back(w.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) throw std::runtime_error("account failed");
    std::string out = r->type == REDIS_REPLY_INTEGER ? std::to_string(r->integer)
                      : r->str != nullptr            ? std::string(r->str, r->len)
                                                     : "";
    freeReplyObject(r);
    return out;
  }
  /// Credits `amount` for the attempt `attempt_key`; returns the new balance.
  std::string credit(const std::string& attempt_key, int amount) {
    return run({"EVAL",
                "local b = redis.call('INCRBY', KEYS[1], ARGV[2]) "
                "redis.call('HSET', KEYS[2], ARGV[1], b) return b",
                "2", balance, applied, attempt_key, std::to_string(amount)});
  }
  /// What the attempt `attempt_key` did, if anything: the balance it left.
  std::string looked_up(const std::string& attempt_key) {
    return run({"HGET", applied, attempt_key});
  }
};

struct Delivery {
  std::string id;
  int amount;
};

}  // namespace

int main(int argc, char** argv) {
  std::string url =
      std::getenv("REDIS_LOCK_URL") ? std::getenv("REDIS_LOCK_URL") : "redis://127.0.0.1:6379";
  bool unchecked = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--unchecked-store") {
      unchecked = true;
    } else {
      url = arg;
    }
  }
  const auto cfg = redis_lock::ConnectionConfig::from_url(url);
  if (!cfg) {
    std::fprintf(stderr, "bad URL %s\n", url.c_str());
    return 2;
  }
  const std::string run_id = std::to_string(std::rand() ^ static_cast<int>(::time(nullptr)));
  Account account(*cfg, run_id);

  asio::io_context io;
  redis_lock::IdempotencyOptions options;
  options.lock_prefix = "webhook:";
  options.unchecked_store = unchecked;
  // The consumer's own lookup of an attempt whose outcome it does not know.
  const auto resolve = [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
    const auto balance = account.looked_up(a.downstream_key);
    done(balance.empty() ? redis_lock::AttemptOutcome::not_executed()
                         : redis_lock::AttemptOutcome::decided({200, "applied " + balance, ""}));
  };
  // Two consumers, as two processes.
  redis_lock::LockManager locks_a(io.get_executor(), *cfg), locks_b(io.get_executor(), *cfg);
  redis_lock::IdempotentRequests consumer_a(locks_a, resolve, options);
  redis_lock::IdempotentRequests consumer_b(locks_b, resolve, options);

  std::vector<Delivery> deliveries;
  for (int i = 0; i < 10; ++i) deliveries.push_back({run_id + "-evt-" + std::to_string(i), 10 + i});
  std::map<std::string, int> told;  // what the sender heard, by answer
  int failed = 0;
  bool crashed_once = false;

  const auto deliver = [&](redis_lock::IdempotentRequests& consumer,
                           const Delivery& d) -> asio::awaitable<void> {
    auto [ec, r] = co_await consumer.async_run(
        d.id, std::to_string(d.amount),  // the fingerprint: a replay with another amount is refused
        [&](const redis_lock::Attempt& a, redis_lock::AttemptHandler done) {
          // (A blocking call keeps the example short; a service would make it asynchronous.)
          const auto balance = account.credit(a.downstream_key, d.amount);
          if (!crashed_once) {
            // As if this consumer died after applying and before answering: the outcome is
            // unknown, and the next duplicate must look it up, not apply it again.
            crashed_once = true;
            return done(redis_lock::AttemptOutcome::unknown());
          }
          done(redis_lock::AttemptOutcome::decided({200, "applied " + balance, ""}));
        },
        asio::as_tuple(asio::use_awaitable));
    if (ec) {
      std::fprintf(stderr, "  %s: %s\n", d.id.c_str(), ec.message().c_str());
      ++failed;
      co_return;
    }
    ++told[redis_lock::run_result_name(r.kind)];
  };

  bool refused = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // The start-up gate: a store that could lose a record (or the consumer's own
        // misconfiguration) stops the consumer before it takes any delivery.
        auto [store_ec] =
            co_await consumer_a.async_check_store(asio::as_tuple(asio::use_awaitable));
        if (store_ec) {
          std::fprintf(stderr, "the store is refused: %s (%s)\n", store_ec.message().c_str(),
                       consumer_a.store_problem().c_str());
          refused = true;
          co_return;
        }
        for (const auto& d : deliveries) {
          // Two copies at once, on the two consumers...
          co_await (deliver(consumer_a, d) && deliver(consumer_b, d));
          // ...and the sender's retry.
          co_await deliver(consumer_a, d);
        }
      },
      asio::detached);
  io.run();
  if (refused) return 2;

  int expected = 0;
  for (const auto& d : deliveries) expected += d.amount;
  const auto balance = account.run({"GET", account.balance});
  std::printf("deliveries: %zu, each sent 3 times\n", deliveries.size());
  for (const auto& [answer, n] : told) std::printf("  answered %-12s %d\n", answer.c_str(), n);
  std::printf("balance %s, expected %d (each delivery applied once)\n", balance.c_str(), expected);
  account.run({"DEL", account.balance, account.applied});
  if (failed > 0) {
    std::fprintf(stderr,
                 "%d deliveries failed (a store that is not durable? see "
                 "--unchecked-store)\n",
                 failed);
    return 1;
  }
  return balance == std::to_string(expected) ? 0 : 1;
}
