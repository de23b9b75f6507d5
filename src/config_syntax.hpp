// SPDX-License-Identifier: MIT
// Layer 5 (public API): the syntax diagnosis of ConnectionConfig::from_url (src/config.cpp):
// why a URL is refused, part by part, and the reasons both files give.
#pragma once

#include <string>
#include <string_view>

namespace redis_lock::detail {

inline constexpr std::string_view kUnixForm =
    "unix socket URL: no host or port; write unix:///path/to/redis.sock (three slashes)";
inline constexpr std::string_view kFragment =
    "a fragment ('#...') is not allowed (a '#' in a password is written %23)";
inline constexpr std::string_view kHostMissing = "host is missing (write redis://host:port)";
inline constexpr std::string_view kNoSlashes =
    "missing '//' after the scheme (write redis://host:port)";

// `rest`: the URL after "scheme://". A '/', '?' or '#' in a user name or password ends the
// authority early, so the '@' turns up further on. Only reported for URLs that are refused
// anyway (a '@' in a database path, in a query parameter without a value, in a fragment).
bool at_after_host(std::string_view rest, bool path_may_hold_at);

// Why Boost.URL refused `rest` (the URL after "scheme:"), part by part; `otherwise` if no
// part is at fault by RFC 3986.
std::string explain_syntax(std::string_view rest, bool is_unix, std::string_view otherwise);

}  // namespace redis_lock::detail
