// SPDX-License-Identifier: MIT
// CRC16 slots against known vectors, the per-slot tag table, and the key layout.
#include "keys.hpp"

#include <string>

#include <gtest/gtest.h>

using namespace redis_lock::detail;

TEST(Keys, Crc16KnownVectors) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // the XMODEM check value the Cluster spec gives
  EXPECT_EQ(crc16(""), 0);
}

TEST(Keys, SlotsMatchRedisCluster) {
  // Values as CLUSTER KEYSLOT reports them.
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16("foo{}{bar}") & 16383);  // empty tag: whole key
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
  EXPECT_EQ(key_slot("{unterminated"), crc16("{unterminated") & 16383);
}

TEST(Keys, EverySlotHasAShortTag) {
  for (std::uint32_t slot = 0; slot < slot_count; ++slot) {
    const auto tag = slot_tag(static_cast<std::uint16_t>(slot));
    ASSERT_FALSE(tag.empty());
    ASSERT_LE(tag.size(), 6u);
    ASSERT_EQ(key_slot(tag), slot);
  }
}

TEST(Keys, LeaseAndFenceShareASlot) {
  const std::string resources[] = {
      "order:42", "a", "x}y", "{inner}", "}{", "", "with\r\nnewline", std::string("nul\0byte", 8)};
  for (const auto& r : resources) {
    const auto keys = make_keys("lock:", r);
    EXPECT_EQ(keys.lease(), "lock:{" + r + "}");
    EXPECT_EQ(key_slot(keys.lease()), key_slot(keys.fence())) << r;
    EXPECT_EQ(key_slot(keys.lease()), key_slot(keys.queue())) << r;
    EXPECT_EQ(key_slot(keys.lease()), key_slot(keys.queue_expiry())) << r;
    EXPECT_EQ(keys.fence().rfind("lock:fence:{", 0), 0u);
  }
  // Counters are bounded: distinct resources in one slot share one counter, and resources
  // in different slots do not.
  const auto a = make_keys("lock:", "a");
  std::string same_slot, other_slot;
  for (int i = 0; same_slot.empty() || other_slot.empty(); ++i) {
    const auto r = "r" + std::to_string(i);
    (key_slot(make_keys("lock:", r).lease()) == key_slot(a.lease()) ? same_slot : other_slot) = r;
  }
  EXPECT_EQ(make_keys("lock:", same_slot).fence(), a.fence()) << same_slot;
  EXPECT_NE(make_keys("lock:", other_slot).fence(), a.fence()) << other_slot;
  EXPECT_NE(make_keys("lock:", same_slot).lease(), a.lease());
}

TEST(Keys, PrefixIsApplied) {
  const auto keys = make_keys("app1:", "r");
  EXPECT_EQ(keys.lease(), "app1:{r}");
  EXPECT_EQ(keys.queue(), "app1:q:{" + std::string(slot_tag(key_slot("app1:{r}"))) + "}r");
  EXPECT_EQ(keys.fence().rfind("app1:fence:{", 0), 0u);
}
