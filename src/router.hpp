// SPDX-License-Identifier: MIT
// Layer 3 (topology): which connection carries a command for a key. Standalone: the one
// server. Cluster: the master serving the key's slot, from a map loaded with CLUSTER SLOTS
// and corrected by MOVED. Sentinel: the master the sentinels name, confirmed with ROLE.
#pragma once

#include "connection.hpp"
#include "redirect.hpp"
#include "sentinel_locator.hpp"
#include "slot_map.hpp"
#include "topology.hpp"

#include <redis_lock/observer.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail {

inline constexpr std::size_t no_node = static_cast<std::size_t>(-1);

/// What the fan-out of an acquire needs beyond its command.
struct QuorumAcquire {
  std::string lease_token;  ///< the token of the attempt this call carries
  std::string fence_key;    ///< raised on masters behind the minted token
  std::chrono::milliseconds ttl{};
  std::chrono::steady_clock::time_point attempt_started{};
  /// Gives back on master `node` what this attempt may hold there.
  std::function<void(std::size_t node)> give_back;
};

/// A command the router delivers: to the node serving `slot` (or to `pinned`), following
/// MOVED and ASK, retrying TRYAGAIN and CLUSTERDOWN while the slot moves, and sending a
/// script once more with its body after NOSCRIPT. The views in `argv` must stay valid while
/// it is in flight (an engine op points them into its own strings).
struct Routed {
  virtual ~Routed() = default;
  /// The final reply or error. (Dropped, as Asio drops handlers, once the router shut down.)
  virtual void on_reply(boost::system::error_code ec, Reply reply) = 0;
  /// Where a reply that comes after the command timed out goes (none by default).
  virtual std::shared_ptr<LateReplies> late_replies() { return nullptr; }
  /// A vote's fan-out (quorum_call.hpp): what it needs to decide an acquire (nothing for
  /// other calls).
  virtual std::optional<QuorumAcquire> quorum_acquire() { return std::nullopt; }

  std::span<const std::string_view> command() const noexcept {
    return {long_argv.empty() ? argv.data() : long_argv.data(), argc};
  }
  /// The command's words, to change in place (argv, or long_argv when that is used).
  std::string_view* words() noexcept { return long_argv.empty() ? argv.data() : long_argv.data(); }
  /// Before the same command is sent again from the start (a retry by its owner).
  void rearm() noexcept { tries = {}; }

  std::array<std::string_view, 16> argv{};
  std::size_t argc = 0;
  /// A command of more than 16 words (a group acquire) has them here instead of in argv.
  std::vector<std::string_view> long_argv;
  std::string_view script_body;  ///< NOSCRIPT: sent once more as EVAL with this body
  std::uint16_t slot = 0;        ///< routes the command (Cluster)
  std::size_t pinned = no_node;  ///< or: always to this node (a Redlock master)
  bool durable = false;          ///< on the connection that may block on WAIT
  bool sent_body = false;        ///< the NOSCRIPT resend happened
  std::size_t node = no_node;    ///< where it was sent last
  redirect::Tries tries;
  /// TRYAGAIN/CLUSTERDOWN are retried at least until then (a waiting acquire's deadline).
  std::chrono::steady_clock::time_point patience{};
  /// Redlock: each master's answer (filled by the quorum fan-out).
  std::vector<NodeResult> node_results;
};

/// A command that owns its bytes: a Redlock call's, which may be resent after NOSCRIPT when
/// the op it came from has moved on to another attempt (and another token).
struct OwnedCommand {
  explicit OwnedCommand(std::span<const std::string_view> argv) : args(argv.begin(), argv.end()) {}
  std::vector<std::string> args;
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
  static constexpr std::size_t no_node = detail::no_node;
  /// Prepares a new subscriber connection of node `node` (push and link-down handlers).
  using SubscriberSetup = std::function<void(Connection&, std::size_t node)>;

  /// `routing`: how the servers of `config` are reached (the shape's, topology.hpp).
  Router(Connection::Strand strand, ConnectionConfig config, Routing routing,
         std::string client_name, std::shared_ptr<boost::asio::ssl::context> tls);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  /// Scripts every command connection loads in its handshake (see Connection::set_preload).
  void set_preload(std::vector<std::string_view> scripts) { preload_ = std::move(scripts); }
  /// The scripts' Functions library every command connection loads (see
  /// Connection::set_functions); empty: none.
  void set_functions(std::string_view library, std::string_view probe) {
    function_library_ = library;
    function_probe_ = probe;
  }
  /// Every connection's refused handshakes (Connection::set_refusal_handler). Every
  /// connection of a node checks the server's version in its handshake.
  void set_refusal_handler(Connection::RefusalHandler on_refused) {
    on_refused_ = std::move(on_refused);
  }
  /// Every connection's handshake findings (Connection::set_notice_handler), and whether a
  /// node that evicts keys is used (ManagerOptions::accept_evicting_server). Set before the
  /// first connection is made.
  void set_notice_handler(Connection::NoticeHandler on_notice) {
    on_notice_ = std::move(on_notice);
  }
  void accept_evicting_server(bool on) noexcept { accept_evicting_ = on; }
  /// Set once, before the first subscriber connection is made.
  void set_subscriber_setup(SubscriberSetup setup) { setup_ = std::move(setup); }

  /// The node serving `slot`. While the Cluster's map is unknown: a node that answered
  /// before (or the first seed), and a load of the map is started.
  std::size_t node_for(std::uint16_t slot);
  /// The node at `address` ("host:port", as MOVED and ASK give it), added if new. An empty
  /// host means the host of node `from`, which sent the redirection.
  std::size_t node_at(std::string_view address, std::size_t from);
  Connection& connection(std::size_t node, Pool pool);
  /// Sends `op` to its node (`ask_node`: once there, after ASKING), and again as redirections,
  /// transient Cluster refusals and a script-cache miss ask; then `op->on_reply`.
  void send(std::shared_ptr<Routed> op, std::size_t ask_node = no_node);
  /// Runs `command` (an EVALSHA) on `node` alone; once more with `script_body` after NOSCRIPT.
  void send_to(std::size_t node, std::shared_ptr<const OwnedCommand> command,
               std::string_view script_body, Connection::Callback done,
               std::shared_ptr<LateReplies> late = nullptr);
  /// MOVED: `node` serves `slot` now. The rest of the map is likely stale too: reload it.
  void moved(std::uint16_t slot, std::size_t node);
  /// A node failed (connection lost, timeout) or the map may be stale: reload it soon.
  /// At most one load at a time, and at most one every `min_refresh_interval`.
  void refresh();
  const Connection::Strand& strand() const noexcept { return strand_; }
  /// Calls `fn(node)` for every node that has a subscriber connection.
  void for_each_subscriber(const std::function<void(std::size_t, Connection&)>& fn);
  /// Writes `command` at once on a command connection of `node` (Connection::write_now),
  /// while the context shuts down: on `only` (behind a command still in flight there, which
  /// it must follow), or on either without one. True when one took it.
  bool write_now(std::size_t node, std::optional<Pool> only,
                 std::span<const std::string_view> command) noexcept;
  void shutdown() noexcept;

  /// At most one load of a Cluster's slot map this often (SlotMap).
  static constexpr std::chrono::milliseconds min_refresh_interval{100};
  /// Sentinel: while commands flow, the sentinels are asked this often whether the master
  /// is still where our connections go (a master demoted by a failover may keep accepting
  /// writes until the sentinels reconfigure it, up to ~10 s later).
  static constexpr std::chrono::milliseconds verify_interval{1000};

 private:
  class LateMap;
  struct Node {
    Endpoint endpoint;
    std::string address;  // host:port
    std::array<std::shared_ptr<Connection>, 4> pools;
  };
  bool cluster() const noexcept { return routing_.slot_map; }
  bool many_nodes() const noexcept { return routing_.many_nodes; }
  std::size_t add_node(Endpoint endpoint);
  /// A redirection, a transient Cluster refusal or NOSCRIPT: resends `op` and returns true;
  /// false when the error is final (or out of redirections and time).
  bool resent(std::shared_ptr<Routed>& op, const Reply& reply);
  void verify_master();
  /// Does what the slot map decided: a query sent, the timer armed, the commands that
  /// waited for the map sent.
  void follow(const SlotMap::Action& act);
  void query_slots(std::size_t node, std::uint64_t query);
  /// The map that query number `query` got from node `from`, in time or late: applied
  /// unless a later query's map already was (SlotMap::applied); none if it is no map.
  std::optional<SlotMap::Action> take_map(const Reply& reply, std::size_t from,
                                          std::uint64_t query);

  Connection::Strand strand_;
  ConnectionConfig config_;
  Routing routing_;
  std::string client_name_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  SubscriberSetup setup_;
  std::vector<std::string_view> preload_;
  std::string_view function_library_;
  std::string_view function_probe_;
  Connection::RefusalHandler on_refused_;
  Connection::NoticeHandler on_notice_;
  bool accept_evicting_ = false;
  std::shared_ptr<SentinelLocator> locator_;  // a located master only
  bool verifying_ = false;
  std::chrono::steady_clock::time_point next_verify_{};
  std::vector<Node> nodes_;  // seeds first, then nodes learned from the map or redirections
  std::map<std::string, std::size_t, std::less<>> by_address_;
  std::optional<SlotMap> map_;  // Cluster: which node serves each slot, and its loads
  // Commands sent before the first map came: they go when its load ends (see send).
  std::vector<std::shared_ptr<Routed>> awaiting_map_;
  std::unique_ptr<boost::asio::steady_timer> refresh_timer_;
  bool shut_down_ = false;
};

}  // namespace redis_lock::detail
