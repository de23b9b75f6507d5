// SPDX-License-Identifier: MIT
// Ownership tokens: format and uniqueness.
#include "token.hpp"

#include <gtest/gtest.h>

#include <set>

#include <sys/wait.h>
#include <unistd.h>

TEST(Token, Is128BitsOfHex) {
  const auto t = redis_lock::detail::random_token();
  ASSERT_EQ(t.size(), 32u);
  for (char c : t) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << t;
}

TEST(Token, NeverRepeats) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i)
    ASSERT_TRUE(seen.insert(redis_lock::detail::random_token()).second);
}

TEST(Token, ForkedChildNeverRepeatsTheParentsTokens) {
  // Fill the per-thread buffer, then fork: the child must not hand out what the parent will.
  (void)redis_lock::detail::random_token();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const auto t = redis_lock::detail::random_token();
    [[maybe_unused]] auto n = ::write(fds[1], t.data(), t.size());
    ::_exit(0);
  }
  const auto mine = redis_lock::detail::random_token();
  char buf[32];
  ASSERT_EQ(::read(fds[0], buf, sizeof buf), 32);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_NE(std::string(buf, 32), mine);
}
