// SPDX-License-Identifier: MIT
// Layer 4 (engine): one async_acquire_all: the mutexes of several resources, all or none.
// They are taken in one global order (slot, then name), so that callers whose sets overlap
// never wait for each other in a circle. The resources of one slot go in one script when
// all are free (acquire_group.lua); otherwise, and across slots, one by one with ordinary
// acquires, which wait fairly in each queue. A failure, a resource still held when the wait
// runs out, or a cancellation gives back everything taken before completing.
#pragma once

#include "pending.hpp"
#include "script_op.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/detail/grant.hpp>
#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/initiations.hpp>

#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace redis_lock::detail {

/// The order in which async_acquire_all takes `resources` (indices into it): by the slot
/// `slot_of` gives each, then by name. The same for every caller, whatever order each
/// names them in.
std::vector<std::size_t> taking_order(std::span<const std::string> resources,
                                      std::span<const std::uint16_t> slots);

class Engine;

/// acquire_group.lua on the resources of one slot.
struct GroupOp final : ScriptOp {
  using Callback = std::function<void(boost::system::error_code, Reply)>;
  std::vector<std::string> resources;
  std::vector<ResourceKeys> group_keys;
  std::chrono::steady_clock::time_point sent;
  std::chrono::milliseconds ttl{};
  std::string token;
  std::string ttl_ms;
  std::string numkeys;
  Callback done;

  /// Fills in the command (after resources, group_keys, token and ttl_ms are set).
  void prepare();
  void on_reply(boost::system::error_code ec, Reply reply) override;
  void on_late_reply(boost::system::error_code ec, const Reply& reply) override;
  /// Gives back each lease the script may have set.
  void give_back();
};

// All on the strand. Handlers are only ever move-constructed (Boost 1.81).
struct AcquireAllOp final : std::enable_shared_from_this<AcquireAllOp>, PendingOp {
  using Clock = std::chrono::steady_clock;

  AcquireAllOp(AcquireAllHandler h, std::vector<std::string> names, LockOptions opts)
      : handler(std::move(h)), resources(std::move(names)), options(opts) {}
  ~AcquireAllOp();
  /// Bound to the handler: its sub-operations (and a group script's error reply) tell it,
  /// each before it completes here, so before this op's handler runs.
  Diagnostics* diagnostics = nullptr;

  void start();
  void cancel() override;

  AcquireAllHandler handler;
  std::shared_ptr<Engine> service;
  std::vector<std::string> resources;  // as given; guards come back in this order
  LockOptions options;
  Clock::time_point deadline;

 private:
  /// Takes the next slot's resources, or completes once all are taken.
  void step();
  void take_group(std::size_t end);
  void take_one();
  /// All taken. The locks were renewed while the others were waited for; each with less than
  /// 2/3 of its ttl left all the same (what a single acquire hands out at least) is extended
  /// before the guards are handed out. One that lapsed meanwhile (a renewal that failed)
  /// means none is: all are released, and taken again from the start if the wait allows.
  void confirm();
  /// The options of each lock while they are collected: renewed, so that the first ones
  /// taken do not lapse while the last ones are waited for.
  LockOptions collecting() const noexcept;
  /// `all`: every guard is handed out; else none (each is released).
  void finish(boost::system::error_code ec, bool all = false);
  void start_over();

  std::vector<std::size_t> order;
  std::vector<std::uint16_t> slots;  // by index into resources
  std::vector<Grant> guards;         // by index into resources
  std::size_t next = 0;              // the next position in `order` to take
  std::size_t group_tried = 0;       // positions before this had their group script
  bool in_flight = false;            // a group script, an acquire or extensions are under way
  std::size_t extending = 0;         // confirm(): extensions under way
  boost::system::error_code extend_error;
  bool lapsed = false;  // confirm(): a lease was no longer ours
  bool cancelled = false;
  bool done = false;
  boost::asio::cancellation_signal acquire_cancel;  // the single acquire under way
  Clock::time_point called = Clock::now();
};

}  // namespace redis_lock::detail
