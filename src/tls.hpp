// SPDX-License-Identifier: MIT
// TLS for rediss://: the OpenSSL context a configuration's connections share.
#pragma once

#include <redis_lock/config.hpp>

#include <boost/system/error_code.hpp>

#include <memory>

namespace boost::asio::ssl {
class context;
}

namespace redis_lock::detail {

/// The client context for `config` (TLS 1.2 or later; verification of the server's chain
/// and name unless `tls_verify` is off; the client certificate if given). Files are read
/// here, once. Fails with `error::tls_config_invalid`.
boost::system::error_code make_tls_context(const ConnectionConfig& config,
                                           std::shared_ptr<boost::asio::ssl::context>& out);

}  // namespace redis_lock::detail
