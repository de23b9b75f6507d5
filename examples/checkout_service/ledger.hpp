// SPDX-License-Identifier: MIT
// The protected resource of the checkout example: a payment ledger in Redis that accepts a
// write only from the newest lock holder of an order (fencing), and remembers each order's
// charge so that a repeated request gets the stored result instead of a second charge.
//
// It is a plain blocking hiredis client, as the SDKs of many real ledgers and payment
// providers are: the service calls it on a thread pool, never on its I/O thread.
#pragma once

#include <redis_lock/config.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct redisContext;

namespace checkout {

struct Charge {
  std::string order_id;
  std::int64_t amount = 0;  // in cents
  std::string charge_id;
  std::uint64_t fencing_token = 0;
};

/// A Redis command failed or the ledger could not be reached.
struct LedgerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Ledger {
 public:
  /// Keys: `<prefix>order:<id>` (the charge), `<prefix>fence:<id>` (the newest fencing token
  /// that touched the order), `<prefix>charges` (every charge ever written, in order).
  Ledger(redis_lock::ConnectionConfig config, std::string prefix);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  enum class Outcome { go_ahead, already_charged, stale };
  struct Result {
    Outcome outcome;
    std::optional<Charge> existing;  // with already_charged
  };

  /// Called first, under the order's lock: the stored charge if there is one; otherwise
  /// records `fence` as the order's newest token (a token not above the newest is stale).
  Result begin(const std::string& order_id, std::uint64_t fence);

  /// Writes the charge unless a newer token began on this order meanwhile (then stale: this
  /// holder's lock had expired) or the order is charged already.
  Result commit(const Charge& charge);

  /// The order ids of every charge in `<prefix>charges` (for checkers).
  std::vector<std::string> all_charges();
  std::optional<Charge> find(const std::string& order_id);

 private:
  struct Connection;
  std::unique_ptr<Connection> take();
  void give_back(std::unique_ptr<Connection> c);
  std::vector<std::string> eval(const char* script, const std::vector<std::string>& keys,
                                const std::vector<std::string>& args);

  redis_lock::ConnectionConfig config_;
  std::string prefix_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace checkout
