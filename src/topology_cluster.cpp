// SPDX-License-Identifier: MIT
// Redis Cluster: each command goes to the master serving its key's slot (the router's slot
// map, corrected by MOVED and ASK); hand-offs are published on sharded channels, which stay
// on the slot's shard. A lease and everything beside it share one hash tag (keys.hpp), so
// every script runs on one master as on a standalone server.
#include "topology.hpp"

namespace redis_lock::detail {

namespace {

class Cluster final : public Shape {
 public:
  std::string_view check(const ConnectionConfig& config) const noexcept override {
    if (config.database != 0) return "a Cluster has database 0 only";
    return {};
  }
  Routing routing() const noexcept override { return {.many_nodes = true, .slot_map = true}; }
};

}  // namespace

const Shape& cluster_shape() noexcept {
  static const Cluster shape;
  return shape;
}

}  // namespace redis_lock::detail
