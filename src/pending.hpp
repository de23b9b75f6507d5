// SPDX-License-Identifier: MIT
// Layer 4 (engine): the operations of a manager that are under way and end on their own
// terms (acquires of every kind, async_acquire_all, observers), so that LockManager::cancel()
// can end them all, and the io_context's shutdown can give back what they hold in the
// server's queues. No I/O here; tests/unit/pending_test.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace redis_lock::detail {

/// An operation under way. All on the manager's strand (or on the thread that shuts the
/// context down, when nothing else runs).
class PendingOp {
 public:
  /// Ends the operation as its own per-operation cancellation does: with operation_aborted,
  /// giving back its queue places and what it took meanwhile.
  virtual void cancel() = 0;
  /// The context shuts down: no more I/O through Asio. Says at once what can be said without
  /// it (a queue place given back on a link that can take a write now). Best effort.
  virtual void last_words() noexcept {}

 protected:
  PendingOp() = default;
  PendingOp(const PendingOp&) = delete;
  PendingOp& operator=(const PendingOp&) = delete;
  ~PendingOp() = default;

 private:
  friend class PendingOps;
  static constexpr std::size_t unlisted = static_cast<std::size_t>(-1);
  std::size_t index_ = unlisted;  // in PendingOps::entries_
};

/// The operations under way: added when they start, removed when they complete (or are
/// destroyed unfinished). O(1) both ways, no allocation once the vector has grown.
class PendingOps {
 public:
  /// `op` is under way (again: no effect); `weak` is the shared object that owns it.
  void add(PendingOp& op, std::weak_ptr<PendingOp> weak);
  /// `op` has ended (or is being destroyed); no effect if it was not listed.
  void remove(PendingOp& op) noexcept;
  /// The operations still alive, kept alive while the caller acts on them (which may add or
  /// remove entries).
  std::vector<std::shared_ptr<PendingOp>> snapshot() const;
  std::size_t size() const noexcept { return entries_.size(); }
  static bool listed(const PendingOp& op) noexcept { return op.index_ != PendingOp::unlisted; }

 private:
  struct Entry {
    PendingOp* op;
    std::weak_ptr<PendingOp> weak;
  };
  std::vector<Entry> entries_;
};

inline void PendingOps::add(PendingOp& op, std::weak_ptr<PendingOp> weak) {
  if (listed(op)) return;
  op.index_ = entries_.size();
  entries_.push_back({&op, std::move(weak)});
}

inline void PendingOps::remove(PendingOp& op) noexcept {
  const auto i = op.index_;
  if (i == PendingOp::unlisted || i >= entries_.size() || entries_[i].op != &op) return;
  if (i + 1 != entries_.size()) {
    entries_[i] = std::move(entries_.back());
    entries_[i].op->index_ = i;
  }
  entries_.pop_back();
  op.index_ = PendingOp::unlisted;
}

inline std::vector<std::shared_ptr<PendingOp>> PendingOps::snapshot() const {
  std::vector<std::shared_ptr<PendingOp>> alive;
  alive.reserve(entries_.size());
  for (const auto& e : entries_) {
    if (auto op = e.weak.lock()) alive.push_back(std::move(op));
  }
  return alive;
}

}  // namespace redis_lock::detail
