// SPDX-License-Identifier: MIT
// Ownership tokens: 128 bits from the OS CSPRNG (never a seeded PRNG), as 32 hex digits;
// and the signature of a hand-off message.
#pragma once

#include <string>
#include <string_view>

namespace redis_lock::detail {

/// Fork-safe. Throws std::system_error only if the kernel refuses randomness.
std::string random_token();

/// The signature of a hand-off message `text` with a waiter's `secret`, as the release
/// computes it (shared.lua's hand_on): sha1hex(secret .. sha1hex(secret .. '\n' .. text)),
/// 40 lowercase hex digits.
std::string hand_off_mac(std::string_view secret, std::string_view text);

/// Whether two strings are equal, in a time that does not depend on where they differ.
bool equal_in_constant_time(std::string_view a, std::string_view b) noexcept;

}  // namespace redis_lock::detail
