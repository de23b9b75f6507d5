// SPDX-License-Identifier: MIT
#include "script_call.hpp"

#include "redis_lock_scripts.hpp"
#include "resp.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>

namespace redis_lock::detail {

std::string_view function_of(std::string_view sha1) noexcept {
  for (const auto* s : all_scripts) {
    if (s->sha1 == sha1) return s->function;
  }
  return {};
}

std::string_view sha1_of(std::string_view function) noexcept {
  for (const auto* s : all_scripts) {
    if (s->function == function) return s->sha1;
  }
  return {};
}

bool library_lost(std::string_view error, bool* refused) noexcept {
  const bool denied =
      error.starts_with("NOPERM") && error.find("the 'fcall' command") != std::string_view::npos;
  if (refused) *refused = denied;
  return denied || error.starts_with("ERR Function not found");
}

void append_script_call(std::string& out, std::span<const std::string_view> command,
                        bool functions) {
  if (functions && command.size() >= 2 && command[0] == "EVALSHA") {
    if (const auto name = function_of(command[1]); !name.empty()) {
      std::array<std::string_view, 16> words{};
      std::vector<std::string_view> more;
      std::span<std::string_view> call;
      if (command.size() <= words.size()) {
        std::copy(command.begin(), command.end(), words.begin());
        call = std::span(words.data(), command.size());
      } else {
        more.assign(command.begin(), command.end());
        call = more;
      }
      call[0] = "FCALL";
      call[1] = name;
      return append_command(out, std::span<const std::string_view>(call));
    }
  }
  append_command(out, command);
}

namespace {

/// One bulk string of an encoded command: "$<n>\r\n<n bytes>\r\n" at `at`.
struct Bulk {
  std::string_view text;
  std::size_t end = 0;  // just past its final CRLF
};

std::optional<std::size_t> number_until_crlf(std::string_view bytes, std::size_t at,
                                             std::size_t& end) {
  const auto crlf = bytes.find("\r\n", at);
  if (crlf == std::string_view::npos) return std::nullopt;
  std::size_t n = 0;
  const auto [p, ec] = std::from_chars(bytes.data() + at, bytes.data() + crlf, n);
  if (ec != std::errc{} || p != bytes.data() + crlf) return std::nullopt;
  end = crlf + 2;
  return n;
}

std::optional<Bulk> bulk_at(std::string_view bytes, std::size_t at) {
  if (at >= bytes.size() || bytes[at] != '$') return std::nullopt;
  std::size_t body = 0;
  const auto n = number_until_crlf(bytes, at + 1, body);
  if (!n || body + *n + 2 > bytes.size()) return std::nullopt;
  return Bulk{bytes.substr(body, *n), body + *n + 2};
}

}  // namespace

bool restate_script_calls(std::string& bytes, std::vector<std::size_t>& sizes, bool functions) {
  const std::string_view from = functions ? "EVALSHA" : "FCALL";
  std::string out;
  bool changed = false;
  std::size_t at = 0;
  for (auto& size : sizes) {
    const std::string_view command = std::string_view(bytes).substr(at, size);
    at += size;
    std::string_view name;
    std::size_t rest = 0;
    std::size_t words = 0;
    if (!command.empty() && command[0] == '*') {
      std::size_t first = 0;
      const auto n = number_until_crlf(command, 1, first);
      const auto verb = n && *n >= 2 ? bulk_at(command, first) : std::nullopt;
      const auto what = verb && verb->text == from ? bulk_at(command, verb->end) : std::nullopt;
      if (what) {
        name = functions ? function_of(what->text) : sha1_of(what->text);
        rest = what->end;
        words = *n;
      }
    }
    if (name.empty()) {
      out.append(command);
      continue;
    }
    // The header counts every word; the two replaced are re-encoded, the rest kept as is.
    std::string head;
    append_command(head, {functions ? "FCALL" : "EVALSHA", name});
    const auto two_words = head.find("\r\n") + 2;  // past "*2\r\n"
    const auto before = out.size();
    out += '*';
    out += std::to_string(words);
    out += "\r\n";
    out.append(head, two_words);
    out.append(command.substr(rest));
    size = out.size() - before;
    changed = true;
  }
  if (!changed) return false;
  if (at < bytes.size()) out.append(bytes, at);  // (nothing, when sizes cover it all)
  bytes.swap(out);
  return true;
}

}  // namespace redis_lock::detail
