// SPDX-License-Identifier: MIT
// TLS for rediss://: the checks on a ConnectionConfig that need no I/O, and the OpenSSL
// context its connections share.
#pragma once

#include <redis_lock/config.hpp>

#include <boost/system/error_code.hpp>

#include <memory>
#include <string_view>

namespace boost::asio::ssl {
class context;
}

namespace redis_lock::detail {

/// Printable ASCII without spaces (Redis refuses other bytes in client and master names).
bool is_printable_word(std::string_view text) noexcept;

/// Checks what can be checked without I/O: TLS settings only with `tls`, a certificate only
/// with its key, no TLS over a Unix socket, timeouts > 0, a host and a port (or a socket), a
/// database >= 0. `error::invalid_argument` if not.
boost::system::error_code validate(const ConnectionConfig& config);

/// The client context for `config` (TLS 1.2 or later; verification of the server's chain
/// and name unless `tls_verify` is off; the client certificate if given). Files are read
/// here, once. Fails with `error::tls_config_invalid`.
boost::system::error_code make_tls_context(const ConnectionConfig& config,
                                           std::shared_ptr<boost::asio::ssl::context>& out);

}  // namespace redis_lock::detail
