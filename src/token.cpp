// SPDX-License-Identifier: MIT
// Tokens straight from getrandom(2) on each call: no user-space pool, so a fork() can never
// make two processes hand out the same token.
#include "token.hpp"

#include <cerrno>
#include <cstdint>
#include <system_error>

#include <sys/random.h>

namespace redis_lock::detail {

std::string random_token() {
  std::uint8_t bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < sizeof bytes; ++i) {
    out[2 * i] = hex[bytes[i] >> 4];
    out[2 * i + 1] = hex[bytes[i] & 0xf];
  }
  return out;
}

}  // namespace redis_lock::detail
