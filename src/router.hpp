// SPDX-License-Identifier: MIT
// Layer 3 (topology): which connection carries a command for a key. Standalone: the one
// server. Cluster: the master serving the key's slot, from a map loaded with CLUSTER SLOTS
// and corrected by MOVED. Sentinel: the master the sentinels name, confirmed with ROLE.
#pragma once

#include "connection.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail {

/// Sentinel: asks the sentinels, in turn, where the master named `sentinel_master` is.
/// Each sentinel has one connection (its own AUTH: sentinel_username/sentinel_password),
/// idle between questions. All member functions must be called on the strand.
class SentinelLocator : public std::enable_shared_from_this<SentinelLocator> {
 public:
  SentinelLocator(Connection::Strand strand, const ConnectionConfig& config,
                  const std::string& client_name, std::shared_ptr<boost::asio::ssl::context> tls);
  /// Calls back exactly once: the master's address, or master_not_found (no sentinel
  /// named one), or the sentinels' AUTH error if they refused us.
  void locate(Connection::LocateDone done);
  void shutdown() noexcept;

 private:
  void ask(std::size_t tried, boost::system::error_code refused, Connection::LocateDone done);

  std::string master_;
  std::vector<std::shared_ptr<Connection>> sentinels_;
  std::size_t preferred_ = 0;  // the sentinel that answered last is asked first
};

/// All member functions must be called on the strand its connections share.
class Router : public std::enable_shared_from_this<Router> {
 public:
  /// Each node has up to four connections: lock commands; durable acquires (WAIT blocks
  /// its connection); pub/sub for waiters; and (Cluster) topology queries. CLUSTER SLOTS
  /// has a connection of its own so that a slot map the parser refuses, or a slow one, can
  /// never fail or hold up lock commands: a link dropped with protocol_error fails every
  /// command written on it.
  enum class Pool : std::size_t { commands = 0, durable = 1, subscriber = 2, topology = 3 };
  static constexpr std::size_t no_node = static_cast<std::size_t>(-1);
  /// Prepares a new subscriber connection of node `node` (push and link-down handlers).
  using SubscriberSetup = std::function<void(Connection&, std::size_t node)>;

  Router(Connection::Strand strand, ConnectionConfig config, std::string client_name,
         std::shared_ptr<boost::asio::ssl::context> tls);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  /// Scripts every command connection loads in its handshake (see Connection::set_preload).
  void set_preload(std::vector<std::string_view> scripts) { preload_ = std::move(scripts); }
  /// Set once, before the first subscriber connection is made.
  void set_subscriber_setup(SubscriberSetup setup) { setup_ = std::move(setup); }
  bool cluster() const noexcept { return config_.topology == Topology::cluster; }
  /// Cluster and Redlock: a connection per node of `nodes`, each at its own address.
  bool many_nodes() const noexcept {
    return cluster() || config_.topology == Topology::redlock;
  }

  /// The node serving `slot`. While the Cluster's map is unknown: a node that answered
  /// before (or the first seed), and a load of the map is started.
  std::size_t node_for(std::uint16_t slot);
  /// The node at `address` ("host:port", as MOVED and ASK give it), added if new. An empty
  /// host means the host of node `from`, which sent the redirection.
  std::size_t node_at(std::string_view address, std::size_t from);
  Connection& connection(std::size_t node, Pool pool);
  /// MOVED: `node` serves `slot` now. The rest of the map is likely stale too: reload it.
  void moved(std::uint16_t slot, std::size_t node);
  /// A node failed (connection lost, timeout) or the map may be stale: reload it soon.
  /// At most one load at a time, and at most one every `min_refresh_interval`.
  void refresh();
  /// Calls `fn(node)` for every node that has a subscriber connection.
  void for_each_subscriber(const std::function<void(std::size_t, Connection&)>& fn);
  void shutdown() noexcept;

  static constexpr std::chrono::milliseconds min_refresh_interval{100};
  /// Sentinel: while commands flow, the sentinels are asked this often whether the master
  /// is still where our connections go (a master demoted by a failover may keep accepting
  /// writes until the sentinels reconfigure it, up to ~10 s later).
  static constexpr std::chrono::milliseconds verify_interval{1000};

 private:
  struct Node {
    Endpoint endpoint;
    std::string address;  // host:port
    std::array<std::shared_ptr<Connection>, 4> pools;
  };
  std::size_t add_node(Endpoint endpoint);
  void verify_master();
  void query_slots(std::size_t tried);
  bool apply_slots(const Reply& reply, std::size_t from);
  void refresh_done();

  Connection::Strand strand_;
  ConnectionConfig config_;
  std::string client_name_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  SubscriberSetup setup_;
  std::vector<std::string_view> preload_;
  std::shared_ptr<SentinelLocator> locator_;  // Sentinel only
  bool verifying_ = false;
  std::chrono::steady_clock::time_point next_verify_{};
  std::vector<Node> nodes_;  // seeds first, then nodes learned from the map or redirections
  std::map<std::string, std::size_t, std::less<>> by_address_;
  std::vector<std::int32_t> slots_;  // Cluster: node index per slot, -1 unknown
  std::size_t fallback_ = 0;         // a node that answered the last map query
  bool map_loaded_ = false;
  bool refreshing_ = false;
  bool refresh_again_ = false;
  std::size_t next_candidate_ = 0;
  std::chrono::steady_clock::time_point last_refresh_{};
  std::unique_ptr<boost::asio::steady_timer> refresh_timer_;
  bool refresh_timer_armed_ = false;
  bool shut_down_ = false;
};

}  // namespace redis_lock::detail
