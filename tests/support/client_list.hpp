// SPDX-License-Identifier: MIT
// Counting a server's clients by the name a manager gave its connections (CLIENT SETNAME:
// `<client_name>`, `<client_name>:sub`, `<client_name>:topology`).
#pragma once

#include "redis_server.hpp"

#include <cstdint>
#include <string>

namespace redis_lock::test {

/// How many clients of the server on `port` are named exactly `name` (CLIENT LIST).
inline int clients_named(std::uint16_t port, const std::string& name) {
  const auto list = redis_command(port, {"CLIENT", "LIST"});
  const auto field = " name=" + name + " ";
  int n = 0;
  for (std::size_t at = 0; (at = list.find(field, at)) != std::string::npos; ++at) ++n;
  return n;
}

}  // namespace redis_lock::test
