// SPDX-License-Identifier: MIT
// The error category and the mapping of server error replies to codes.
#include "resp.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <system_error>

using redis_lock::error;

namespace {

/// Every code, in declaration order, with a word its message must contain (a server's own
/// error prefix for the codes that mirror one).
struct Expected {
  error code;
  const char* says;
  const char* name;  // error_name()
};
constexpr Expected every_code[] = {
    {error::invalid_argument, "invalid argument", "invalid_argument"},
    {error::timeout, "timed out", "timeout"},
    {error::connect_timeout, "connecting", "connect_timeout"},
    {error::connect_failed, "could not connect", "connect_failed"},
    {error::connection_lost, "lost", "connection_lost"},
    {error::protocol_error, "RESP", "protocol_error"},
    {error::server_error, "server returned an error", "server_error"},
    {error::wrong_type, "WRONGTYPE", "wrong_type"},
    {error::not_authenticated, "NOAUTH", "not_authenticated"},
    {error::auth_failed, "WRONGPASS", "auth_failed"},
    {error::no_permission, "NOPERM", "no_permission"},
    {error::out_of_memory, "OOM", "out_of_memory"},
    {error::read_only, "READONLY", "read_only"},
    {error::lock_lost, "lock was lost", "lock_lost"},
    {error::shutdown, "shutting down", "shutdown"},
    {error::unexpected_reply, "unexpected shape", "unexpected_reply"},
    {error::not_replicated, "replicas", "not_replicated"},
    {error::not_acquired, "held elsewhere", "not_acquired"},
    {error::tls_config_invalid, "TLS CA", "tls_config_invalid"},
    {error::tls_handshake_failed, "TLS handshake failed", "tls_handshake_failed"},
    {error::cluster_down, "Cluster", "cluster_down"},
    {error::master_not_found, "sentinel", "master_not_found"},
    {error::no_quorum, "Redlock", "no_quorum"},
    {error::limit_mismatch, "another limit", "limit_mismatch"},
    {error::server_unsupported, "Redis >= 7.0", "server_unsupported"},
    {error::server_evicts, "evicts keys", "server_evicts"},
    {error::store_not_durable, "appendfsync always", "store_not_durable"},
};

}  // namespace

TEST(ErrorCategory, NameAndMessages) {
  const auto& category = redis_lock::error_category();
  EXPECT_STREQ(category.name(), "redis_lock");
  std::set<std::string> messages;
  int value = 1;
  std::set<std::string> names;
  for (const auto& [code, says, name] : every_code) {
    SCOPED_TRACE(value);
    EXPECT_EQ(static_cast<int>(code), value++) << "codes are numbered from 1, in order";
    const boost::system::error_code ec = code;
    EXPECT_EQ(&ec.category(), &category);
    EXPECT_EQ(ec.value(), static_cast<int>(code));
    const auto msg = ec.message();
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
    EXPECT_TRUE(messages.insert(msg).second) << "two codes share the message " << msg;
    EXPECT_STREQ(redis_lock::error_name(code), name);
    EXPECT_TRUE(names.insert(name).second);
    char buffer[8];
    EXPECT_STREQ(category.message(ec.value(), buffer, sizeof buffer), msg.c_str());
    const std::error_code std_ec = code;
    EXPECT_STREQ(std_ec.category().name(), "redis_lock");
    EXPECT_EQ(std_ec.value(), static_cast<int>(code));
    EXPECT_EQ(std_ec.message(), msg);
  }
  // The table above is the whole enum: the value after the last code is no code.
  EXPECT_EQ(category.message(value), "unknown redis_lock error");
  EXPECT_EQ(category.message(0), "unknown redis_lock error");
  EXPECT_STREQ(redis_lock::error_name(static_cast<error>(value)), "unknown");
  EXPECT_STREQ(redis_lock::error_name(static_cast<error>(0)), "unknown");
  boost::system::error_code ec = error::timeout;
  EXPECT_EQ(ec, error::timeout);
  EXPECT_NE(ec, error::connection_lost);
  EXPECT_NE(ec, boost::system::errc::timed_out) << "our codes are not the generic ones";
}

TEST(ErrorCategory, ServerReplyMapping) {
  using redis_lock::detail::error_from_reply;
  EXPECT_EQ(error_from_reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
            error::wrong_type);
  // What acquire_set.lua answers for a lock of another kind, or a semaphore of another limit.
  EXPECT_EQ(error_from_reply("WRONGTYPE the resource is a semaphore"), error::wrong_type);
  EXPECT_EQ(error_from_reply("LIMITMISMATCH the semaphore is held with limit 3, not 5"),
            error::limit_mismatch);
  EXPECT_EQ(error_from_reply("NOAUTH Authentication required."), error::not_authenticated);
  EXPECT_EQ(error_from_reply("ERR Protocol error: unauthenticated multibulk length"),
            error::not_authenticated);
  EXPECT_EQ(error_from_reply("WRONGPASS invalid username-password pair"), error::auth_failed);
  EXPECT_EQ(error_from_reply("ERR invalid password"), error::auth_failed);
  // An ACL refusal inside a script: Valkey 8's (and Redis 7.2's) words.
  EXPECT_EQ(error_from_reply("ERR ACL failure in script: User scripter has no permissions to run "
                             "the 'exists' command script: 4adb6f1d, on @user_script:128."),
            error::no_permission);
  EXPECT_EQ(error_from_reply("ERR AUTH <password> called without any password configured for "
                             "the default user. Are you sure your configuration is correct?"),
            error::auth_failed);
  EXPECT_EQ(error_from_reply("NOPERM User x has no permissions to run the 'evalsha' command"),
            error::no_permission);
  EXPECT_EQ(error_from_reply("OOM command not allowed when used memory > 'maxmemory'."),
            error::out_of_memory);
  EXPECT_EQ(error_from_reply("READONLY You can't write against a read only replica."),
            error::read_only);
  EXPECT_EQ(error_from_reply("ERR The user executing the script can't run this command or "
                             "subcommand script: f9b3, on @user_script:4."),
            error::no_permission);
  // Cluster refusals that outlived their retries.
  EXPECT_EQ(error_from_reply("CLUSTERDOWN The cluster is down"), error::cluster_down);
  EXPECT_EQ(error_from_reply("TRYAGAIN Multiple keys request during rehashing of slot"),
            error::cluster_down);
  EXPECT_EQ(error_from_reply("MOVED 3999 127.0.0.1:6381"), error::cluster_down);
  EXPECT_EQ(error_from_reply("ASK 3999 127.0.0.1:6381"), error::cluster_down);
  EXPECT_EQ(error_from_reply("ERR something else"), error::server_error);
  EXPECT_EQ(error_from_reply("ERR unknown command 'OOM'"), error::server_error);
  EXPECT_EQ(error_from_reply("NOSCRIPT No matching script."), error::server_error);
  EXPECT_EQ(error_from_reply(""), error::server_error);
  // Every mapped code is in this category.
  EXPECT_EQ(&error_from_reply("OOM x").category(), &redis_lock::error_category());
}
