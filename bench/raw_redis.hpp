// SPDX-License-Identifier: MIT
// The benchmarks' raw hiredis baseline: a blocking connection and one-shot commands.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

inline redisContext* connect_or_exit(std::uint16_t port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err) {
    std::fprintf(stderr, "cannot connect to 127.0.0.1:%u\n", port);
    std::exit(1);
  }
  return c;
}

/// Runs one command; returns an integer reply in decimal, a string or status as is.
inline std::string command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  std::string out;
  if (r != nullptr) {
    if (r->type == REDIS_REPLY_INTEGER) {
      out = std::to_string(r->integer);
    } else if (r->str != nullptr) {
      out.assign(r->str, r->len);
    }
    freeReplyObject(r);
  }
  return out;
}

}  // namespace bench
