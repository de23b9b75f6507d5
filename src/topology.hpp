// SPDX-License-Identifier: MIT
// Layer 3 (topology): the one seam between the engine and a deployment's shape. What differs
// between standalone, Cluster, Sentinel and Redlock is asked of a Shape: how the router
// reaches the servers, how a command is sent (to one server, or to every master for a vote),
// what one attempt is (and so what an outage means to it), which scripts every connection
// loads, and which features the shape cannot offer. The engine and its ops never ask which
// topology they run on. Each shape is one file (topology_<name>.cpp); a new one is one more
// file, registered under its Topology value (tests/unit/topology_test.cpp runs a manager on a
// shape defined in the test alone).
#pragma once

#include "attempt.hpp"
#include "script_words.hpp"

#include <redis_lock/config.hpp>
#include <redis_lock/export.hpp>

#include <cstdint>
#include <memory>
#include <string_view>

namespace redis_lock::detail {

class Router;
struct Routed;

/// How the router reaches a shape's servers (router.cpp reads nothing else of it).
struct Routing {
  /// A connection per node of ConnectionConfig::nodes, each at its own address (else one
  /// server: ConnectionConfig::host and port, or its Unix socket).
  bool many_nodes = false;
  /// A command goes to the node serving its key's slot, from a map loaded with CLUSTER SLOTS
  /// and corrected by MOVED and ASK; hand-offs are published on sharded channels (SPUBLISH).
  bool slot_map = false;
  /// The one server is the master the sentinels name (and ROLE confirms).
  bool located = false;
};

/// What a shape may not offer. Each refusal is a rule, told to the caller before anything is
/// sent (error::invalid_argument).
enum class Feature : unsigned char {
  lease_sets,    ///< semaphores and read-write locks
  admin,         ///< inspection, force-release, elections
  min_replicas,  ///< LockOptions::min_replicas (WAIT after a grant)
  labels,        ///< a holder's label beside the lease (async_touch)
  idempotency,   ///< an IdempotencyStore's records
};

class REDIS_LOCK_EXPORT Shape {
 public:
  virtual ~Shape() = default;

  /// The rule a ConnectionConfig of this shape breaks (beyond those every shape shares), or
  /// an empty view.
  virtual std::string_view check(const ConnectionConfig& config) const noexcept = 0;
  virtual Routing routing() const noexcept = 0;

  /// The slot that routes the commands on `key` (0 without a slot map).
  std::uint16_t slot_of(std::string_view key) const noexcept;
  /// Sends a script call: by default through the router to the node serving its slot.
  virtual void send(const std::shared_ptr<Router>& router, const ConnectionConfig& config,
                    std::shared_ptr<Routed> op) const;

  /// What one attempt of an acquire is. By default one command on one server.
  virtual Attempt attempt() const noexcept { return Attempt::one_server; }
  /// Whether waiters queue on the server, in order, and hear of a release that hands the lock
  /// on (published on the notify channel). Else they retry with backoff.
  virtual bool queues() const noexcept { return true; }
  /// Whether a lease has an info key beside it (its holder's label, its fencing token kept
  /// across the lease's expiry).
  virtual bool keeps_info() const noexcept { return true; }
  /// Whether several resources on one server may be taken by one script call.
  virtual bool groups() const noexcept { return true; }
  /// Whether a give-back is sent to each node on its own, each retried on its own (else it
  /// is routed like any release, and may be written without Asio at shutdown).
  virtual bool gives_back_per_node() const noexcept { return false; }
  /// Whether every command connection loads a script of this Preload in its handshake.
  virtual bool preloads(scripts::Preload preload) const noexcept;
  /// The rule that refuses `feature` here, or an empty view when it is offered.
  virtual std::string_view refuses(Feature /*feature*/) const noexcept { return {}; }
};

/// The shape registered for `topology`: the four built-in ones, or one a test registered. A
/// value nothing is registered for: none (check(config) refuses it).
REDIS_LOCK_EXPORT const Shape* find_shape(Topology topology) noexcept;
/// Registers `shape` (which must outlive every manager that uses it) for `topology`, a value
/// none of the built-in shapes has. For tests of the seam.
REDIS_LOCK_EXPORT void register_shape(Topology topology, const Shape& shape);

/// The built-in shapes (topology_<name>.cpp).
const Shape& standalone_shape() noexcept;
const Shape& cluster_shape() noexcept;
const Shape& sentinel_shape() noexcept;
const Shape& redlock_shape() noexcept;

}  // namespace redis_lock::detail
