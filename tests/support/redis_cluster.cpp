// SPDX-License-Identifier: MIT
#include "redis_cluster.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace redis_lock::test {

namespace {

using namespace std::chrono_literals;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// One line of CLUSTER NODES.
struct NodeLine {
  std::string id;
  std::uint16_t port = 0;
  std::string flags;
  std::string master_id;  // of a replica
  std::vector<std::pair<int, int>> slots;
  bool myself() const { return flags.find("myself") != std::string::npos; }
  bool master() const { return flags.find("master") != std::string::npos; }
  bool failed() const { return flags.find("fail") != std::string::npos; }
};

std::vector<NodeLine> cluster_nodes(std::uint16_t port) {
  std::vector<NodeLine> lines;
  for (const auto& line : split(redis_command(port, {"CLUSTER", "NODES"}), '\n')) {
    const auto fields = split(line, ' ');
    if (fields.size() < 8) continue;
    NodeLine n;
    n.id = fields[0];
    const auto colon = fields[1].find(':');
    const auto at = fields[1].find('@');
    if (colon == std::string::npos || at == std::string::npos) continue;
    n.port = static_cast<std::uint16_t>(std::stoi(fields[1].substr(colon + 1, at - colon - 1)));
    n.flags = fields[2];
    n.master_id = fields[3];
    for (std::size_t i = 8; i < fields.size(); ++i) {
      if (fields[i].empty() || fields[i][0] == '[') continue;  // a slot being moved
      const auto dash = fields[i].find('-');
      const int first = std::stoi(fields[i].substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(fields[i].substr(dash + 1));
      n.slots.emplace_back(first, last);
    }
    lines.push_back(std::move(n));
  }
  return lines;
}

}  // namespace

RedisCluster::RedisCluster(int masters, int replicas_per_master, Slots layout)
    : masters_(static_cast<std::size_t>(masters)) {
  const std::vector<std::string> args = {
      "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
      // 3 s: a node starved of CPU for 1 s on a loaded machine (the old value) was marked
      // failed and its replica promoted, a failover nobody asked for in the middle of a test
      // that asserts zero errors. A killed master is replaced after this long plus the
      // election (~4-5 s; wait_healthy allows 20 s).
      "--cluster-node-timeout", "3000",
      // Any replica may take over, however long its link was down (tests kill masters).
      "--cluster-replica-validity-factor", "0", "--cluster-allow-replica-migration", "no",
      // Replicas sync at once (the default waits 5 s for more replicas to share a transfer).
      "--repl-diskless-sync-delay", "0"};
  const int total = masters * (1 + replicas_per_master);
  for (int i = 0; i < total; ++i) nodes_.push_back(std::make_unique<RedisServer>(args));

  for (std::size_t m = 0; m < masters_ && layout == Slots::interleaved; ++m) {
    std::vector<std::string> command = {"CLUSTER", "ADDSLOTS"};
    for (std::size_t slot = m; slot < 16384; slot += masters_) {
      command.push_back(std::to_string(slot));
    }
    const auto r = node(m).command(command);
    if (r != "OK") throw std::runtime_error("cluster: ADDSLOTS: " + r);
  }
  for (std::size_t m = 0; m < masters_ && layout == Slots::ranges; ++m) {
    const auto first = m * 16384 / masters_;
    const auto last = (m + 1) * 16384 / masters_ - 1;
    const auto r =
        node(m).command({"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)});
    if (r != "OK") throw std::runtime_error("cluster: ADDSLOTSRANGE: " + r);
  }
  for (std::size_t i = 1; i < size(); ++i) {
    node(0).command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(node(i).port())});
  }
  wait_until(
      [&] {
        for (std::size_t i = 0; i < size(); ++i) {
          const auto lines = cluster_nodes(node(i).port());
          if (lines.size() != size()) return false;
          for (const auto& l : lines) {
            if (l.flags.find("handshake") != std::string::npos || l.flags == "noaddr") return false;
          }
        }
        return true;
      },
      20s, "the cluster's nodes to meet");
  for (std::size_t r = masters_; r < size(); ++r) {
    const auto master = (r - masters_) % masters_;
    const auto reply = node(r).command({"CLUSTER", "REPLICATE", node_id(master)});
    if (reply != "OK") throw std::runtime_error("cluster: REPLICATE: " + reply);
  }
  wait_healthy();
}

RedisCluster::~RedisCluster() = default;

ConnectionConfig RedisCluster::config(std::size_t seeds) const {
  ConnectionConfig cfg;
  cfg.topology = Topology::cluster;
  const auto n = seeds == 0 ? masters_ : std::min(seeds, nodes_.size());
  for (std::size_t i = 0; i < n; ++i) cfg.nodes.push_back({"127.0.0.1", nodes_[i]->port()});
  cfg.host = "127.0.0.1";
  cfg.port = nodes_[0]->port();
  return cfg;
}

std::string RedisCluster::node_id(std::size_t i) const {
  return redis_command(nodes_.at(i)->port(), {"CLUSTER", "MYID"});
}

bool RedisCluster::is_master(std::size_t i) const {
  for (const auto& l : cluster_nodes(nodes_.at(i)->port())) {
    if (l.myself()) return l.master();
  }
  return false;
}

bool RedisCluster::serves(std::size_t i, std::uint16_t slot) const {
  if (!nodes_.at(i)->running()) return false;
  for (const auto& l : cluster_nodes(nodes_[i]->port())) {
    if (!l.myself() || !l.master()) continue;
    for (auto [first, last] : l.slots) {
      if (slot >= first && slot <= last) return true;
    }
  }
  return false;
}

std::size_t RedisCluster::master_of(std::uint16_t slot) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (serves(i, slot)) return i;
  }
  throw std::runtime_error("cluster: no live master claims slot " + std::to_string(slot));
}

std::size_t RedisCluster::replica_of(std::size_t master) const {
  const auto id = node_id(master);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (i == master || !nodes_[i]->running()) continue;
    for (const auto& l : cluster_nodes(nodes_[i]->port())) {
      if (l.myself() && !l.master() && l.master_id == id) return i;
    }
  }
  throw std::runtime_error("cluster: master has no live replica");
}

void RedisCluster::failover(std::size_t replica) {
  const auto reply = node(replica).command({"CLUSTER", "FAILOVER"});
  if (reply != "OK") throw std::runtime_error("cluster: FAILOVER: " + reply);
  wait_until([&] { return is_master(replica); }, 20s, "the cluster failover");
  wait_healthy();
}

void RedisCluster::wait_healthy(std::chrono::milliseconds limit) const {
  // Every live node must see every live node in the same role: masters with the same slots,
  // replicas of the same master. (Comparing only the masters that serve slots passed while
  // some nodes still took a fresh replica for an empty master, as gossip spreads a role
  // change only within about half the node timeout: those masters then refused it their
  // vote, "it is a master node", and a CLUSTER FAILOVER FORCE sent then never happened.)
  struct Seen {
    std::uint16_t port;
    std::string role;  // "master", or the id of the master it replicates
    std::vector<std::pair<int, int>> slots;
    bool operator==(const Seen&) const = default;
    bool operator<(const Seen& o) const { return port < o.port; }
  };
  std::set<std::uint16_t> live;
  for (const auto& n : nodes_) {
    if (n->running()) live.insert(n->port());
  }
  wait_until(
      [&] {
        std::vector<Seen> first_view;
        bool first = true;
        for (const auto& n : nodes_) {
          if (!n->running()) continue;
          const auto info = redis_command(n->port(), {"CLUSTER", "INFO"});
          if (info.find("cluster_state:ok") == std::string::npos) return false;
          std::vector<Seen> view;
          for (const auto& l : cluster_nodes(n->port())) {
            if (l.master() && !l.slots.empty() && l.failed()) return false;
            if (!live.count(l.port)) continue;
            if (l.failed()) return false;
            view.push_back({l.port, l.master() ? "master" : l.master_id, l.slots});
          }
          if (view.size() != live.size()) return false;
          std::sort(view.begin(), view.end());
          if (first) {
            first_view = view;
            first = false;
          } else if (view != first_view) {
            return false;
          }
          const auto repl = redis_command(n->port(), {"INFO", "replication"});
          if (repl.find("role:slave") != std::string::npos &&
              repl.find("master_link_status:up") == std::string::npos) {
            return false;
          }
        }
        return true;
      },
      limit, "a healthy cluster");
}

void RedisCluster::begin_move(std::uint16_t slot, std::size_t source, std::size_t target) {
  const auto s = std::to_string(slot);
  auto r = node(target).command({"CLUSTER", "SETSLOT", s, "IMPORTING", node_id(source)});
  if (r != "OK") throw std::runtime_error("cluster: IMPORTING: " + r);
  r = node(source).command({"CLUSTER", "SETSLOT", s, "MIGRATING", node_id(target)});
  if (r != "OK") throw std::runtime_error("cluster: MIGRATING: " + r);
}

void RedisCluster::migrate_keys(std::uint16_t slot, std::size_t source, std::size_t target,
                                std::size_t limit) {
  std::size_t moved = 0;
  while (moved < limit) {
    const auto keys =
        split(node(source).command({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "1"}), ' ');
    if (keys.empty()) break;
    migrate_key(source, target, keys[0]);
    ++moved;
  }
}

bool RedisCluster::migrate_key(std::size_t source, std::size_t target, const std::string& key) {
  const auto r = node(source).command(
      {"MIGRATE", "127.0.0.1", std::to_string(node(target).port()), key, "0", "5000"});
  // NOKEY: it expired (or was deleted) before it could move.
  if (r != "OK" && r != "NOKEY") throw std::runtime_error("cluster: MIGRATE: " + r);
  return r == "OK";
}

void RedisCluster::end_move(std::uint16_t slot, std::size_t source, std::size_t target) {
  const auto s = std::to_string(slot);
  const auto id = node_id(target);
  node(target).command({"CLUSTER", "SETSLOT", s, "NODE", id});
  node(source).command({"CLUSTER", "SETSLOT", s, "NODE", id});
  for (std::size_t i = 0; i < size(); ++i) {
    if (i != source && i != target && nodes_[i]->running() && is_master(i)) {
      node(i).command({"CLUSTER", "SETSLOT", s, "NODE", id});
    }
  }
}

}  // namespace redis_lock::test
