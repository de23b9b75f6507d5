// SPDX-License-Identifier: MIT
// Layer 1 (resp): command encoding, and reply parsing with hiredis into an owned Reply.
#pragma once

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct redisReader;

namespace redis_lock::detail {

/// One decoded RESP reply, owning its data.
struct Reply {
  enum class Type { nil, string, status, error, integer, array, other };
  Type type = Type::nil;
  std::string str;           // string, status, error
  long long integer = 0;     // integer
  std::vector<Reply> elements;  // array

  bool is_error() const noexcept { return type == Type::error; }
};

/// Appends the RESP encoding of one command (binary-safe arguments) to `out`.
void append_command(std::string& out, std::initializer_list<std::string_view> args);
void append_command(std::string& out, std::span<const std::string_view> args);

/// Maps an error reply ("WRONGTYPE ...", "NOAUTH ...") to our error code.
boost::system::error_code error_from_reply(std::string_view text) noexcept;

/// Incremental reply parser: feed bytes, take complete replies.
class ReplyReader {
 public:
  ReplyReader();
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  /// Returns false when the stream is not valid RESP (the connection must be dropped).
  bool feed(const char* data, std::size_t size);
  /// The next complete reply, nothing if more bytes are needed; sets `failed` on bad input.
  std::optional<Reply> next(bool& failed);

 private:
  redisReader* reader_;
};

}  // namespace redis_lock::detail
