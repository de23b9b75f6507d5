// SPDX-License-Identifier: MIT
// Layer 3 (topology), no I/O: a Cluster's slot map, what a CLUSTER SLOTS reply says, and
// when the map is loaded again. The Router is the driver: it sends the queries, keeps the
// nodes' connections and feeds the answers back. tests/unit/slot_map_test.cpp runs it
// through tables with a fake clock.
#pragma once

#include "keys.hpp"
#include "resp.hpp"

#include <redis_lock/config.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace redis_lock::detail {

/// Which node serves each slot, and the loads of the map: one query at a time, to one node
/// at a time (in turn, starting after the node asked last, so a dead node is not asked
/// first every time), at most one load per `min_interval`.
///
// clang-format off
/// | event                           | when                                | action                   |
/// |---------------------------------|-------------------------------------|--------------------------|
/// | `refresh` (a map is wanted)     | a load under way                    | none; another after it   |
/// |                                 | the last load began < interval ago  | wait for its end (once)  |
/// |                                 | otherwise                           | query the next node      |
/// | `timer_over`                    | the wait ended                      | as `refresh`             |
/// | `failed(q)` (no answer, no map) | q is the load's query, nodes left   | query the next node      |
/// |                                 | q is the load's query, all asked    | done (3)                 |
/// | `applied(q)` (a map taken)      | q is the load's query               | done (3)                 |
/// | `fresh(q)` (a map arrived)      | a later query's map is in           | false: not applied (1)   |
/// | `moved(slot, node)`             |                                     | the slot's owner now (2) |
// clang-format on
///
/// (1) A query's reply that comes after its timeout (Router's LateMap) is still applied,
/// unless a later query's map already was.
/// (2) And a load is wanted: the rest of the map is likely stale too.
/// (3) The load is over: commands that waited for the first map go (`release`), and a load
/// wanted meanwhile starts (`refresh`'s action, in the same Action).
class SlotMap {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::int32_t unknown = -1;

  /// One range of slots and its master, as CLUSTER SLOTS names it (an empty host: the node
  /// that answered).
  struct Range {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    Endpoint master;
  };
  /// The ranges of a CLUSTER SLOTS reply whose master is known (a master shown as "?" is
  /// left out: its slots stay unknown), or none when the reply is no map.
  static std::optional<std::vector<Range>> read(const Reply& reply);

  /// A range of slots given to a node, by its index in the driver's list of nodes.
  struct Owned {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    std::size_t node = 0;
  };

  struct Action {
    enum class Kind { none, query, wait };
    Kind kind = Kind::none;
    std::size_t node = 0;       ///< query: the node to ask
    std::uint64_t query = 0;    ///< query: its number (the answer's events name it)
    Clock::time_point until{};  ///< wait: arm the timer, then timer_over
    bool release = false;       ///< the load ended: send the commands that waited for it
  };

  explicit SlotMap(std::chrono::milliseconds min_interval) noexcept
      : min_interval_(min_interval), slots_(slot_count, unknown) {}

  /// The node serving `slot`, or `unknown`.
  std::int32_t owner(std::uint16_t slot) const noexcept { return slots_[slot]; }
  /// A node that answered the last map query (the seed before any): where a command goes
  /// whose slot's owner is unknown (its MOVED says where to go).
  std::size_t fallback() const noexcept { return fallback_; }
  /// No map came yet, and the first load is under way or not begun: a command whose slot
  /// is unknown waits for it instead of going to a seed that may answer MOVED.
  bool before_first_map() const noexcept { return !first_done_; }
  bool loading() const noexcept { return loading_; }

  Action refresh(Clock::time_point now, std::size_t nodes) noexcept;
  Action timer_over(Clock::time_point now, std::size_t nodes) noexcept;
  Action failed(std::uint64_t query, Clock::time_point now, std::size_t nodes) noexcept;
  /// Whether query `query`'s map is still worth applying (no later query's map is in).
  bool fresh(std::uint64_t query) const noexcept { return query >= applied_; }
  /// Query `query`'s map, from node `from`, given its nodes: applied (when fresh).
  Action applied(std::uint64_t query, std::size_t from, const std::vector<Owned>& ranges,
                 Clock::time_point now, std::size_t nodes);
  void moved(std::uint16_t slot, std::size_t node) noexcept {
    slots_[slot] = static_cast<std::int32_t>(node);
  }

 private:
  Action ask(Clock::time_point now, std::size_t nodes) noexcept;
  Action done(Clock::time_point now, std::size_t nodes) noexcept;

  std::chrono::milliseconds min_interval_;
  std::vector<std::int32_t> slots_;
  std::size_t fallback_ = 0;
  std::uint64_t queries_ = 0;  // sent, numbered from 1
  std::uint64_t applied_ = 0;  // the query whose map slots_ holds
  std::uint64_t current_ = 0;  // the load's query under way
  std::size_t tried_ = 0;      // nodes the load under way asked
  std::size_t next_candidate_ = 0;
  bool loading_ = false;
  bool again_ = false;       // a load was wanted during this one
  bool first_done_ = false;  // the first load ended (whatever its outcome)
  bool waiting_ = false;     // the timer is armed
  Clock::time_point last_load_{};
};

}  // namespace redis_lock::detail
