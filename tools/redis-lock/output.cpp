// SPDX-License-Identifier: MIT
#include "output.hpp"

#include "diagnose.hpp"

namespace redis_lock::cli {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// A JSON string: UTF-8 passes through, control characters (C0, DEL, C1) are escaped, and a
/// byte that is not part of valid UTF-8 (an election's value may be any bytes) becomes U+FFFD.
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const auto n = utf8_sequence(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
        char buf[8];  // a C1 control (U+0080..U+009F): escaped like the C0 ones
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
        out += buf;
        i += 2;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

void print_json(const Options& o, const Report& r) {
  const auto number = [](const auto& v) { return v ? std::to_string(*v) : std::string("null"); };
  std::string line = "{\"resource\":" + json_string(o.resource) +
                     ",\"outcome\":" + json_string(r.outcome) +
                     ",\"exit_code\":" + std::to_string(r.exit_code) +
                     ",\"fencing_token\":" + std::to_string(r.fencing_token) +
                     ",\"waited_ms\":" + number(r.waited_ms) + ",\"held_ms\":" + number(r.held_ms) +
                     ",\"command_status\":" + number(r.command_status) +
                     ",\"command_signal\":" + number(r.command_signal) +
                     ",\"released\":" + (r.released ? (*r.released ? "true" : "false") : "null") +
                     ",\"error\":" + (r.error.empty() ? "null" : json_string(r.error)) + "}\n";
  std::fputs(line.c_str(), stderr);
}

/// Writes `text` to stdout at once; false when stdout is gone (a closed pipe).
bool print(const std::string& text) {
  return std::fputs(text.c_str(), stdout) >= 0 && std::fflush(stdout) == 0;
}

const char* kind_name(redis_lock::LockInfo::Kind kind) {
  switch (kind) {
    case redis_lock::LockInfo::Kind::mutex:
      return "mutex";
    case redis_lock::LockInfo::Kind::semaphore:
      return "semaphore";
    case redis_lock::LockInfo::Kind::read_write:
      return "read_write";
    case redis_lock::LockInfo::Kind::none:
      break;
  }
  return "none";
}

std::string seconds(std::chrono::milliseconds ms) {
  char text[64];
  std::snprintf(text, sizeof text, "%lld.%03llds", static_cast<long long>(ms.count() / 1000),
                static_cast<long long>(ms.count() % 1000));
  return text;
}

std::string describe_status(const Options& o, const redis_lock::LockInfo& info) {
  using Kind = redis_lock::LockInfo::Kind;
  if (o.json) {
    return "{\"resource\":" + json_string(o.resource) +
           ",\"held\":" + (info.held ? "true" : "false") + ",\"kind\":\"" + kind_name(info.kind) +
           "\",\"holder\":" + json_string(info.holder) +
           ",\"ttl_left_ms\":" + std::to_string(info.ttl_left.count()) +
           ",\"fencing_token\":" + std::to_string(info.fencing_token) +
           ",\"waiters\":" + std::to_string(info.waiters) +
           ",\"holders\":" + std::to_string(info.holders) +
           ",\"limit\":" + std::to_string(info.limit) +
           ",\"exclusive\":" + (info.exclusive ? "true" : "false") + "}\n";
  }
  std::string out = "resource:      " + printable(o.resource) + "\n";
  out += std::string("held:          ") + (info.held ? "yes" : "no") + "\n";
  if (info.held) {
    switch (info.kind) {
      case Kind::mutex:
        out += "kind:          mutex\n";
        out += "holder:        " + (info.holder.empty() ? "(no label)" : printable(info.holder)) +
               "\n";
        out += "fencing token: " + std::to_string(info.fencing_token) + "\n";
        break;
      case Kind::semaphore:
        out += "kind:          semaphore of " + std::to_string(info.limit) + " permits\n";
        out += "holders:       " + std::to_string(info.holders) + "\n";
        break;
      case Kind::read_write:
        out += "kind:          read-write lock\n";
        out += "holders:       " +
               (info.exclusive ? std::string("1 (exclusive)")
                               : std::to_string(info.holders) + " (shared)") +
               "\n";
        break;
      case Kind::none:
        break;
    }
    out += "ttl left:      " + seconds(info.ttl_left) +
           (info.kind == Kind::mutex ? "" : " (the longest hold)") + "\n";
  }
  out += "waiters:       " + std::to_string(info.waiters) + "\n";
  return out;
}

/// One line for a state of the election: a leader, or nobody after `last_term` (0: none
/// known).
std::string describe_leader(const Options& o, const std::optional<redis_lock::Leader>& leader,
                            std::uint64_t last_term) {
  const std::string term = std::to_string(leader ? leader->term : last_term);
  if (o.json) {
    return "{\"election\":" + json_string(o.name) + ",\"leader\":" + (leader ? "true" : "false") +
           ",\"term\":" + (leader || last_term != 0 ? term : "null") +
           ",\"value\":" + (leader ? json_string(leader->value) : "null") + "}\n";
  }
  if (leader) return "term " + term + ": leader " + json_string(leader->value) + "\n";
  return last_term == 0 ? "nobody leads\n" : "term " + term + " ended: nobody leads\n";
}

Failure failed(const Options& o, const redis_lock::ConnectionConfig& config,
               const redis_lock::LockManager& locks, boost::system::error_code ec) {
  Failure f{describe_failure(config, ec, locks.last_server_error()),
            // (A database the server does not have comes back as invalid_argument too.)
            ec == redis_lock::error::invalid_argument ? exit_usage : exit_redis_error};
  say("%s: %s", o.resource.c_str(), f.message.c_str());
  return f;
}

}  // namespace redis_lock::cli
