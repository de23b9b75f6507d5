// SPDX-License-Identifier: MIT
// Redlock: several independent masters (ConnectionConfig::nodes, at least 3). Each script call
// goes to every master at once and a majority decides (quorum_call.cpp); a lease is the same
// bare key on each, with no info beside it, no queue and no hand-off (waiters retry), and what
// one attempt took is given back on each master on its own. The features that would need
// quorum rules of their own are not offered (docs/safety.md).
#include "topology.hpp"

#include "quorum_call.hpp"

namespace redis_lock::detail {

namespace {

class Redlock final : public Shape {
 public:
  std::string_view check(const ConnectionConfig& config) const noexcept override {
    if (config.nodes.size() < 3) return "Topology::redlock needs at least 3 nodes";
    // The same master twice would count twice towards the majority.
    for (std::size_t i = 0; i < config.nodes.size(); ++i) {
      for (std::size_t j = i + 1; j < config.nodes.size(); ++j) {
        if (config.nodes[i] == config.nodes[j]) return "Redlock nodes must be distinct";
      }
    }
    return {};
  }
  Routing routing() const noexcept override { return {.many_nodes = true}; }

  void send(const std::shared_ptr<Router>& router, const ConnectionConfig& config,
            std::shared_ptr<Routed> op) const override {
    auto acquire = op->quorum_acquire();
    fan_out(router, router->strand(), config.nodes.size(), config.command_timeout, std::move(op),
            std::move(acquire));
  }

  Attempt attempt() const noexcept override { return Attempt::vote; }
  bool queues() const noexcept override { return false; }
  bool keeps_info() const noexcept override { return false; }
  bool groups() const noexcept override { return false; }
  bool gives_back_per_node() const noexcept override { return true; }
  bool preloads(scripts::Preload preload) const noexcept override {
    return preload == scripts::Preload::everywhere || preload == scripts::Preload::redlock;
  }

  std::string_view refuses(Feature feature) const noexcept override {
    switch (feature) {
      case Feature::lease_sets:
        // A lease set per master would need its own quorum rules.
        return "semaphores and read-write locks are not offered on Redlock";
      case Feature::admin:
        return "inspection, force-release and elections are not offered on Redlock";
      case Feature::min_replicas:
        return "LockOptions::min_replicas is not offered on Redlock";
      case Feature::labels:
        return "holder labels are not recorded on Redlock";
      case Feature::idempotency:
        return "an IdempotencyStore is not offered on Redlock";
    }
    return {};
  }
};

}  // namespace

const Shape& redlock_shape() noexcept {
  static const Redlock shape;
  return shape;
}

}  // namespace redis_lock::detail
