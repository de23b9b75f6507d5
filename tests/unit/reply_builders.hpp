// SPDX-License-Identifier: MIT
// Replies as a server would send them, for the sans-io tests.
#pragma once

#include "resp.hpp"

#include <string>

namespace redis_lock::test {

inline detail::Reply integer(long long v) {
  detail::Reply r;
  r.type = detail::Reply::Type::integer;
  r.integer = v;
  return r;
}
inline detail::Reply pair(long long a, long long b) {
  detail::Reply r;
  r.type = detail::Reply::Type::array;
  r.elements = {integer(a), integer(b)};
  return r;
}
inline detail::Reply error_reply(std::string text) {
  detail::Reply r;
  r.type = detail::Reply::Type::error;
  r.str = std::move(text);
  return r;
}
inline detail::Reply text(std::string s) {
  detail::Reply r;
  r.type = detail::Reply::Type::string;
  r.str = std::move(s);
  return r;
}

}  // namespace redis_lock::test
