// SPDX-License-Identifier: MIT
// A soak's size from the environment (REDIS_LOCK_SOAK_PROCESSES, REDIS_LOCK_SOAK_ROUNDS, ...).
#pragma once

#include <cstdlib>

namespace redis_lock::test {

/// The integer in environment variable `name`, or `fallback` when it is not set.
inline int env_or(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

}  // namespace redis_lock::test
