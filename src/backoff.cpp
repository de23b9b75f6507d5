// SPDX-License-Identifier: MIT
#include "backoff.hpp"

#include <random>

namespace redis_lock::detail {

std::chrono::milliseconds full_jitter(std::chrono::milliseconds cap) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<long long> dist(1, std::max<long long>(1, cap.count()));
  return std::chrono::milliseconds(dist(rng));
}

}  // namespace redis_lock::detail
