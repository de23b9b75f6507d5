// SPDX-License-Identifier: MIT
#include "tls.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/ssl/context.hpp>

namespace redis_lock::detail {

namespace ssl = boost::asio::ssl;
using boost::system::error_code;

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
