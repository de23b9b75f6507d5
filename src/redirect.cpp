// SPDX-License-Identifier: MIT
#include "redirect.hpp"

#include "script_call.hpp"

#include <algorithm>
#include <charconv>
#include <string>

namespace redis_lock::detail::redirect {

namespace {

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

/// The address in "MOVED <slot> <host>:<port>" (or "ASK ..."); empty if there is none.
std::string_view address_part(std::string_view error) {
  const auto slot = error.find(' ');
  if (slot == std::string_view::npos) return {};
  const auto address = error.find(' ', slot + 1);
  if (address == std::string_view::npos) return {};
  return error.substr(address + 1);
}

}  // namespace

Action read(std::string_view error) noexcept {
  const bool moved = starts_with(error, "MOVED ");
  if (moved || starts_with(error, "ASK ")) {
    const auto address = address_part(error);
    if (address.empty()) return {};
    return {moved ? Action::Kind::moved : Action::Kind::ask, address};
  }
  if (starts_with(error, "TRYAGAIN")) return {Action::Kind::try_again, {}};
  if (starts_with(error, "CLUSTERDOWN")) return {Action::Kind::cluster_down, {}};
  if (starts_with(error, "NOSCRIPT")) return {Action::Kind::no_script, {}};
  // The FCALL of a library the server no longer has (FUNCTION FLUSH, FUNCTION DELETE), or a
  // user the ACL no longer lets call functions: the body, as after NOSCRIPT.
  if (library_lost(error)) return {Action::Kind::no_script, {}};
  return {};
}

bool parse_address(std::string_view text, Endpoint& out) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  const auto port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535) {
    return false;
  }
  out.host = std::string(text.substr(0, colon));
  out.port = static_cast<std::uint16_t>(value);
  return true;
}

std::optional<std::chrono::milliseconds> Tries::retry(Clock::time_point now,
                                                      std::chrono::milliseconds command_timeout,
                                                      Clock::time_point patience) noexcept {
  if (until == Clock::time_point{}) until = std::max(now + command_timeout, patience);
  if (now >= until) return std::nullopt;
  redirects = 0;
  return backoff.next();
}

Step decide(const Action& action, bool cluster, bool body_sent, bool has_body, Tries& tries,
            Clock::time_point now, std::chrono::milliseconds command_timeout,
            Clock::time_point patience) noexcept {
  switch (action.kind) {
    case Action::Kind::none:
      return {};
    case Action::Kind::no_script:
      if (body_sent || !has_body) return {};
      return {Step::Kind::with_body, {}};
    case Action::Kind::moved:
    case Action::Kind::ask:
      if (!cluster || !tries.follow()) return {};
      return {action.kind == Action::Kind::moved ? Step::Kind::moved : Step::Kind::ask, {}};
    case Action::Kind::try_again:
    case Action::Kind::cluster_down:
      if (!cluster) return {};
      if (const auto delay = tries.retry(now, command_timeout, patience)) {
        return {Step::Kind::later, *delay};
      }
      return {};
  }
  return {};
}

}  // namespace redis_lock::detail::redirect
