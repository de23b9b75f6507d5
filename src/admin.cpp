// SPDX-License-Identifier: MIT
#include "admin.hpp"

#include <charconv>

namespace redis_lock::detail {

namespace {

bool read_count(const Reply& r, long long& out) {
  if (r.type != Reply::Type::integer) return false;
  out = r.integer;
  return true;
}

}  // namespace

std::optional<Leader> Inspection::leader() const {
  if (info.kind != LockInfo::Kind::mutex || !info.held || info.fencing_token == 0) {
    return std::nullopt;
  }
  return Leader{value, info.fencing_token};
}

std::optional<Inspection> read_inspection(const Reply& reply) {
  if (reply.type != Reply::Type::array || reply.elements.size() != 6) return std::nullopt;
  const auto& e = reply.elements;
  long long ms = 0, waiters = 0, holders = 0, exclusive = 0;
  if (e[0].type != Reply::Type::string || e[2].type != Reply::Type::string ||
      !read_count(e[1], ms) || !read_count(e[3], waiters) || !read_count(e[4], holders) ||
      !read_count(e[5], exclusive) || waiters < 0 || holders < 0) {
    return std::nullopt;
  }
  Inspection out;
  auto& info = out.info;
  const std::string_view what = e[0].str;
  info.waiters = static_cast<std::size_t>(waiters);
  info.holders = static_cast<std::size_t>(holders);
  info.held = holders > 0;
  info.ttl_left = std::chrono::milliseconds(std::max(ms, 0LL));
  if (what == "mutex") {
    info.kind = LockInfo::Kind::mutex;
    // '<fencing token> <label>[\n<value>]' (shared.lua's record, inspect.lua leaves out its
    // lease token); none from an older client.
    const std::string_view text = e[2].str;
    const auto gap = text.find(' ');
    if (gap != std::string_view::npos) {
      std::uint64_t fence = 0;
      const auto read = std::from_chars(text.data(), text.data() + gap, fence);
      if (read.ec == std::errc{} && read.ptr == text.data() + gap) {
        info.fencing_token = fence;
        const auto data = text.substr(gap + 1);
        const auto newline = data.find('\n');
        info.holder = std::string(data.substr(0, newline));
        if (newline != std::string_view::npos) out.value = std::string(data.substr(newline + 1));
      }
    }
  } else if (what.starts_with("#S")) {
    info.kind = LockInfo::Kind::semaphore;
    std::uint32_t limit = 0;
    std::from_chars(what.data() + 2, what.data() + what.size(), limit);
    info.limit = limit;
    info.exclusive = false;
  } else if (what == "#RW") {
    info.kind = LockInfo::Kind::read_write;
    info.exclusive = exclusive != 0 && info.held;
  } else if (what != "none" && !what.empty()) {
    return std::nullopt;
  }
  return out;
}

}  // namespace redis_lock::detail
