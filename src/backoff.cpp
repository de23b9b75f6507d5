// SPDX-License-Identifier: MIT
#include "backoff.hpp"

#include <random>

namespace redis_lock::detail {

std::chrono::milliseconds full_jitter(std::chrono::milliseconds cap) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<long long> dist(1, std::max<long long>(1, cap.count()));
  return std::chrono::milliseconds(dist(rng));
}

std::chrono::milliseconds equal_jitter(std::chrono::milliseconds cap) {
  const auto half = cap / 2;
  return half + (cap - half > std::chrono::milliseconds(0) ? full_jitter(cap - half)
                                                           : std::chrono::milliseconds(0));
}

std::chrono::milliseconds no_jitter(std::chrono::milliseconds cap) { return cap; }

}  // namespace redis_lock::detail
