// SPDX-License-Identifier: MIT
// Error messages that say where and why: "could not connect to 10.0.0.5:6379: Connection
// refused" rather than "could not connect".
#pragma once

#include <redis_lock/config.hpp>

#include <boost/system/error_code.hpp>

#include <string>
#include <string_view>

namespace redis_lock::cli {

/// The length of the UTF-8 sequence at the start of `s`, 0 if it is not a valid one.
std::size_t utf8_sequence(std::string_view s);
/// Text safe for a terminal: control characters (C0, DEL, and C1 as U+0080..U+009F) and bytes
/// that are not UTF-8 become `\xNN` (`\u00NN` for C1), a backslash `\\`; so that a value
/// from the server (a holder's label, an error's text) cannot move the cursor, retitle the
/// window or change the colours.
std::string printable(std::string_view s);
/// A library's text for redis-lock's user: printable, with the option redis-lock has for a
/// ManagerOptions field it names (ManagerOptions::accept_evicting_server is
/// --accept-evicting-server).
std::string in_cli_words(std::string_view library_text);
/// host:port, the socket path, or the nodes of a multi-server deployment.
std::string describe_target(const ConnectionConfig& config);
/// The failure of an acquire, with the target and, for connection failures, the reason
/// found by probing the server once more (refused, unresolvable, plain text on a TLS URL).
std::string describe_failure(const ConnectionConfig& config, boost::system::error_code ec,
                             std::string_view server_error);

}  // namespace redis_lock::cli
