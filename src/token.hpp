// SPDX-License-Identifier: MIT
// Ownership tokens: 128 bits from the OS CSPRNG, as 32 lowercase hex digits.
#pragma once

#include <string>

namespace redis_lock::detail {

/// Throws std::system_error only if the kernel refuses randomness (never on Linux >= 3.17).
std::string random_token();

}  // namespace redis_lock::detail
