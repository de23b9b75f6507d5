// SPDX-License-Identifier: MIT
#include "script_table.hpp"

namespace redis_lock::detail::scripts {

void encode(const AcquireGroup& call, std::vector<std::string_view>& out) {
  const std::size_t key_count = 1 + 3 * call.resources.size();
  *call.key_count = std::to_string(key_count);
  out.clear();
  out.reserve(3 + key_count + 3);
  out.insert(out.end(), {"EVALSHA", AcquireGroup::script.sha1, *call.key_count, call.fence});
  for (const auto& k : call.resources) out.insert(out.end(), {k.lease(), k.queue(), k.info()});
  out.insert(out.end(), {call.token, call.ttl_ms, call.data});
}

}  // namespace redis_lock::detail::scripts
