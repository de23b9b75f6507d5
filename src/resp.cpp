// SPDX-License-Identifier: MIT
// RESP: a small binary-safe encoder, and hiredis' redisReader to decode.
#include "resp.hpp"

#include <redis_lock/error.hpp>

#include <hiredis/hiredis.h>

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

Reply convert(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::string;
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::status;
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::error;
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::integer;
      break;
    case REDIS_REPLY_NIL:
      out.type = Reply::Type::nil;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::array;
      break;
    default:
      out.type = Reply::Type::other;
      break;
  }
  if (out.type == Reply::Type::integer) {
    out.integer = r->integer;
  } else if (out.type == Reply::Type::array) {
    out.elements.reserve(r->elements);
    for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
  } else if (r->str != nullptr) {
    out.str.assign(r->str, r->len);
  }
  return out;
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
  // Redis 7.0 reports an ACL refusal inside a script as a plain ERR.
  if (starts_with(text, "ERR ") &&
      text.find("user executing the script can't run this command") != std::string_view::npos) {
    return error::no_permission;
  }
  return error::server_error;
}

namespace {

// hiredis (0.14) allocates an array's element table as soon as it reads the header, so a
// hostile server sending "*6222222176" made it ask for 50 GB (found by the reply fuzzer).
// Refuse arrays larger than the reader's limits before anything is allocated; hiredis then
// fails the stream and the connection is dropped with protocol_error.
//
// Why this bounds memory: an array's table (8 bytes per declared element) is the only thing
// allocated ahead of the bytes that fill it. Every element that does arrive costs the server
// at least 3 bytes on the wire (":0\r\n", "*0\r\n", "$-1\r\n"), so completed elements cost us
// a small constant per byte received. Tables still waiting for their elements are at most
// one per nesting level: one top-level table plus up to `max_nesting` nested ones (hiredis
// 0.14 stops there by itself; hiredis 1.x grows its stack without a limit, so we check).
// The caps therefore bound the memory allocated ahead of input to
// 8 * (top_level + 7 * nested) bytes: 64 KB on a lock connection, 184 KB on a topology
// connection (top_level 16384, the most ranges a slot map can have). The top-level cap is
// per reply kind (only the connection that asks CLUSTER SLOTS accepts 16384); the nested cap
// stays tight everywhere, since no reply we read nests a large array (the deepest, a slot
// map, nests three levels: range, node, node metadata).
constexpr int max_nesting = 7;

long long limit_for(const redisReadTask* task) {
  const auto* limits = static_cast<const ReplyLimits*>(task->privdata);
  const ReplyLimits fallback;
  if (limits == nullptr) limits = &fallback;
  int depth = 0;
  for (const auto* p = task->parent; p != nullptr; p = p->parent) {
    if (++depth > max_nesting) return -1;  // refuse: deeper than any reply we read
  }
  return depth == 0 ? limits->top_level : limits->nested;
}

redisReplyObjectFunctions* bounded_functions(const redisReplyObjectFunctions* defaults) {
  static const redisReplyObjectFunctions* original = defaults;
  static redisReplyObjectFunctions bounded = [] {
    redisReplyObjectFunctions fn = *original;
    fn.createArray = [](const redisReadTask* task, auto elements) -> void* {
      const auto n = static_cast<long long>(elements);
      if (n < 0 || n > limit_for(task)) return nullptr;  // negative: a wrapped count
      return original->createArray(task, elements);
    };
    return fn;
  }();
  return &bounded;
}

}  // namespace

ReplyReader::ReplyReader(ReplyLimits limits) : limits_(limits), reader_(redisReaderCreate()) {
  if (reader_ == nullptr) throw std::bad_alloc();
  reader_->fn = bounded_functions(reader_->fn);
  reader_->privdata = &limits_;
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
  auto* reply = static_cast<redisReply*>(raw);
  Reply out;
  try {
    out = convert(reply);
  } catch (...) {
    freeReplyObject(reply);
    throw;
  }
  freeReplyObject(reply);
  return out;
}

}  // namespace redis_lock::detail
