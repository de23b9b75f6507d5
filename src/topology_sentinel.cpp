// SPDX-License-Identifier: MIT
// Sentinel: one master, the one the sentinels (ConnectionConfig::nodes) name for
// sentinel_master; each connection confirms it with ROLE, and the router asks the sentinels
// again while commands flow (a demoted master may accept writes for a while).
#include "printable.hpp"
#include "topology.hpp"

namespace redis_lock::detail {

namespace {

class Sentinel final : public Shape {
 public:
  std::string_view check(const ConnectionConfig& config) const noexcept override {
    if (config.sentinel_master.empty() || !is_printable_word(config.sentinel_master)) {
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
