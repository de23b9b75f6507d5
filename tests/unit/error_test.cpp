// SPDX-License-Identifier: MIT
// The error category and the mapping of server error replies to codes.
#include "resp.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

using redis_lock::error;

TEST(ErrorCategory, NameAndMessages) {
  EXPECT_STREQ(redis_lock::error_category().name(), "redis_lock");
  for (int e = 1; e <= static_cast<int>(error::not_acquired); ++e) {
    const auto msg = make_error_code(static_cast<error>(e)).message();
    EXPECT_FALSE(msg.empty());
    EXPECT_NE(msg, "unknown redis_lock error") << e;
  }
  boost::system::error_code ec = error::timeout;
  EXPECT_EQ(ec, error::timeout);
  EXPECT_NE(ec, error::connection_lost);
  std::error_code std_ec = error::invalid_argument;
  EXPECT_EQ(std_ec.value(), 1);
}

TEST(ErrorCategory, ServerReplyMapping) {
  using redis_lock::detail::error_from_reply;
  EXPECT_EQ(error_from_reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
            error::wrong_type);
  EXPECT_EQ(error_from_reply("NOAUTH Authentication required."), error::not_authenticated);
  EXPECT_EQ(error_from_reply("WRONGPASS invalid username-password pair"), error::auth_failed);
  EXPECT_EQ(error_from_reply("NOPERM User x has no permissions to run the 'evalsha' command"),
            error::no_permission);
  EXPECT_EQ(error_from_reply("OOM command not allowed when used memory > 'maxmemory'."),
            error::out_of_memory);
  EXPECT_EQ(error_from_reply("READONLY You can't write against a read only replica."),
            error::read_only);
  EXPECT_EQ(error_from_reply("ERR The user executing the script can't run this command or "
                             "subcommand script: f9b3, on @user_script:4."),
            error::no_permission);
  EXPECT_EQ(error_from_reply("ERR something else"), error::server_error);
  EXPECT_EQ(error_from_reply("ERR unknown command 'OOM'"), error::server_error);
}
