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
  std::string str;              // string, status, error
  long long integer = 0;        // integer
  std::vector<Reply> elements;  // array

  bool is_error() const noexcept { return type == Type::error; }
};

/// Appends the RESP encoding of one command (binary-safe arguments) to `out`.
void append_command(std::string& out, std::initializer_list<std::string_view> args);
void append_command(std::string& out, std::span<const std::string_view> args);

/// Maps an error reply ("WRONGTYPE ...", "NOAUTH ...") to our error code.
boost::system::error_code error_from_reply(std::string_view text) noexcept;

/// How many elements an array in a reply may declare. A server's array header makes the
/// parser allocate the element table before a single element has arrived, so these caps
/// bound what a hostile or broken server can make us allocate for nothing (see resp.cpp).
struct ReplyLimits {
  long long top_level = 1024;  // the reply itself
  long long nested = 1024;     // any array inside it

  /// Lock commands, handshakes, pub/sub: every reply has a handful of elements.
  static constexpr ReplyLimits commands() noexcept { return {}; }
  /// CLUSTER SLOTS: one top-level entry per range of slots, up to one per slot (16384) in
  /// a Cluster resharded slot by slot; each entry is [start, end, master, replica...], each
  /// node [host, port, id, metadata], so nested arrays stay small.
  static constexpr ReplyLimits slot_map() noexcept { return {16384, 1024}; }
};

/// Incremental reply parser: feed bytes, take complete replies.
class ReplyReader {
 public:
  explicit ReplyReader(ReplyLimits limits = ReplyLimits::commands());
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  /// Returns false when the stream is not valid RESP (the connection must be dropped).
  bool feed(const char* data, std::size_t size);
  /// The next complete reply, nothing if more bytes are needed; sets `failed` on bad input.
  std::optional<Reply> next(bool& failed);

 private:
  struct Build;         // hiredis' callbacks, building `root_` (resp.cpp)
  ReplyLimits limits_;  // read through the reader's privdata, `this` (so: not movable)
  Reply root_;          // the reply being read
  redisReader* reader_;
};

}  // namespace redis_lock::detail
