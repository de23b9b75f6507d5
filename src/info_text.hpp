// SPDX-License-Identifier: MIT
// Reading INFO's text: "name:value" lines, CRLF-separated, "# Section" headers between them.
#pragma once

#include <optional>
#include <string_view>

namespace redis_lock::detail {

/// The value of `name` in an INFO text; none when the text has no such line.
inline std::optional<std::string_view> info_field(std::string_view info, std::string_view name) {
  while (!info.empty()) {
    const auto end = info.find('\n');
    auto line = info.substr(0, end);
    info = end == std::string_view::npos ? std::string_view{} : info.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > name.size() && line.starts_with(name) && line[name.size()] == ':') {
      return line.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace redis_lock::detail
