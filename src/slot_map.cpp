// SPDX-License-Identifier: MIT
#include "slot_map.hpp"

#include <utility>

namespace redis_lock::detail {

std::optional<std::vector<SlotMap::Range>> SlotMap::read(const Reply& reply) {
  // [[start, end, [host, port, id, ...], replica...], ...]
  if (reply.type != Reply::Type::array || reply.elements.empty()) return std::nullopt;
  std::vector<Range> ranges;
  ranges.reserve(reply.elements.size());
  for (const auto& range : reply.elements) {
    if (range.type != Reply::Type::array || range.elements.size() < 3) return std::nullopt;
    const auto& start = range.elements[0];
    const auto& end = range.elements[1];
    const auto& master = range.elements[2];
    if (start.type != Reply::Type::integer || end.type != Reply::Type::integer ||
        master.type != Reply::Type::array || master.elements.size() < 2 ||
        master.elements[0].type != Reply::Type::string ||
        master.elements[1].type != Reply::Type::integer) {
      return std::nullopt;
    }
    const auto last_slot = static_cast<long long>(slot_count) - 1;
    if (start.integer < 0 || end.integer > last_slot || start.integer > end.integer) {
      return std::nullopt;
    }
    if (master.elements[0].str == "?") continue;  // endpoint unknown: its slots stay unknown
    const auto port = master.elements[1].integer;
    if (port <= 0 || port > 65535) return std::nullopt;
    ranges.push_back(Range{static_cast<std::uint16_t>(start.integer),
                           static_cast<std::uint16_t>(end.integer),
                           Endpoint{master.elements[0].str, static_cast<std::uint16_t>(port)}});
  }
  return ranges;
}

SlotMap::Action SlotMap::refresh(Clock::time_point now, std::size_t nodes) noexcept {
  if (loading_) {
    again_ = true;  // one more after it: this one may have been asked before the change
    return {};
  }
  if (last_load_ != Clock::time_point{} && now < last_load_ + min_interval_) {
    // Just loaded: load again when the interval is over (a failover is in progress, or a
    // burst of redirections all report the same change).
    if (waiting_) return {};
    waiting_ = true;
    return {.kind = Action::Kind::wait, .until = last_load_ + min_interval_};
  }
  loading_ = true;
  last_load_ = now;
  tried_ = 0;
  return ask(now, nodes);
}

SlotMap::Action SlotMap::timer_over(Clock::time_point now, std::size_t nodes) noexcept {
  waiting_ = false;
  return refresh(now, nodes);
}

SlotMap::Action SlotMap::ask(Clock::time_point now, std::size_t nodes) noexcept {
  if (tried_ >= nodes) return done(now, nodes);  // nobody answered; traffic retries
  current_ = ++queries_;
  return {.kind = Action::Kind::query, .node = next_candidate_++ % nodes, .query = current_};
}

SlotMap::Action SlotMap::failed(std::uint64_t query, Clock::time_point now,
                                std::size_t nodes) noexcept {
  if (!loading_ || query != current_) return {};
  ++tried_;
  return ask(now, nodes);
}

SlotMap::Action SlotMap::applied(std::uint64_t query, std::size_t from,
                                 const std::vector<Owned>& ranges, Clock::time_point now,
                                 std::size_t nodes) {
  if (fresh(query)) {
    std::vector<std::int32_t> slots(slot_count, unknown);
    for (const auto& r : ranges) {
      for (std::size_t s = r.first; s <= r.last; ++s) slots[s] = static_cast<std::int32_t>(r.node);
    }
    slots_ = std::move(slots);
    applied_ = query;
    fallback_ = from;
  }
  if (!loading_ || query != current_) return {};  // a late map: the load went on without it
  return done(now, nodes);
}

SlotMap::Action SlotMap::done(Clock::time_point now, std::size_t nodes) noexcept {
  loading_ = false;
  first_done_ = true;
  Action act;
  if (again_) {
    again_ = false;
    act = refresh(now, nodes);
  }
  act.release = true;
  return act;
}

}  // namespace redis_lock::detail
