// SPDX-License-Identifier: MIT
// libFuzzer target: ConnectionConfig::from_url on arbitrary bytes. Never crashes; what it
// accepts is always usable; the form with a reason agrees with the one without, and its
// reason is one printable line, present exactly when the URL is refused.
#include <redis_lock/config.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto cfg = redis_lock::ConnectionConfig::from_url(text);
  std::string why = "stale";
  const auto explained = redis_lock::ConnectionConfig::from_url(text, why);
  if (static_cast<bool>(cfg) != static_cast<bool>(explained) || why.empty() != !!cfg) {
    std::abort();  // the two forms disagree, or a refusal without a reason
  }
  for (const char c : why) {
    if (c < ' ' || c > '~') std::abort();  // not one printable line
  }
  if (!cfg) return 0;
  const bool has_endpoint = !cfg->unix_socket.empty() || (!cfg->host.empty() && cfg->port != 0);
  if (!has_endpoint || cfg->database < 0 || cfg->connect_timeout.count() <= 0 ||
      cfg->command_timeout.count() <= 0) {
    std::abort();  // accepted, but unusable
  }
  return 0;
}
