// SPDX-License-Identifier: MIT
// The hand-off's bookkeeping without a server: who waits on which slot, when to subscribe,
// which waiters a confirmed subscription or a hand-off message wakes.
#include "waiters.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace redis_lock::detail;

namespace {

struct FakeWaiter final : Waiter {
  int nudges = 0;
  void nudge() override { ++nudges; }
};

int nudge_all(const std::vector<std::shared_ptr<Waiter>>& waiters) {
  for (const auto& w : waiters) w->nudge();
  return static_cast<int>(waiters.size());
}

}  // namespace

TEST(HandOffBook, SubscribesOncePerSlotAndAgainAfterALinkOrSlotIsLost) {
  HandOffBook book;
  auto a = std::make_shared<FakeWaiter>(), b = std::make_shared<FakeWaiter>();
  EXPECT_TRUE(book.add("a", a, 7));  // first waiter of slot 7: subscribe
  book.subscribing(7, 2);
  EXPECT_FALSE(book.add("a", a, 7));  // again (a sleeper re-registers): pending, no
  EXPECT_FALSE(book.add("b", b, 7));
  EXPECT_TRUE(book.add("b2", b, 9));           // another slot
  EXPECT_FALSE(book.listening(7));             // pending is not listening
  EXPECT_EQ(nudge_all(book.confirmed(7)), 2);  // a and b look once more
  EXPECT_TRUE(book.listening(7));
  EXPECT_FALSE(book.add("c", a, 7));  // confirmed: no
  book.link_down(2);                  // the subscriber link of node 2 failed
  EXPECT_FALSE(book.listening(7));
  EXPECT_TRUE(book.add("a", a, 7));  // the next sleeper subscribes again
  book.subscribing(7, 3);
  book.confirmed(7);
  book.moved_away(7);  // sunsubscribe: the slot went elsewhere
  EXPECT_FALSE(book.listening(7));
  EXPECT_TRUE(book.add("a", a, 7));
}

TEST(HandOffBook, AnswersToAnOldSubscribeAreIgnored) {
  HandOffBook book;
  auto a = std::make_shared<FakeWaiter>();
  book.add("a", a, 1);
  book.subscribing(1, 0);
  EXPECT_TRUE(book.awaits(1, 0));
  EXPECT_FALSE(book.awaits(1, 4));  // a SUBSCRIBE sent to node 4 earlier
  EXPECT_FALSE(book.awaits(2, 0));  // no such slot
  book.subscribing(1, 4);           // resubscribed elsewhere (MOVED)
  EXPECT_FALSE(book.awaits(1, 0));
  book.failed(1);
  EXPECT_FALSE(book.awaits(1, 4));
  EXPECT_FALSE(book.listening(1));
  EXPECT_TRUE(book.add("a", a, 1));  // failed: the next sleeper tries again
}

TEST(HandOffBook, AHandOffWakesItsWaiterOnly) {
  HandOffBook book;
  auto a = std::make_shared<FakeWaiter>(), b = std::make_shared<FakeWaiter>();
  book.add("ta", a, 0);
  book.add("tb", b, 0);
  book.handed_to("ta")->nudge();
  EXPECT_EQ(a->nudges, 1);
  EXPECT_EQ(b->nudges, 0);
  EXPECT_EQ(book.handed_to("nobody"), nullptr);  // finished meanwhile
  EXPECT_FALSE(book.remove("ta"));               // tb still waits
  EXPECT_EQ(book.handed_to("ta"), nullptr);
  {
    auto gone = std::make_shared<FakeWaiter>();
    book.add("tc", gone, 0);
  }
  EXPECT_EQ(book.handed_to("tc"), nullptr);  // a waiter that no longer exists
  EXPECT_FALSE(book.remove("tc"));
  EXPECT_TRUE(book.remove("tb"));   // the last one: stop reading
  EXPECT_FALSE(book.remove("tb"));  // not listed: nothing changes
  EXPECT_TRUE(book.empty());
}

TEST(HandOffBook, AConfirmedSubscriptionWakesOnlyThatSlotsLiveWaiters) {
  HandOffBook book;
  auto a = std::make_shared<FakeWaiter>(), b = std::make_shared<FakeWaiter>();
  book.add("a", a, 1);
  book.add("b", b, 2);
  {
    auto gone = std::make_shared<FakeWaiter>();
    book.add("g", gone, 1);
  }
  EXPECT_EQ(nudge_all(book.confirmed(1)), 1);
  EXPECT_EQ(a->nudges, 1);
  EXPECT_EQ(b->nudges, 0);
}
