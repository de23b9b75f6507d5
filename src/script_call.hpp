// SPDX-License-Identifier: MIT
// Layer 1 (resp): a call of one of our scripts as a link sends it: `EVALSHA <sha1>`, or,
// on a link whose server has the scripts' Functions library (redis_lock_scripts.hpp's
// function_library), `FCALL <function>` with the same keys and arguments.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail {

/// The function of the script whose SHA1 is `sha1`; empty when no script of ours has it.
std::string_view function_of(std::string_view sha1) noexcept;
/// The SHA1 of the script whose function is `function`; empty when none of ours is.
std::string_view sha1_of(std::string_view function) noexcept;

/// Appends `command` (RESP) to `out`; with `functions`, an `EVALSHA` of one of our scripts
/// goes as the `FCALL` of its function. Any other command goes as it is.
void append_script_call(std::string& out, std::span<const std::string_view> command,
                        bool functions);

/// Whether a script call's error says the library cannot serve it: the server no longer has
/// the function (FUNCTION FLUSH, DELETE), or the user may not call it (NOPERM for FCALL).
/// `refused` (when given) tells the second apart.
bool library_lost(std::string_view error, bool* refused = nullptr) noexcept;

/// `bytes` holds encoded commands, `sizes` their lengths in order. Each call of one of our
/// scripts the other way is restated: as its `FCALL` with `functions`, as its `EVALSHA`
/// without; `sizes` follow. Returns whether anything changed. (Commands queued before a
/// handshake learnt whether the server has the library.)
bool restate_script_calls(std::string& bytes, std::vector<std::size_t>& sizes, bool functions);

}  // namespace redis_lock::detail
