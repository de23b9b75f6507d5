// SPDX-License-Identifier: MIT
#include "validate.hpp"

#include <redis_lock/error.hpp>

#include <algorithm>
#include <vector>

namespace redis_lock::detail {

namespace {

Violation broken(std::string_view rule) noexcept {
  return {make_error_code(error::invalid_argument), rule};
}

Violation check_topology(const ConnectionConfig& config) {
  const Shape* shape = find_shape(config.topology);
  const auto routing = shape ? shape->routing() : Routing{};
  if (!routing.located && (!config.sentinel_master.empty() || !config.sentinel_username.empty() ||
                           !config.sentinel_password.empty())) {
    return broken(
        "sentinel_master, sentinel_username and sentinel_password need Topology::sentinel");
  }
  if (!shape) return broken("unknown topology");
  if (const auto rule = shape->check(config); !rule.empty()) return broken(rule);
  if (!routing.many_nodes && !routing.located) return {};
  if (!config.unix_socket.empty())
    return broken("a Cluster, Sentinel or Redlock is reached over TCP, not unix_socket");
  for (const auto& node : config.nodes) {
    if (node.host.empty() || node.port == 0) return broken("every node needs a host and a port");
  }
  return {};
}

}  // namespace

Violation check(const ConnectionConfig& config) {
  const bool has_tls_settings = !config.tls_ca_file.empty() || !config.tls_cert_file.empty() ||
                                !config.tls_key_file.empty() || !config.tls_server_name.empty() ||
                                !config.tls_verify;
  if (!config.tls && has_tls_settings) return broken("TLS settings need tls = true (rediss://)");
  if (config.tls && !config.unix_socket.empty())
    return broken("TLS is not offered over unix_socket");
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return broken("tls_cert_file and tls_key_file go together");
  }
  if (config.connect_timeout.count() <= 0) return broken("connect_timeout must be > 0");
  if (config.command_timeout.count() <= 0) return broken("command_timeout must be > 0");
  if (config.unix_socket.empty() && (config.host.empty() || config.port == 0)) {
    return broken("a host and a port (or a unix_socket) are needed");
  }
  if (config.database < 0) return broken("database must be >= 0");
  return check_topology(config);
}

Violation check(const ManagerOptions& options) {
  // A brace in the prefix would become the keys' hash tag: the lease and its fencing
  // counter could land in different Cluster slots.
  if (options.key_prefix.find_first_of("{}") != std::string::npos) {
    return broken("key_prefix must not contain braces");
  }
  // Redis refuses client names with spaces, newlines or other unprintable bytes.
  if (!is_printable_word(options.client_name)) {
    return broken("client_name must be printable characters without spaces");
  }
  return check_label(options.holder_label);
}

Violation check_label(std::string_view label) {
  if (label.size() > max_label_size) return broken("holder_label must be at most 128 characters");
  if (!std::all_of(label.begin(), label.end(), [](char c) { return c >= 0x20 && c <= 0x7e; })) {
    return broken("holder_label must be printable ASCII characters");
  }
  return {};
}

Violation check_value(std::string_view value) {
  if (value.size() > max_value_size) {
    return broken("an election's value must be at most 1024 bytes");
  }
  return {};
}

Violation check(Feature feature, const Shape& shape) {
  const auto rule = shape.refuses(feature);
  return rule.empty() ? Violation{} : broken(rule);
}

Violation check_admin(std::string_view resource, const Shape& shape) {
  if (resource.empty()) return broken("the resource name must not be empty");
  return check(Feature::admin, shape);
}

Violation check(std::string_view resource, const LockOptions& options, const Shape& shape) {
  if (resource.empty()) return broken("the resource name must not be empty");
  if (options.ttl.count() <= 0) return broken("LockOptions::ttl must be > 0");
  if (options.ttl > max_ttl) return broken("LockOptions::ttl must be at most 10 years");
  if (options.wait.count() < 0) return broken("LockOptions::wait must be >= 0");
  if (options.renew_every.count() < 0) return broken("LockOptions::renew_every must be >= 0");
  if (options.max_hold.count() < 0) return broken("LockOptions::max_hold must be >= 0");
  if (options.min_replicas < 0) return broken("LockOptions::min_replicas must be >= 0");
  if (options.min_replicas > 0) {
    if (auto refused = check(Feature::min_replicas, shape)) return refused;
  }
  if (options.replication_timeout.count() < 0) {
    return broken("LockOptions::replication_timeout must be >= 0");
  }
  // WAIT with a zero timeout blocks until the replicas answer, however long.
  if (options.min_replicas > 0 && options.replication_timeout.count() == 0) {
    return broken("LockOptions::replication_timeout must be > 0 with min_replicas");
  }
  return {};
}

Violation check(LockKind kind, const Shape& shape) {
  if (kind.type == AcquireKind::mutex) return {};
  // An election's leadership is taken by Election::async_campaign alone (its value, its
  // announcements, its renewal).
  if (kind.type == AcquireKind::election) return broken("an election is taken with async_campaign");
  if (kind.type == AcquireKind::permit && kind.limit == 0) {
    return broken("a semaphore's limit must be > 0");
  }
  return check(Feature::lease_sets, shape);
}

Violation check_all(std::span<const std::string> resources) {
  if (resources.empty()) return broken("async_acquire_all needs at least one resource");
  std::vector<std::string_view> names(resources.begin(), resources.end());
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    return broken("async_acquire_all names each resource once");
  }
  return {};
}

Violation check_extension(std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0) return broken("the extension's ttl must be > 0");
  if (ttl > max_ttl) return broken("the extension's ttl must be at most 10 years");
  return {};
}

}  // namespace redis_lock::detail
