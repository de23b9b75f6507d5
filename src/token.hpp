// SPDX-License-Identifier: MIT
// Ownership tokens: 128 bits from the OS CSPRNG (never a seeded PRNG), as 32 hex digits.
#pragma once

#include <string>

namespace redis_lock::detail {

/// Fork-safe. Throws std::system_error only if the kernel refuses randomness.
std::string random_token();

}  // namespace redis_lock::detail
