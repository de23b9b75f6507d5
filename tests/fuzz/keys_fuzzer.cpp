// SPDX-License-Identifier: MIT
// libFuzzer target: key layout for arbitrary (binary) resource names and prefixes. Every key
// of a resource must share the lease key's Cluster slot, or the scripts would hit CROSSSLOT.
#include "keys.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = data[0] % 8;  // a short prefix, then the resource
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto prefix = rest.substr(0, split < rest.size() ? split : rest.size());
  const auto resource = rest.substr(prefix.size());
  // A prefix with braces would move the hash tag off the resource: prefixes are ours.
  if (prefix.find_first_of("{}") != std::string_view::npos) return 0;
  const auto keys = redis_lock::detail::make_keys(prefix, resource);
  const auto slot = redis_lock::detail::key_slot(keys.lease());
  if (redis_lock::detail::key_slot(keys.fence()) != slot ||
      redis_lock::detail::key_slot(keys.queue()) != slot ||
      redis_lock::detail::key_slot(keys.queue_expiry()) != slot) {
    std::abort();
  }
  return 0;
}
