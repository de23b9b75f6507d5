// SPDX-License-Identifier: MIT
// The checkout example's own record of every order, kept in a Redis of its own (not the lock's:
// see README), run with `appendonly yes`, `appendfsync always` and `maxmemory-policy
// noeviction`, so that an answered write survives a crash and is never evicted.
//
// An order goes through two states:
//   pending  written before the payment provider is called: {order, amount, currency,
//            idempotency key, the writer's fencing token}. Whoever finds it later (a retry, the
//            reconciler) calls the provider again with the same key: the provider answers with
//            the first call's result instead of charging twice.
//   final    the provider's answer and the exact HTTP response the client was (or will be)
//            given; kept for `retention`, then forgotten (a retry after that is a new order).
// Every final record is also appended to a capped stream, `<prefix>journal`, for checkers.
//
// It is a plain blocking hiredis client, as the SDKs of many real ledgers are: the service
// calls it on a thread pool, never on its I/O thread. A broken connection is replaced and the
// command sent once more (every command here is safe to repeat).
#pragma once

#include <redis_lock/config.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace checkout {

struct Record {
  std::string state;  // "pending" or "final"
  std::string order_id;
  std::int64_t amount = 0;  // in minor units (cents)
  std::string currency;
  std::string idempotency_key;
  std::uint64_t fence = 0;  // the newest fencing token that began on this order
  // final only: the response (status and JSON body, byte for byte) and the provider's charge id
  int status = 0;
  std::string body;
  std::string charge_id;
};

/// The ledger could not be reached or answered with an error.
struct LedgerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Ledger {
 public:
  /// Keys: `<prefix>order:<id>` (the record), `<prefix>pending` (sorted set: orders with a
  /// pending attempt, by when it was written), `<prefix>journal` (stream of final records).
  Ledger(redis_lock::ConnectionConfig config, std::string prefix,
         std::chrono::milliseconds retention = std::chrono::hours(24));
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  std::optional<Record> find(const std::string& order_id);

  enum class Begun {
    go_ahead,  ///< a pending attempt was written with `key`: call the provider with it
    resume,    ///< a pending attempt existed (record.idempotency_key): call with that key
    final,     ///< the order is decided: record holds the response to replay
    stale,     ///< a newer lock holder began on this order: stand down
  };
  struct BeginResult {
    Begun outcome;
    Record record;
  };
  /// Under the order's lock, before calling the provider. `fence` is the lock's fencing token;
  /// a token below the newest one that began is stale (the holder's lease ran out and someone
  /// else took the order over).
  BeginResult begin(const std::string& order_id, std::int64_t amount, const std::string& currency,
                    std::uint64_t fence, const std::string& key);

  /// Records the provider's answer for `key` as the order's final result. Accepted while the
  /// order's pending attempt carries that key, whoever holds the lock now (the provider gives
  /// every caller of a key the same answer); returns the final record either way.
  Record finish(const std::string& order_id, const std::string& key, int status,
                const std::string& body, const std::string& charge_id);

  /// Orders whose pending attempt is older than `min_age` (by the ledger server's clock),
  /// oldest (or least recently postponed) first.
  std::vector<std::string> overdue(std::chrono::milliseconds min_age, std::size_t limit);
  /// Claims a reconcile retry of `order_id` if it is still pending and overdue (no other
  /// worker retried it within `min_age`), and moves it back in overdue()'s line: its n-th
  /// retry delays the next by min(base * (2^(n-1) - 1), cap) beyond `min_age`. Empty when
  /// there is nothing to retry.
  struct Retry {
    int n = 0;
    std::chrono::milliseconds delay{0};
  };
  std::optional<Retry> claim_retry(const std::string& order_id, std::chrono::milliseconds min_age,
                                   std::chrono::milliseconds base, std::chrono::milliseconds cap);

  /// Every (order id, charge id, status) in the journal, oldest first (for checkers).
  struct Entry {
    std::string order_id, charge_id;
    int status = 0;
  };
  std::vector<Entry> journal();

 private:
  struct Connection;
  std::unique_ptr<Connection> take();
  void give_back(std::unique_ptr<Connection> c);
  std::vector<std::string> run(const std::vector<std::string>& command);

  redis_lock::ConnectionConfig config_;
  std::string prefix_;
  std::chrono::milliseconds retention_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace checkout
