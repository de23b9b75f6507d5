// SPDX-License-Identifier: MIT
// Layer 1 (protocol): the words Redis takes as names (a client's, a Sentinel master's).
#pragma once

#include <string_view>

namespace redis_lock::detail {

/// Printable ASCII without spaces (Redis refuses other bytes in client and master names).
constexpr bool is_printable_word(std::string_view text) noexcept {
  for (const unsigned char c : text) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace redis_lock::detail
