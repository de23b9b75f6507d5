// SPDX-License-Identifier: MIT
#include "redis_sentinel.hpp"

#include <stdexcept>
#include <thread>

namespace redis_lock::test {

using namespace std::chrono_literals;

RedisSentinelSet::RedisSentinelSet(Options options) : options_(std::move(options)) {
  std::vector<std::string> data_args = {"--repl-diskless-sync-delay", "0"};
  if (!options_.data_password.empty()) {
    for (const char* opt : {"--requirepass", "--masterauth"}) {
      data_args.push_back(opt);
      data_args.push_back(options_.data_password);
    }
  }
  data_.push_back(std::make_unique<RedisServer>(data_args));
  auto replica_args = data_args;
  replica_args.insert(replica_args.end(),
                      {"--replicaof", "127.0.0.1", std::to_string(data_[0]->port())});
  data_.push_back(std::make_unique<RedisServer>(replica_args));

  const std::string name = master_name;
  std::vector<std::string> conf = {
      "sentinel monitor " + name + " 127.0.0.1 " + std::to_string(data_[0]->port()) + " 2",
      // 2 s: a master that a loaded machine keeps from answering for 1 s is not failed
      // over in the middle of a test (the tests that kill it wait ~1 s longer).
      "sentinel down-after-milliseconds " + name + " 2000",
      "sentinel failover-timeout " + name + " 3000", "sentinel parallel-syncs " + name + " 1"};
  if (!options_.data_password.empty()) {
    conf.push_back("sentinel auth-pass " + name + " " + options_.data_password);
  }
  if (!options_.sentinel_password.empty()) {
    conf.push_back("requirepass " + options_.sentinel_password);
    // The sentinels talk to each other with the same password.
    conf.push_back("sentinel sentinel-pass " + options_.sentinel_password);
  }
  for (int i = 0; i < 3; ++i) sentinels_.push_back(RedisServer::sentinel(conf));

  // Ready when each sentinel knows the replica and the two other sentinels (found through
  // hello messages on the master, every 2 s) and the replica is in sync.
  wait_until(
      [&] {
        for (std::size_t i = 0; i < sentinels_.size(); ++i) {
          const auto info = sentinel_command(i, {"SENTINEL", "MASTER", name});
          if (info.find("num-slaves 1") == std::string::npos ||
              info.find("num-other-sentinels 2") == std::string::npos) {
            return false;
          }
        }
        return command(1, {"INFO", "replication"}).find("master_link_status:up") !=
               std::string::npos;
      },
      30s, "the sentinels to know each other and the replica");
}

ConnectionConfig RedisSentinelSet::config() const {
  ConnectionConfig cfg;
  cfg.topology = Topology::sentinel;
  for (const auto& s : sentinels_) cfg.nodes.push_back({"127.0.0.1", s->port()});
  cfg.host = "127.0.0.1";
  cfg.port = sentinels_[0]->port();
  cfg.sentinel_master = master_name;
  cfg.password = options_.data_password;
  cfg.sentinel_password = options_.sentinel_password;
  return cfg;
}

std::string RedisSentinelSet::url() const {
  std::string url = "redis+sentinel://";
  if (!options_.data_password.empty()) url += ":" + options_.data_password + "@";
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels_[i]->port());
  }
  url += "/" + std::string(master_name);
  if (!options_.sentinel_password.empty())
    url += "?sentinel_password=" + options_.sentinel_password;
  return url;
}

std::string RedisSentinelSet::command(std::size_t i, const std::vector<std::string>& args) const {
  return redis_command(data_.at(i)->port(), args, options_.data_password);
}

std::string RedisSentinelSet::sentinel_command(std::size_t i,
                                               const std::vector<std::string>& args) const {
  return redis_command(sentinels_.at(i)->port(), args, options_.sentinel_password);
}

std::size_t RedisSentinelSet::master() const {
  std::size_t found = 0;
  wait_until(
      [&] {
        std::string named;
        for (std::size_t i = 0; i < sentinels_.size(); ++i) {
          if (!sentinels_[i]->running()) continue;
          const auto addr =
              sentinel_command(i, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name});
          if (!named.empty() && addr != named) return false;
          named = addr;
        }
        for (std::size_t d = 0; d < data_.size(); ++d) {
          if (named == "127.0.0.1 " + std::to_string(data_[d]->port())) {
            found = d;
            return true;
          }
        }
        return false;
      },
      30s, "the sentinels to agree on the master");
  return found;
}

void RedisSentinelSet::failover() {
  const auto old = master();
  const auto r = sentinel_command(0, {"SENTINEL", "FAILOVER", master_name});
  if (r != "OK") throw std::runtime_error("sentinel: FAILOVER: " + r);
  wait_new_master(old);
}

void RedisSentinelSet::wait_new_master(std::size_t old, std::chrono::milliseconds limit) {
  const auto other = 1 - old;
  wait_until(
      [&] {
        for (std::size_t i = 0; i < sentinels_.size(); ++i) {
          if (!sentinels_[i]->running()) continue;
          const auto addr =
              sentinel_command(i, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name});
          if (addr != "127.0.0.1 " + std::to_string(data_[other]->port())) return false;
        }
        // (The old master, if alive, is turned into a replica only when a sentinel next
        // looks at it, up to 10 s later: until then it is a master too.)
        return command(other, {"ROLE"}).rfind("master", 0) == 0;
      },
      limit, "the sentinels' new master");
}

}  // namespace redis_lock::test
