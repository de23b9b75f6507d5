// SPDX-License-Identifier: MIT
// What the snippet tests share: a redis-server of their own (the docs' resource names, such as
// "report:daily", are also used by the examples, which run against the shared server at the
// same time), emptied before each test.
//
// The snippets themselves are the text between `//[name` and `//]` in readme.cpp and
// guide.cpp: check_docs.py fails unless each C++ block of README.md and docs/guide.md is one
// of them, so what the docs show is what these tests compile and run.
#pragma once

#include "live.hpp"
#include "redis_server.hpp"

#include <memory>
#include <string>

namespace redis_lock::test {

class Snippet : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    if (!server_) server_ = std::make_unique<RedisServer>();
  }
  static void TearDownTestSuite() { server_.reset(); }

 protected:
  void SetUp() override { server_->command({"FLUSHALL"}); }

  static ConnectionConfig config() { return server_->config(); }
  static std::string url() { return "redis://127.0.0.1:" + std::to_string(server_->port()); }
  /// A URL on which nothing listens: Redis is down.
  static std::string down_url() { return "redis://127.0.0.1:" + std::to_string(free_port()); }
  static std::string command(const std::vector<std::string>& args) {
    return server_->command(args);
  }
  /// Someone else holds `resource` (under the default key prefix) for 30 s.
  static void hold_elsewhere(const std::string& resource) {
    command({"SET", lease_key(resource), "someone-else", "PX", "30000"});
  }

 private:
  static inline std::unique_ptr<RedisServer> server_;
};

}  // namespace redis_lock::test
