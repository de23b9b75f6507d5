// SPDX-License-Identifier: MIT
// Error messages that say where and why: "could not connect to 10.0.0.5:6379: Connection
// refused" rather than "could not connect".
#pragma once

#include <redis_lock/config.hpp>

#include <boost/system/error_code.hpp>

#include <string>
#include <string_view>

namespace redis_lock::cli {

/// host:port, the socket path, or the nodes of a multi-server deployment.
std::string describe_target(const ConnectionConfig& config);
/// The failure of an acquire, with the target and, for connection failures, the reason
/// found by probing the server once more (refused, unresolvable, plain text on a TLS URL).
std::string describe_failure(const ConnectionConfig& config, boost::system::error_code ec,
                             std::string_view server_error);

}  // namespace redis_lock::cli
