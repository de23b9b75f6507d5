// SPDX-License-Identifier: MIT
#include "tls.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/ssl/context.hpp>

namespace redis_lock::detail {

namespace ssl = boost::asio::ssl;
using boost::system::error_code;

bool is_printable_word(std::string_view text) noexcept {
  for (unsigned char c : text) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

namespace {

error_code validate_topology(const ConnectionConfig& config) {
  const bool sentinel = config.topology == Topology::sentinel;
  if (!sentinel && (!config.sentinel_master.empty() || !config.sentinel_username.empty() ||
                    !config.sentinel_password.empty())) {
    return error::invalid_argument;
  }
  switch (config.topology) {
    case Topology::standalone:
      if (!config.nodes.empty()) return error::invalid_argument;
      return {};
    case Topology::cluster:
      if (config.database != 0) return error::invalid_argument;  // a Cluster has database 0 only
      break;
    case Topology::sentinel:
      if (config.sentinel_master.empty() || !is_printable_word(config.sentinel_master)) {
        return error::invalid_argument;
      }
      break;
    case Topology::redlock:
      if (config.nodes.size() < 3) return error::invalid_argument;  // no majority to speak of
      // The same master twice would count twice towards the majority.
      for (std::size_t i = 0; i < config.nodes.size(); ++i) {
        for (std::size_t j = i + 1; j < config.nodes.size(); ++j) {
          if (config.nodes[i] == config.nodes[j]) return error::invalid_argument;
        }
      }
      break;
    default:
      return error::invalid_argument;
  }
  if (!config.unix_socket.empty()) return error::invalid_argument;  // nodes are TCP
  for (const auto& node : config.nodes) {
    if (node.host.empty() || node.port == 0) return error::invalid_argument;
  }
  return {};
}

}  // namespace

error_code validate(const ConnectionConfig& config) {
  const bool has_tls_settings = !config.tls_ca_file.empty() || !config.tls_cert_file.empty() ||
                                !config.tls_key_file.empty() || !config.tls_server_name.empty() ||
                                !config.tls_verify;
  if (!config.tls && has_tls_settings) return error::invalid_argument;
  if (config.tls && !config.unix_socket.empty()) return error::invalid_argument;
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) return error::invalid_argument;
  if (config.connect_timeout.count() <= 0 || config.command_timeout.count() <= 0) {
    return error::invalid_argument;
  }
  if (config.unix_socket.empty() && (config.host.empty() || config.port == 0)) {
    return error::invalid_argument;
  }
  if (config.database < 0) return error::invalid_argument;
  return validate_topology(config);
}

error_code make_tls_context(const ConnectionConfig& config, std::shared_ptr<ssl::context>& out) {
  if (!config.tls) return {};
  try {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                     ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                     ssl::context::no_compression);
    if (config.tls_verify) {
      if (config.tls_ca_file.empty()) {
        ctx->set_default_verify_paths();
      } else {
        ctx->load_verify_file(config.tls_ca_file);
      }
      ctx->set_verify_mode(ssl::verify_peer);
    } else {
      ctx->set_verify_mode(ssl::verify_none);
    }
    if (!config.tls_cert_file.empty()) {
      ctx->use_certificate_chain_file(config.tls_cert_file);
      ctx->use_private_key_file(config.tls_key_file, ssl::context::pem);
    }
    out = std::move(ctx);
    return {};
  } catch (const boost::system::system_error&) {
    return error::tls_config_invalid;
  }
}

}  // namespace redis_lock::detail
