// SPDX-License-Identifier: MIT
// Test harness: a real Redis Cluster of redis-server processes on loopback (masters with one
// replica each), built with CLUSTER ADDSLOTSRANGE / MEET / REPLICATE, and its faults.
#pragma once

#include "redis_server.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace redis_lock::test {

class RedisCluster {
 public:
  /// How the slots are split among the masters: one contiguous range each, or slot i to
  /// master i % masters (16384 ranges, like a Cluster resharded slot by slot).
  enum class Slots { ranges, interleaved };
  /// Starts `masters` masters and `replicas_per_master` replicas each, and returns when
  /// every node reports cluster_state:ok and every replica is in sync.
  explicit RedisCluster(int masters = 3, int replicas_per_master = 1, Slots layout = Slots::ranges);
  ~RedisCluster();

  /// A configuration with every master as a seed (or only `seeds` of them).
  ConnectionConfig config(std::size_t seeds = 0) const;
  std::size_t size() const noexcept { return nodes_.size(); }
  RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  std::string node_id(std::size_t i) const;

  /// The index of the node that is master of `slot` now (asks the live nodes).
  std::size_t master_of(std::uint16_t slot) const;
  /// The index of a replica of master `master`.
  std::size_t replica_of(std::size_t master) const;
  /// Runs CLUSTER FAILOVER on `replica` and waits until it is master of its slots everywhere.
  void failover(std::size_t replica);
  /// Waits until every live node reports cluster_state:ok, every replica is in sync, and all
  /// live nodes see the same roles: the same masters with the same slots, the same replicas
  /// of the same masters, none of them flagged failed.
  void wait_healthy(std::chrono::milliseconds limit = std::chrono::seconds(20)) const;
  /// Moves `slot` from its master to `target` the way redis-cli --cluster reshard does
  /// (IMPORTING, MIGRATING, MIGRATE keys, SETSLOT NODE), calling `between` after the slot
  /// is marked migrating and importing and before any key moves, and again after half the
  /// keys moved.
  template <class Fn>
  void move_slot(std::uint16_t slot, std::size_t target, Fn&& between);

  bool is_master(std::size_t i) const;
  /// Node `i` (running) says it is a master serving `slot`.
  bool serves(std::size_t i, std::uint16_t slot) const;

  // The steps of move_slot, for tests that choose which key moves when.
  /// Marks `slot` IMPORTING on `target` and MIGRATING on `source` (its master).
  void begin_move(std::uint16_t slot, std::size_t source, std::size_t target);
  /// Moves up to `limit` keys of `slot` from `source` to `target` with MIGRATE.
  void migrate_keys(std::uint16_t slot, std::size_t source, std::size_t target, std::size_t limit);
  /// Moves the one key `key` (false if it no longer exists on `source`).
  bool migrate_key(std::size_t source, std::size_t target, const std::string& key);
  /// Gives `slot` to `target` on every master (CLUSTER SETSLOT NODE), ending the move.
  void end_move(std::uint16_t slot, std::size_t source, std::size_t target);

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::size_t masters_ = 0;
};

template <class Fn>
void RedisCluster::move_slot(std::uint16_t slot, std::size_t target, Fn&& between) {
  const auto source = master_of(slot);
  begin_move(slot, source, target);
  between();
  const auto total =
      redis_command(node(source).port(), {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)});
  migrate_keys(slot, source, target, std::max<std::size_t>(1, std::stoul(total) / 2));
  between();
  migrate_keys(slot, source, target, static_cast<std::size_t>(-1));
  end_move(slot, source, target);
}

}  // namespace redis_lock::test
