// SPDX-License-Identifier: MIT
// Standalone: one server, at ConnectionConfig::host and port or on its Unix socket. Every
// default of Shape is its.
#include "topology.hpp"

namespace redis_lock::detail {

namespace {

class Standalone final : public Shape {
 public:
  std::string_view check(const ConnectionConfig& config) const noexcept override {
    if (!config.nodes.empty()) return "nodes need Topology::cluster, sentinel or redlock";
    return {};
  }
  Routing routing() const noexcept override { return {}; }
};

}  // namespace

const Shape& standalone_shape() noexcept {
  static const Standalone shape;
  return shape;
}

}  // namespace redis_lock::detail
