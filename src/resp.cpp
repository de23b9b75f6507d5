// SPDX-License-Identifier: MIT
// RESP: a small binary-safe encoder, and hiredis' redisReader to decode.
#include "resp.hpp"

#include <redis_lock/error.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace redis_lock::detail {
namespace {

template <class Range>
void append_range(std::string& out, const Range& args) {
  // *<n>\r\n then $<len>\r\n<bytes>\r\n per argument: binary-safe by construction.
  // (Written here rather than with redisFormatCommandArgv: its printf-based formatting was
  // a tenth of the client's CPU time in the throughput benchmark.)
  std::size_t size = 16;
  for (std::string_view a : args) size += a.size() + 16;
  out.reserve(out.size() + size);
  char digits[24];
  const auto append_header = [&](char kind, std::size_t n) {
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
    out.push_back(kind);
    out.append(digits, end);
    out.append("\r\n", 2);
  };
  append_header('*', args.size());
  for (std::string_view a : args) {
    append_header('$', a.size());
    out.append(a.data(), a.size());
    out.append("\r\n", 2);
  }
}

bool starts_with(std::string_view text, std::string_view prefix) noexcept {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

void append_command(std::string& out, std::initializer_list<std::string_view> args) {
  append_range(out, args);
}

void append_command(std::string& out, std::span<const std::string_view> args) {
  append_range(out, args);
}

boost::system::error_code error_from_reply(std::string_view text) noexcept {
  struct Prefix {
    std::string_view prefix;
    error code;
  };
  static constexpr Prefix table[] = {
      {"WRONGTYPE", error::wrong_type},
      {"LIMITMISMATCH", error::limit_mismatch},  // acquire_set.lua
      {"NOAUTH", error::not_authenticated},
      {"WRONGPASS", error::auth_failed},
      {"NOPERM", error::no_permission},
      {"OOM", error::out_of_memory},
      {"READONLY", error::read_only},
      {"ERR invalid password", error::auth_failed},
      {"CLUSTERDOWN", error::cluster_down},
      {"TRYAGAIN", error::cluster_down},
      {"MOVED", error::cluster_down},
      {"ASK", error::cluster_down},
      {"ERR AUTH", error::auth_failed},
      // Redis refuses long commands from clients that have not authenticated yet.
      {"ERR Protocol error: unauthenticated", error::not_authenticated},
  };
  for (const auto& p : table) {
    if (starts_with(text, p.prefix)) return p.code;
  }
  // Redis 7.0 reports an ACL refusal inside a script as a plain ERR, and so does Valkey 8
  // (Redis 7.2's words): "ERR ACL failure in script: User u has no permissions to run ...".
  if (starts_with(text, "ERR ") &&
      (text.find("user executing the script can't run this command") != std::string_view::npos ||
       starts_with(text, "ERR ACL failure in script"))) {
    return error::no_permission;
  }
  return error::server_error;
}

namespace {

// A hostile or broken server must not make us allocate for data it never sends: the reply
// fuzzer once found "*6222222176" asking hiredis' default builder for a 50 GB element table.
// Our builder (ReplyReader::Build) reserves at most 8 elements when an array's header
// arrives and grows as elements arrive; every element costs the server at least 3 bytes on
// the wire (":0\r\n", "$-1\r\n"), so what we hold stays a small constant per byte received,
// plus at most 8 reserved elements per array still open (one per nesting level, at most
// `max_nesting` + 1). On top of that, arrays declaring more elements than the reader's
// limits (1024 on a lock connection; 16384 at the top of a CLUSTER SLOTS reply, the most
// ranges a slot map can have) are refused outright: hiredis fails the stream and the
// connection is dropped with protocol_error. hiredis 0.14 stops at 7 nested levels by itself;
// 1.x grows its stack without a limit, so we check too.
constexpr int max_nesting = 7;

}  // namespace

// The reader builds our Reply directly (no redisReply tree to copy and free): hiredis calls
// these for each value it reads, in order, an array before its elements. The root is
// the ReplyReader's own `root_`, so a reply without an array or a long string allocates
// nothing; hiredis frees (through free_object) only ever the root, on a stream error.
struct ReplyReader::Build {
  static ReplyReader& reader(const redisReadTask* task) {
    return *static_cast<ReplyReader*>(task->privdata);
  }
  /// Where the value of `task` goes: the next element of its parent array, or the root.
  /// Elements arrive in order, and an array is complete before its parent's next element
  /// is made: growing the parent then moves only values hiredis no longer points at.
  static Reply* slot(const redisReadTask* task) {
    if (task->parent == nullptr) return &reader(task).root_;
    auto& elements = static_cast<Reply*>(task->parent->obj)->elements;
    const auto index = static_cast<std::size_t>(task->idx);
    if (elements.size() <= index) elements.resize(index + 1);
    return &elements[index];
  }
  static long long limit(const redisReadTask* task) {
    const ReplyLimits& limits = reader(task).limits_;
    int depth = 0;
    for (const auto* p = task->parent; p != nullptr; p = p->parent) {
      if (++depth > max_nesting) return -1;  // refuse: deeper than any reply we read
    }
    return depth == 0 ? limits.top_level : limits.nested;
  }
  static void* string(const redisReadTask* task, char* data, std::size_t size) noexcept {
    try {
      Reply* r = slot(task);
      r->type = task->type == REDIS_REPLY_STATUS  ? Reply::Type::status
                : task->type == REDIS_REPLY_ERROR ? Reply::Type::error
                                                  : Reply::Type::string;
      r->str.assign(data, size);
      return r;
    } catch (...) {
      return nullptr;  // hiredis fails the stream ("out of memory")
    }
  }
  static void* array(const redisReadTask* task, long long elements) noexcept {
    // Negative: a wrapped count. Above the limit: refused before anything is allocated.
    if (elements < 0 || elements > limit(task)) return nullptr;
    try {
      Reply* r = slot(task);
      r->type = Reply::Type::array;
      // Room for what lock replies hold; more grows as elements arrive, so a header alone
      // never makes us allocate for elements not sent.
      r->elements.reserve(static_cast<std::size_t>(std::min(elements, 8LL)));
      return r;
    } catch (...) {
      return nullptr;
    }
  }
  static void* integer(const redisReadTask* task, long long value) noexcept {
    Reply* r = slot(task);
    r->type = Reply::Type::integer;
    r->integer = value;
    return r;
  }
  static void* nil(const redisReadTask* task) noexcept {
    Reply* r = slot(task);
    r->type = Reply::Type::nil;
    return r;
  }
  static void free_object(void* object) noexcept {
    // Only the root: reset it for the next reply (the reader is about to fail anyway).
    *static_cast<Reply*>(object) = Reply{};
  }
  static redisReplyObjectFunctions* functions() {
    static redisReplyObjectFunctions fn = [] {
      redisReplyObjectFunctions f{};
      f.createString = &string;
      // hiredis 0.14 passes the count as int, 1.x as size_t: accept either.
      f.createArray = [](const redisReadTask* task, auto elements) -> void* {
        return array(task, static_cast<long long>(elements));
      };
      f.createInteger = &integer;
      f.createNil = &nil;
      f.freeObject = &free_object;
      return f;
    }();
    return &fn;
  }
};

ReplyReader::ReplyReader(ReplyLimits limits) : limits_(limits), reader_(redisReaderCreate()) {
  if (reader_ == nullptr) throw std::bad_alloc();
  reader_->fn = Build::functions();
  reader_->privdata = this;
}

ReplyReader::~ReplyReader() { redisReaderFree(reader_); }

bool ReplyReader::feed(const char* data, std::size_t size) {
  return redisReaderFeed(reader_, data, size) == REDIS_OK;
}

std::optional<Reply> ReplyReader::next(bool& failed) {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    failed = true;
    return std::nullopt;
  }
  if (raw == nullptr) return std::nullopt;
  std::optional<Reply> out(std::move(root_));
  root_ = Reply{};
  return out;
}

}  // namespace redis_lock::detail
