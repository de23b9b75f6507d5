// SPDX-License-Identifier: MIT
// redis-lock's output: the lines on stderr, the --json objects, the text of status and
// observe, and what a failure says.
#pragma once

#include "options.hpp"

#include <redis_lock/redis_lock.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace redis_lock::cli {

/// One line on stderr, written at once (the command may be writing there too).
template <class... Args>
void say(const char* format, Args... args) {
  char text[1024];
  if constexpr (sizeof...(Args) == 0) {
    std::snprintf(text, sizeof text, "%s", format);
  } else {
    std::snprintf(text, sizeof text, format, args...);
  }
  std::string line = std::string("redis-lock: ") + text + "\n";
  std::fputs(line.c_str(), stderr);
}

/// What happened, for the exit status, the messages and the --json line.
struct Report {
  std::string outcome = "error";
  int exit_code = exit_redis_error;
  std::string error;
  std::uint64_t fencing_token = 0;
  std::optional<long long> waited_ms, held_ms;
  std::optional<int> command_status, command_signal;
  std::optional<bool> released;
};

/// A JSON string: UTF-8 passes through, control characters (C0, DEL, C1) are escaped, and a
/// byte that is not part of valid UTF-8 (an election's value may be any bytes) becomes U+FFFD.
std::string json_string(std::string_view s);
void print_json(const Options& o, const Report& r);
/// Writes `text` to stdout at once; false when stdout is gone (a closed pipe).
bool print(const std::string& text);
std::string seconds(std::chrono::milliseconds ms);
const char* kind_name(redis_lock::LockInfo::Kind kind);
std::string describe_status(const Options& o, const redis_lock::LockInfo& info);
/// One line for a state of the election: a leader, or nobody after `last_term` (0: none
/// known).
std::string describe_leader(const Options& o, const std::optional<redis_lock::Leader>& leader,
                            std::uint64_t last_term);

/// A failed operation (the lock's or a subcommand's): what it says on stderr, and its exit
/// status.
struct Failure {
  std::string message;
  int exit_code;
};
Failure failed(const Options& o, const redis_lock::ConnectionConfig& config,
               const redis_lock::LockManager& locks, boost::system::error_code ec);

}  // namespace redis_lock::cli
