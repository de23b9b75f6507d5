// SPDX-License-Identifier: MIT
// The checkout example's own record of every order, kept in a Redis of its own (not the lock's:
// see docs/guide.md), which must run with `appendonly yes`, `appendfsync always` and
// `maxmemory-policy noeviction` (check_durability() says what is missing), so that an answered
// write survives a crash and is never evicted; with replicas, writes wait for them (WAIT).
//
// The payment provider's idempotency key is derived from the order, never drawn at random:
// `<prefix><order id>/<attempt>`, attempt 1 first. A new attempt (a new key) is made only after
// a definite failure of the last one at the provider. So a ledger that forgets a record (a
// failover to a replica that had not received it, a restore from an older backup) cannot make
// a second charge: the retry calls the provider with the same key and gets the first charge
// back, for as long as the provider keeps the key (about 24 h at the common ones).
//
// An order's record is in one of four states:
//   pending    an attempt that may have reached the provider: {order, amount, currency,
//              attempt, key, the newest fencing token that began on it, when the attempt
//              began}. Whoever finds it later (a retry, the reconciler) looks the key up at
//              the provider before anything else.
//   void       the last attempt is known not to have reached the provider (never sent, or
//              not executed there): nothing was charged by it; the next request begins again
//              with the same key.
//   final      the provider's answer and the exact HTTP response the client was (or will be)
//              given. Kept for good: the order's financial record (refunds, disputes).
//   escalated  the attempt's outcome could not be learnt within the provider's key window:
//              nothing retries it; a person looks it up and resolves it.
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
  std::string state;  // "pending", "void", "final" or "escalated"
  std::string order_id;
  std::int64_t amount = 0;  // in minor units (cents)
  std::string currency;
  int attempt = 0;
  std::string idempotency_key;  // the attempt's
  std::uint64_t fence = 0;      // the newest fencing token that began on this order
  std::int64_t began_ms = 0;    // when the attempt began (the ledger server's clock, unix ms)
  // final only: the response (status and JSON body, byte for byte) and the provider's charge id
  int status = 0;
  std::string body;
  std::string charge_id;
};

/// The ledger could not be reached, answered with an error, or (with replicas) did not get a
/// write acknowledged by them in time.
struct LedgerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LedgerOptions {
  /// Every write waits until this many replicas acknowledged it (WAIT), or fails.
  int replicas = 0;
  std::chrono::milliseconds replica_timeout{1000};
};

class Ledger {
 public:
  /// Keys: `<prefix>order:<id>` (the record), `<prefix>pending` (sorted set: orders with a
  /// pending attempt, by when it is next due), `<prefix>escalated` (sorted set: by when),
  /// `<prefix>journal` (stream of final records).
  Ledger(redis_lock::ConnectionConfig config, std::string prefix, LedgerOptions options = {});
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  /// What the ledger server lacks for the durability this ledger needs (empty: nothing):
  /// appendonly yes, appendfsync always, maxmemory-policy noeviction, and the replicas asked
  /// for. A server that refuses CONFIG GET is reported too.
  std::vector<std::string> check_durability();

  std::optional<Record> find(const std::string& order_id);

  enum class Begun {
    go_ahead,   ///< a pending attempt was written (or a void one taken up): call the provider
    resume,     ///< a pending attempt existed: look its key up before calling again
    final,      ///< the order is decided: record holds the response to replay
    escalated,  ///< a person must decide this order
    stale,      ///< a newer lock holder began on this order: stand down
  };
  struct BeginResult {
    Begun outcome;
    Record record;
  };
  /// Under the order's lock, before calling the provider. `fence` is the lock's fencing token;
  /// a token below the newest one that began is stale (the holder's lease ran out and someone
  /// else took the order over).
  BeginResult begin(const std::string& order_id, std::int64_t amount, const std::string& currency,
                    std::uint64_t fence);

  /// Records the provider's answer for `key` as the order's final result. Accepted while the
  /// order's attempt carries that key (pending, void or escalated), whoever holds the lock now
  /// (the provider gives every caller of a key the same answer), and also when the ledger has
  /// no record of the order at all (it lost it: the provider's answer is the truth). Returns
  /// the final record either way; `first` is false when it was already final.
  struct Finished {
    Record record;
    bool first = false;
  };
  Finished finish(const Record& attempt, int status, const std::string& body,
                  const std::string& charge_id);

  /// The attempt `key` did not reach the provider (or was not executed there): its record
  /// becomes void, unless a newer holder than `fence` began on it. True when it did.
  bool make_void(const std::string& order_id, const std::string& key, std::uint64_t fence);
  /// The attempt `key` failed for good at the provider without a charge: the order's next
  /// attempt, with a new key, under the same lock. Empty when the record moved on.
  std::optional<Record> next_attempt(const std::string& order_id, const std::string& key,
                                     std::uint64_t fence);
  /// The attempt `key` is past what the reconciler may decide: a person must.
  bool escalate(const std::string& order_id, const std::string& key, std::uint64_t fence);

  /// Escalated orders, oldest first.
  std::vector<Record> escalated();
  /// A person's decision on an escalated order: recorded as final with this response, or
  /// (`charged` false) reopened as void with a new attempt, so that the client's next retry
  /// charges it under a key the provider has never seen. False when it was not escalated.
  bool resolve(const std::string& order_id, int status, const std::string& body,
               const std::string& charge_id);
  bool reopen(const std::string& order_id);

  /// Orders whose pending attempt is due (older than `min_age` by the ledger server's clock,
  /// or than its postponement), oldest first.
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
  /// How long until the reconciler next looks at the pending order (0 if due or not pending).
  std::chrono::milliseconds due_in(const std::string& order_id, std::chrono::milliseconds min_age);

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
  std::vector<std::string> run(const std::vector<std::string>& command, bool write = false);
  std::string key_base(const std::string& order_id) const;

  redis_lock::ConnectionConfig config_;
  std::string prefix_;
  LedgerOptions options_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace checkout
