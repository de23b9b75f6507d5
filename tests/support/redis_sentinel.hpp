// SPDX-License-Identifier: MIT
// Test harness: a master, its replica and three sentinels (real redis-server processes on
// loopback), with separate passwords for the data nodes and the sentinels.
#pragma once

#include "redis_server.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace redis_lock::test {

class RedisSentinelSet {
 public:
  static constexpr const char* master_name = "locks-master";
  struct Options {
    std::string data_password;      // requirepass/masterauth of master and replica
    std::string sentinel_password;  // requirepass of the sentinels
  };
  explicit RedisSentinelSet(Options options);
  RedisSentinelSet() : RedisSentinelSet(Options{}) {}

  /// topology = sentinel, the three sentinels, the master name and both passwords.
  ConnectionConfig config() const;
  /// The same as a redis+sentinel:// URL.
  std::string url() const;

  RedisServer& data(std::size_t i) { return *data_.at(i); }
  RedisServer& sentinel(std::size_t i) { return *sentinels_.at(i); }
  /// Which data node every live sentinel names as master now (waits for agreement).
  std::size_t master() const;
  /// A command on data node `i` (with the data password).
  std::string command(std::size_t i, const std::vector<std::string>& args) const;
  /// SENTINEL FAILOVER, then waits until the other node is master and named by every live
  /// sentinel.
  void failover();
  /// Waits until the sentinels name a master other than `old` and it answers as master.
  void wait_new_master(std::size_t old, std::chrono::milliseconds limit = std::chrono::seconds(30));

 private:
  std::string sentinel_command(std::size_t i, const std::vector<std::string>& args) const;
  Options options_;
  std::vector<std::unique_ptr<RedisServer>> data_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
};

}  // namespace redis_lock::test
