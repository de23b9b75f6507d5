// SPDX-License-Identifier: MIT
// libFuzzer target: the reply path. Arbitrary bytes, as a malicious or broken server could
// send them, fed to the reply reader in chunks whose sizes come from the input too.
#include "resp.hpp"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  redis_lock::detail::ReplyReader reader;
  std::size_t replies = 0;
  for (std::size_t pos = 1; pos < size; pos += chunk) {
    const std::size_t n = pos + chunk <= size ? chunk : size - pos;
    if (!reader.feed(reinterpret_cast<const char*>(data + pos), n)) return 0;
    for (;;) {
      bool failed = false;
      auto reply = reader.next(failed);
      if (failed) return 0;  // the connection would be dropped: fine
      if (!reply) break;
      ++replies;
    }
  }
  return 0;
}
