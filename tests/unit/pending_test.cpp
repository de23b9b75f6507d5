// SPDX-License-Identifier: MIT
// The list of operations under way that LockManager::cancel() ends: added and removed in
// O(1) in any order, never listing an operation twice or one that is gone.
#include "pending.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

using namespace redis_lock::detail;

namespace {

struct Op final : PendingOp {
  explicit Op(int i) : id(i) {}
  void cancel() override { ++cancelled; }
  int id;
  int cancelled = 0;
};

std::vector<int> ids(const PendingOps& ops) {
  std::vector<int> out;
  for (const auto& p : ops.snapshot()) out.push_back(static_cast<Op&>(*p).id);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(PendingOps, AddedOnceRemovedOnce) {
  PendingOps ops;
  auto a = std::make_shared<Op>(1);
  ops.add(*a, a);
  ops.add(*a, a);  // again: no effect
  EXPECT_EQ(ops.size(), 1u);
  EXPECT_TRUE(PendingOps::listed(*a));
  ops.remove(*a);
  ops.remove(*a);  // again: no effect
  EXPECT_EQ(ops.size(), 0u);
  EXPECT_FALSE(PendingOps::listed(*a));
}

TEST(PendingOps, RemovingFromTheMiddleKeepsTheOthersFindable) {
  PendingOps ops;
  std::vector<std::shared_ptr<Op>> all;
  for (int i = 0; i < 6; ++i) {
    all.push_back(std::make_shared<Op>(i));
    ops.add(*all.back(), all.back());
  }
  ops.remove(*all[1]);
  ops.remove(*all[4]);
  EXPECT_EQ(ids(ops), (std::vector<int>{0, 2, 3, 5}));
  // Each one left is still removable where the moves put it.
  for (int i : {5, 0, 3, 2}) ops.remove(*all[static_cast<std::size_t>(i)]);
  EXPECT_EQ(ops.size(), 0u);
}

TEST(PendingOps, ASnapshotHoldsOnlyTheLivingAndKeepsThemAlive) {
  PendingOps ops;
  auto a = std::make_shared<Op>(1);
  ops.add(*a, a);
  // b's owner lets go while b is still listed (its weak pointer expires); the object itself
  // lives on here, so the list's entry never dangles in this test.
  Op b_object(2);
  std::shared_ptr<Op> b(&b_object, [](Op*) {});
  ops.add(*b, b);
  b.reset();
  auto snap = ops.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(static_cast<Op&>(*snap[0]).id, 1);
  a.reset();
  EXPECT_EQ(static_cast<Op&>(*snap[0]).id, 1) << "the snapshot keeps it alive";
  for (const auto& p : snap) p->cancel();
  EXPECT_EQ(static_cast<Op&>(*snap[0]).cancelled, 1);
  ops.remove(b_object);
  ops.remove(static_cast<Op&>(*snap[0]));
  EXPECT_EQ(ops.size(), 0u);
}

TEST(PendingOps, AnOpOfAnotherListIsNotRemovedByMistake) {
  PendingOps first, second;
  auto a = std::make_shared<Op>(1);
  auto b = std::make_shared<Op>(2);
  first.add(*a, a);
  second.add(*b, b);
  first.remove(*b);  // b's index is 0 in the other list: not first's entry 0
  EXPECT_EQ(ids(first), (std::vector<int>{1}));
  EXPECT_EQ(ids(second), (std::vector<int>{2}));
}
