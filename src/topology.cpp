// SPDX-License-Identifier: MIT
#include "topology.hpp"

#include "keys.hpp"
#include "router.hpp"

#include <map>
#include <mutex>

namespace redis_lock::detail {

std::uint16_t Shape::slot_of(std::string_view key) const noexcept {
  return routing().slot_map ? key_slot(key) : 0;
}

void Shape::send(const std::shared_ptr<Router>& router, const ConnectionConfig& /*config*/,
                 std::shared_ptr<Routed> op) const {
  router->send(std::move(op));
}

bool Shape::preloads(scripts::Preload preload) const noexcept {
  return preload == scripts::Preload::everywhere || preload == scripts::Preload::one_master;
}

namespace {

struct Registry {
  std::mutex mutex;
  std::map<Topology, const Shape*> added;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const Shape* find_shape(Topology topology) noexcept {
  switch (topology) {
    case Topology::standalone:
      return &standalone_shape();
    case Topology::cluster:
      return &cluster_shape();
    case Topology::sentinel:
      return &sentinel_shape();
    case Topology::redlock:
      return &redlock_shape();
  }
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.added.find(topology);
  return it == r.added.end() ? nullptr : it->second;
}

void register_shape(Topology topology, const Shape& shape) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.added[topology] = &shape;
}

}  // namespace redis_lock::detail
