// SPDX-License-Identifier: MIT
// Sentinel: one master, the one the sentinels (ConnectionConfig::nodes) name for
// sentinel_master; each connection confirms it with ROLE, and the router asks the sentinels
// again while commands flow (a demoted master may accept writes for a while).
#include "topology.hpp"

#include <algorithm>

namespace redis_lock::detail {

namespace {

class Sentinel final : public Shape {
 public:
  std::string_view check(const ConnectionConfig& config) const noexcept override {
    const auto printable = [](unsigned char c) { return c > ' ' && c <= '~'; };
    const auto& name = config.sentinel_master;
    if (name.empty() || !std::all_of(name.begin(), name.end(), printable)) {
      return "Topology::sentinel needs a sentinel_master name of printable characters";
    }
    return {};
  }
  Routing routing() const noexcept override { return {.located = true}; }
};

}  // namespace

const Shape& sentinel_shape() noexcept {
  static const Sentinel shape;
  return shape;
}

}  // namespace redis_lock::detail
