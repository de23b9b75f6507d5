// SPDX-License-Identifier: MIT
// Ownership tokens: format and uniqueness.
#include "token.hpp"

#include <gtest/gtest.h>

#include <set>

TEST(Token, Is128BitsOfHex) {
  const auto t = redis_lock::detail::random_token();
  ASSERT_EQ(t.size(), 32u);
  for (char c : t) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << t;
}

TEST(Token, NeverRepeats) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(seen.insert(redis_lock::detail::random_token()).second);
}
