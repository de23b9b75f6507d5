// SPDX-License-Identifier: MIT
// Layer 1 (protocol): the words of a call of one of our scripts, and the one encoder that
// makes them from a typed call of the table of scripts (script_table.hpp): `EVALSHA <sha1>
// <key count> <keys> <args>`, an optional word left out.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace redis_lock::detail::scripts {

/// What a script may do where it runs (Functions' flags; EVAL's shebang for the idempotent
/// requests' scripts): write (refused when the server is out of memory), write even then
/// (`allow-oom`: it frees or records what must not be lost), or only read (`no-writes`).
enum class Flags : unsigned char { writes, allow_oom, no_writes };

/// Which connections load a script before their first command (SCRIPT LOAD, or the
/// Functions library): the topologies that use it on every acquire or release. Any other
/// script is sent as EVAL once, the first time a server lacks it (NOSCRIPT).
enum class Preload : unsigned char {
  on_demand,   ///< loaded when first needed (inspection, force-release, idempotency)
  everywhere,  ///< every topology's locks
  one_master,  ///< all but Redlock (lease sets and the group acquire are not offered there)
  redlock,     ///< Redlock's only (its fencing counters raised)
};

/// A script's entry, as the tests read it.
struct Layout {
  std::string_view keys;  ///< as its `-- KEYS:` line
  std::string_view args;  ///< as its `-- ARGV:` line
  Flags flags = Flags::writes;
  std::string_view commands;  ///< what its text may call, lower case, sorted
  Preload preload = Preload::on_demand;
};

/// One word of a call: a key or an argument, or an optional one left out.
struct Word {
  constexpr Word(std::string_view t) noexcept : text(t) {}    // NOLINT: implicit on purpose
  Word(const std::string& s) noexcept : text(s) {}            // NOLINT
  constexpr Word(std::optional<std::string_view> s) noexcept  // NOLINT
      : text(s.value_or(std::string_view())), present(s.has_value()) {}
  Word(const std::optional<std::string>& s) noexcept  // NOLINT
      : text(s ? std::string_view(*s) : std::string_view()), present(s.has_value()) {}
  std::string_view text;
  bool present = true;
};
using Optional = std::optional<std::string_view>;

/// How many names a layout line holds, and how many are not optional.
constexpr std::size_t names_in(std::string_view line) noexcept {
  std::size_t n = 0;
  bool in_word = false;
  for (const char c : line) {
    if (c != ' ' && !in_word) ++n;
    in_word = c != ' ';
  }
  return n;
}
constexpr std::size_t required_in(std::string_view line) noexcept {
  return names_in(line) - static_cast<std::size_t>(std::count(line.begin(), line.end(), '['));
}

// ---------------------------------------------------------------------------------------
// The encoder

/// The key count's word.
constexpr std::string_view count_word(std::size_t n) noexcept {
  constexpr std::string_view words[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  return n < std::size(words) ? words[n] : std::string_view();
}

template <class Call>
constexpr std::size_t key_slots = std::tuple_size_v<decltype(std::declval<const Call&>().keys())>;
template <class Call>
constexpr std::size_t arg_slots = std::tuple_size_v<decltype(std::declval<const Call&>().args())>;

/// The most words a call of `Call` takes.
template <class Call>
constexpr std::size_t max_words = 3 + key_slots<Call> + arg_slots<Call>;

/// Writes the words of `call` (`EVALSHA <sha1> <key count> <keys> <args>`) to `out`, which
/// has room for max_words<Call>; returns how many. An optional word left out must be the
/// last of its keys or its arguments.
template <class Call>
std::size_t encode(const Call& call, std::span<std::string_view> out) noexcept {
  static_assert(key_slots<Call> == names_in(Call::layout.keys), "the keys and the layout differ");
  static_assert(arg_slots<Call> == names_in(Call::layout.args), "the args and the layout differ");
  static_assert(key_slots<Call> < 10);
  assert(out.size() >= max_words<Call>);
  const auto keys = call.keys();
  const auto args = call.args();
  std::size_t n = 0;
  out[n++] = "EVALSHA";
  out[n++] = Call::script.sha1;
  const std::size_t count_at = n++;
  std::size_t key_count = 0;
  for (const Word& k : keys) {
    if (!k.present) break;
    out[n++] = k.text;
    ++key_count;
  }
  out[count_at] = count_word(key_count);
  assert(key_count >= required_in(Call::layout.keys));  // only an optional key is left out
  assert(
      std::none_of(keys.begin() + key_count, keys.end(), [](const Word& w) { return w.present; }));
  [[maybe_unused]] const std::size_t args_at = n;
  for (const Word& a : args) {
    if (!a.present) break;
    out[n++] = a.text;
  }
  assert(std::none_of(args.begin() + (n - args_at), args.end(),
                      [](const Word& w) { return w.present; }));
  assert(n - args_at >= required_in(Call::layout.args));  // only an optional one left out
  return n;
}

}  // namespace redis_lock::detail::scripts
