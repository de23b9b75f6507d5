// SPDX-License-Identifier: MIT
// Layer 4 (engine): the idempotent requests' record on its store (docs/design/idempotency.md):
// where each request's record and its shard's indexes are, one call per script of
// src/scripts/idem_*.lua, and what their replies say (read_store_reply, sans-io). The
// transitions the scripts make are src/idempotency_record.hpp's, row by row.
#pragma once

#include "idempotency_record.hpp"
#include "resp.hpp"

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail {
class Engine;
}  // namespace redis_lock::detail

namespace redis_lock::detail::idempotency {

/// The shard of request key `key` among `shards` (FNV-1a: the same on every client).
unsigned shard_of(std::string_view key, unsigned shards) noexcept;

/// The keys one request's scripts touch, all in one Cluster slot (its shard's hash tag).
struct StoreKeys {
  std::string record;     ///< <prefix>idem:{s<n>}<key>: the record (hash)
  std::string due;        ///< <prefix>idem:due:{s<n>}: when the reconciler looks (zset)
  std::string escalated;  ///< <prefix>idem:esc:{s<n>}: escalated requests (zset)
};
StoreKeys store_keys(std::string_view prefix, std::string_view key, unsigned shards);
/// The keys of shard `shard` (its record key for `key`).
StoreKeys shard_keys(std::string_view prefix, unsigned shard, std::string_view key = {});

using StoreHandler = std::function<void(boost::system::error_code, StoreReply)>;

/// How many replicas must have a write before it counts (WAIT), and how long to wait.
struct Replicas {
  int count = 0;
  std::chrono::milliseconds timeout{0};
};

/// One call of each script (idem_*.lua) on `store`, from any thread; `done` on the store's
/// strand. A server's error reply comes as its error code (out_of_memory, read_only, ...)
/// and the manager's last_server_error(); a malformed reply as unexpected_reply. A write
/// that too few replicas confirmed comes as not_replicated with the script's reply (the
/// master ran it).
class StoreCalls {
 public:
  /// `replicas`: every write (not a look, a listing, the reconciler's claim or the shard
  /// count's check) is confirmed by WAIT; fewer replicas: not_replicated.
  StoreCalls(std::shared_ptr<Engine> store, unsigned shards, Replicas replicas = {})
      : store_(std::move(store)), shards_(shards), replicas_(replicas) {}

  void look(const std::string& key, StoreHandler done);
  /// `resume`: the reconciler's begin (Resume), with no fingerprint; with `resend` its reply
  /// carries the request's payload when one is kept. A request's `payload` (if any) is kept
  /// while the request is undecided.
  void begin(const std::string& key, const std::string& fingerprint, std::uint64_t fence,
             std::int64_t first_look_ms, bool resume, bool resend,
             const std::optional<std::string>& payload, StoreHandler done);
  void void_attempt(const std::string& key, const std::string& downstream_key, std::uint64_t fence,
                    StoreHandler done);
  void next(const std::string& key, const std::string& downstream_key, std::uint64_t fence,
            std::int64_t first_look_ms, StoreHandler done);
  void escalate(const std::string& key, const std::string& downstream_key, std::uint64_t fence,
                std::int64_t min_age_ms, StoreHandler done);
  void defer(const std::string& key, const std::string& downstream_key, std::uint64_t fence,
             std::int64_t base_ms, std::int64_t cap_ms, StoreHandler done);
  void decide(const std::string& key, const std::string& fingerprint, std::uint32_t attempt,
              const std::string& downstream_key, int status, const std::string& body,
              const std::string& external_id, std::int64_t retention_ms, StoreHandler done);
  /// An operator's word on an escalated request (idem_settle.lua, idem_reopen.lua).
  void settle(const std::string& key, int status, const std::string& body,
              const std::string& external_id, std::int64_t retention_ms, StoreHandler done);
  void reopen(const std::string& key, StoreHandler done);
  /// Up to `limit` keys of shard `shard`'s escalated index, oldest first (idem_list.lua).
  void escalated(unsigned shard, std::size_t limit,
                 std::function<void(boost::system::error_code, DueKeys)> done);
  /// Claims up to `limit` due keys of `shard` for `claim_ms` (idem_due.lua).
  void due(unsigned shard, std::size_t limit, std::int64_t claim_ms,
           std::function<void(boost::system::error_code, DueKeys)> done);
  /// The store's number of shards (idem_shards.lua: set by the first client to ask): "" when
  /// it is this client's, else what is wrong.
  void check_shards(std::function<void(boost::system::error_code, std::string)> done);
  /// On the node of each shard: `settings`, CONFIG GET of what makes the store durable;
  /// `replicas` > 0, INFO replication's connected replicas. What is missing ("appendonly is
  /// no, needs yes", "1 replica(s) connected, 2 asked for"); an error when it cannot be read
  /// (NOPERM).
  void check_durability(
      bool settings, int replicas,
      std::function<void(boost::system::error_code, std::vector<std::string>)> done);

 private:
  /// A record's script (script_table.hpp's Idem*), confirmed by WAIT but a look.
  template <class Call>
  void call(Call script, StoreHandler done);
  /// An index's listing (IdemList, IdemDue), never confirmed.
  template <class Call>
  void list(Call script, std::function<void(boost::system::error_code, DueKeys)> done);
  std::shared_ptr<Engine> store_;
  unsigned shards_;
  Replicas replicas_;
};

}  // namespace redis_lock::detail::idempotency
