// SPDX-License-Identifier: MIT
// A command on a blocking hiredis connection, its words sent as they are (binary-safe): for
// the tests' and the soak workers' own reads and writes beside the library.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <vector>

namespace redis_lock::test {

struct FreeReply {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, FreeReply>;

/// The reply to `words`, or null when the connection failed (`c->errstr` says why).
inline ReplyPtr raw_command(redisContext* c, const std::vector<std::string>& words) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& w : words) {
    argv.push_back(w.data());
    lens.push_back(w.size());
  }
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

}  // namespace redis_lock::test
