// SPDX-License-Identifier: MIT
// Layer 1: an integer as the decimal text a command argument carries (a ttl in ms, a count).
#pragma once

#include <charconv>
#include <string>

namespace redis_lock::detail {

inline std::string to_decimal(long long value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, end);
}

inline std::string to_decimal_u(unsigned long long value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, end);
}

}  // namespace redis_lock::detail
