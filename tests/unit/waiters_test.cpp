// SPDX-License-Identifier: MIT
// The hand-off's bookkeeping without a server: who waits on which slot, when to subscribe,
// which waiters a confirmed subscription or a hand-off message wakes.
#include "waiters.hpp"

#include "token.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace redis_lock::detail;

namespace {

struct FakeWaiter final : Waiter {
  int nudges = 0;
  int hand_offs = 0;
  void nudge() override { ++nudges; }
  void handed(const HandOff&) override { ++hand_offs; }
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

TEST(HandOff, ReadsTheMessageOfARelease) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  struct Case {
    const char* name;
    std::string message;
    std::uint64_t fence;  // 0: a nudge only
    long long place;
  };
  // clang-format off (a table: one case per line)
  const Case cases[] = {
      {"token, fencing token, place", token + " 1764000000123456 1764000001200",
       1'764'000'000'123'456, 1'764'000'001'200},
      {"a counter's small token", token + " 7 1764000001200", 7, 1'764'000'001'200},
      {"the token alone (an older release)", token, 0, 0},
      {"no place", token + " 7", 0, 0},
      {"no fencing token", token + "  1764000001200", 0, 0},
      {"fencing token 0", token + " 0 1764000001200", 0, 0},
      {"place 0", token + " 7 0", 0, 0},
      {"negative place", token + " 7 -5", 0, 0},
      {"text after the place", token + " 7 12x", 0, 0},
      {"a fourth field that is no signature", token + " 7 12 3", 0, 0},
      {"a signature of 39 digits", token + " 7 12 " + std::string(39, 'a'), 0, 0},
      {"a signature of 41 digits", token + " 7 12 " + std::string(41, 'a'), 0, 0},
      {"a signature in capitals", token + " 7 12 " + std::string(40, 'A'), 0, 0},
      {"two spaces before the signature", token + " 7 12  " + std::string(40, 'a'), 0, 0},
      {"a signed message", token + " 7 12 " + std::string(40, 'a'), 7, 12},
      {"fencing token past 64 bits", token + " 99999999999999999999 12", 0, 0},
      {"no space after the token", token + "7 12", 0, 0},
  };
  // clang-format on
  for (const auto& c : cases) {
    const auto got = read_hand_off(c.message);
    EXPECT_EQ(got.token, token) << c.name;
    EXPECT_EQ(got.fence, c.fence) << c.name;
    EXPECT_EQ(got.place, c.place) << c.name;
  }
  EXPECT_EQ(read_hand_off("short").token, "short");  // no waiter has such a token
  const std::string unsigned_text = token + " 7 12";
  const auto plain = read_hand_off(unsigned_text);
  EXPECT_TRUE(plain.mac.empty());
  EXPECT_TRUE(plain.signed_by.empty());
  const std::string mac = "0123456789abcdef0123456789abcdef01234567";
  const std::string signed_text = token + " 7 12 " + mac;  // (read_hand_off returns views)
  const auto signed_message = read_hand_off(signed_text);
  EXPECT_EQ(signed_message.mac, mac);
  EXPECT_EQ(signed_message.signed_by, token + " 7 12") << "what the signature covers";
}

TEST(HandOff, ASignatureIsTheServersNestedSha1OfTheSecretAndTheMessage) {
  // What shared.lua's hand_on computes: sha1hex(secret .. sha1hex(secret .. '\n' .. text)).
  // The expected digests were computed with redis.sha1hex on redis-server 7.0 (and agree with
  // sha1sum): a mismatch would make every signed hand-off a nudge, silently.
  const std::string secret = "00112233445566778899aabbccddeeff";
  const std::string text = "0123456789abcdef0123456789abcdef 1764000000123456 1764000001200";
  const std::string expected_mac = "04861a13162b4f7b7fbb0d83f51b11520e88f8b6";
  EXPECT_EQ(hand_off_mac(secret, text), expected_mac);
  EXPECT_NE(hand_off_mac(secret, text + "0"), expected_mac);
  EXPECT_NE(hand_off_mac("10112233445566778899aabbccddeeff", text), expected_mac);
  EXPECT_TRUE(equal_in_constant_time(expected_mac, hand_off_mac(secret, text)));
  EXPECT_FALSE(equal_in_constant_time(expected_mac, std::string(40, 'a')));
  EXPECT_FALSE(equal_in_constant_time("ab", "abc"));
}

TEST(HandOffBook, KeepsAFewMessagesThatOvertookTheirWaitersReply) {
  // A release can run between the attempt that queued a waiter and that attempt's reply; its
  // message may then arrive (on the subscriber link) before the waiter is in the book.
  HandOffBook book;
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string message = token + " 7 1764000001200";
  book.keep(message);
  // A bare token (a lease set's release nudges that way) is kept too.
  const std::string nudged = "fedcba9876543210fedcba9876543210";
  book.keep(nudged);
  book.keep("short");  // no token of ours: not kept
  EXPECT_FALSE(book.take_kept("short"));
  const auto bare = book.take_kept(nudged);
  ASSERT_TRUE(bare);
  EXPECT_EQ(read_hand_off(*bare).fence, 0u);
  EXPECT_FALSE(book.take_kept(nudged)) << "taken once";
  const auto kept = book.take_kept(token);
  ASSERT_TRUE(kept);
  EXPECT_EQ(*kept, message) << "kept whole (a signed message's signature too)";
  EXPECT_EQ(read_hand_off(*kept).fence, 7u);
  EXPECT_EQ(read_hand_off(*kept).place, 1'764'000'001'200);
  EXPECT_FALSE(book.take_kept(token)) << "taken once";
  // Only the last few are kept.
  for (int i = 0; i < 20; ++i) {
    book.keep(std::string(32, static_cast<char>('a' + i)) + " 1 2");
  }
  EXPECT_FALSE(book.take_kept(std::string(32, 'a')));
  const auto last = book.take_kept(std::string(32, static_cast<char>('a' + 19)));
  ASSERT_TRUE(last);
  EXPECT_EQ(read_hand_off(*last).fence, 1u);
}
