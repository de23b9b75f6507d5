// SPDX-License-Identifier: MIT
// ConnectionConfig::from_url: redis://, rediss:// and unix:// URLs, parsed with Boost.URL,
// and a one-line reason naming the part of a URL that is wrong.
//
// Every reason is made of the literals in this file and in config_syntax.hpp/.cpp (the syntax
// diagnosis), and of numbers the parser counts (the position of a query parameter or of a host
// in a list): never of the URL's own text, which may hold a password, and which the caller may
// print or log.
#include <redis_lock/config.hpp>
#include <redis_lock/error.hpp>

#include "config_syntax.hpp"
#include "validate.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <string>

namespace redis_lock {
namespace {

using detail::at_after_host;
using detail::explain_syntax;
using detail::kFragment;
using detail::kHostMissing;
using detail::kNoSlashes;
using detail::kUnixForm;

using Result = boost::system::result<ConnectionConfig>;

constexpr std::string_view kSchemes =
    "redis://, rediss:// (TLS), unix://, redis+cluster://, redis+sentinel://, "
    "redis+redlock:// (rediss+... with TLS)";
constexpr std::string_view kAtAfterHost =
    "'@' after the host: a '/', '?' or '#' in a user name or password must be "
    "percent-encoded (%2F, %3F, %23)";
constexpr std::string_view kDatabaseRange = "0..1048576";
constexpr int kMaxDatabase = 1 << 20;
constexpr long long kMaxMillis = 24LL * 3600 * 1000;

boost::system::error_code fail(std::string& why, std::string_view reason) {
  why = reason;
  return error::invalid_argument;
}

enum class Number { ok, not_a_number, out_of_range };

// Decimal, optionally negative (so that "-1" reads as out of range, not as "not a number").
template <class Int>
Number parse_int(std::string_view text, Int& out, long long min, long long max) {
  const auto digits = text.starts_with('-') ? text.substr(1) : text;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return Number::not_a_number;
  }
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return Number::out_of_range;
  if (value < min || value > max) return Number::out_of_range;
  out = static_cast<Int>(value);
  return Number::ok;
}

// The query parameters from_url knows, so that a reason can name one without quoting the URL.
constexpr std::array<std::string_view, 10> kParameters = {
    "db",           "connect_timeout", "command_timeout", "tls_ca_file",       "tls_cert_file",
    "tls_key_file", "tls_server_name", "tls_verify",      "sentinel_username", "sentinel_password"};

bool apply_query(const boost::urls::url_view& url, ConnectionConfig& cfg, std::string& why) {
  int position = 0;
  for (auto param : url.params()) {
    ++position;
    const auto known = std::find(kParameters.begin(), kParameters.end(), param.key);
    // `name` is one of our literals (or a position): never the URL's text.
    const std::string name = known != kParameters.end()
                                 ? "query parameter " + std::string(*known)
                                 : "query parameter " + std::to_string(position);
    const auto reject = [&](std::string_view reason) {
      why = name + std::string(reason);
      return false;
    };
    if (known == kParameters.end()) {
      return reject(
          param.has_value || !param.key.empty()
              ? ": unknown name (accepted: db, connect_timeout, command_timeout; with TLS "
                "tls_ca_file, tls_cert_file, tls_key_file, tls_server_name, tls_verify; with "
                "Sentinel sentinel_username, sentinel_password)"
              : " is empty (a stray '?' or '&')");
    }
    if (!param.has_value) return reject(" has no value (write name=value)");
    const std::string_view key = *known;
    if (key.starts_with("sentinel_")) {
      if (cfg.topology != Topology::sentinel) return reject(" is only for redis+sentinel:// URLs");
      (key == "sentinel_username" ? cfg.sentinel_username : cfg.sentinel_password) = param.value;
    } else if (key == "db") {
      switch (parse_int(std::string_view(param.value), cfg.database, 0, kMaxDatabase)) {
        case Number::ok:
          break;
        case Number::not_a_number:
          return reject(" is not a number");
        case Number::out_of_range:
          return reject(" is out of range " + std::string(kDatabaseRange));
      }
    } else if (key == "connect_timeout" || key == "command_timeout") {
      long long ms = 0;
      switch (parse_int(std::string_view(param.value), ms, 1, kMaxMillis)) {
        case Number::ok:
          break;
        case Number::not_a_number:
          return reject(" is not a number of milliseconds");
        case Number::out_of_range:
          return reject(" is out of range 1..86400000 (milliseconds)");
      }
      (key == "connect_timeout" ? cfg.connect_timeout : cfg.command_timeout) =
          std::chrono::milliseconds(ms);
    } else if (!cfg.tls) {
      return reject(" needs TLS: only with rediss:// (or rediss+cluster://, ...)");
    } else if (key == "tls_ca_file") {
      cfg.tls_ca_file = param.value;
    } else if (key == "tls_cert_file") {
      cfg.tls_cert_file = param.value;
    } else if (key == "tls_key_file") {
      cfg.tls_key_file = param.value;
    } else if (key == "tls_server_name") {
      cfg.tls_server_name = param.value;
    } else if (param.value == "true" || param.value == "false") {  // tls_verify
      cfg.tls_verify = param.value == "true";
    } else {
      return reject(" must be true or false");
    }
  }
  return true;
}

bool valid_scheme_name(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  });
}

Result parse_single(std::string_view text, Topology topology, std::string& why) {
  if (text.empty()) return fail(why, "the URL is empty");
  const auto colon = text.find(':');
  const auto scheme_text = text.substr(0, colon);
  const bool is_unix = scheme_text == "unix" || scheme_text == "redis+unix";
  if (colon == std::string_view::npos || !valid_scheme_name(scheme_text) ||
      (!is_unix && scheme_text != "redis" && scheme_text != "rediss")) {
    const bool looks_like_scheme = colon != std::string_view::npos &&
                                   valid_scheme_name(scheme_text) &&
                                   text.substr(colon + 1).starts_with("//");
    return fail(why,
                std::string(looks_like_scheme ? "scheme not supported (accepted, in lowercase: "
                                              : "no scheme (write redis://host:port; accepted: ") +
                    std::string(kSchemes) + ")");
  }
  const auto rest = text.substr(colon + 1);
  if (rest.starts_with("//") && at_after_host(rest.substr(2), is_unix)) {
    return fail(why, kAtAfterHost);
  }

  // Boost.URL 1.81 also accepts text right after the authority (`redis://host:port` is host
  // "host", an empty port and the path "port"): that is a syntax error too.
  auto parsed = boost::urls::parse_absolute_uri(text);
  if (!parsed) {
    return fail(why, explain_syntax(rest, is_unix,
                                    "malformed URL: a character in it must be percent-encoded"));
  }
  if (parsed->has_authority() && !parsed->encoded_path().empty() &&
      !parsed->encoded_path().starts_with('/')) {
    return fail(why, explain_syntax(rest, is_unix,
                                    "host: unexpected text after it (a port is written "
                                    "host:6379, a database host/2)"));
  }
  const boost::urls::url_view url = *parsed;
  if (url.has_fragment()) return fail(why, kFragment);

  ConnectionConfig cfg;
  cfg.topology = topology;
  if (is_unix) {
    // unix:///path.sock: the authority is empty and the path is the socket.
    if (!url.has_authority() || !url.encoded_host().empty() || url.has_port()) {
      return fail(why, kUnixForm);
    }
    if (url.has_userinfo()) {
      cfg.username = url.user();
      if (url.has_password()) cfg.password = url.password();
    }
    cfg.unix_socket = url.path();
    if (cfg.unix_socket.empty() || cfg.unix_socket == "/") {
      return fail(why, "unix socket path is missing (write unix:///path/to/redis.sock)");
    }
    cfg.host.clear();
  } else {
    cfg.tls = scheme_text == "rediss";
    if (!url.has_authority()) return fail(why, kNoSlashes);
    switch (url.host_type()) {
      case boost::urls::host_type::ipv6:
      case boost::urls::host_type::ipv4:
        cfg.host = url.host_address();
        break;
      case boost::urls::host_type::name:
        cfg.host = url.host();
        break;
      case boost::urls::host_type::ipvfuture:
        return fail(why, "host: IPvFuture addresses ([v1.x]) are not supported");
      default:
        return fail(why, kHostMissing);
    }
    if (cfg.host.empty()) return fail(why, kHostMissing);
    if (url.has_port()) {
      if (url.port().empty()) {
        return fail(why, "port is empty (write host:6379, or leave out the ':')");
      }
      if (parse_int<std::uint16_t>(url.port(), cfg.port, 1, 65535) != Number::ok) {
        return fail(why, "port is out of range 1..65535");
      }
    }
    if (url.has_userinfo()) {
      cfg.username = url.user();
      if (url.has_password()) cfg.password = url.password();
      if (cfg.username.empty() && cfg.password.empty()) {
        return fail(why,
                    "user info: '@' with neither a user name nor a password (write "
                    "redis://host, or redis://:password@host for a password alone)");
      }
    }
    const std::string path = url.path();
    if (!path.empty() && path != "/") {
      switch (parse_int(std::string_view(path).substr(1), cfg.database, 0, kMaxDatabase)) {
        case Number::ok:
          break;
        case Number::not_a_number:
          return fail(why, "database index (the path /N after the host) is not a number");
        case Number::out_of_range:
          return fail(why, "database index is out of range " + std::string(kDatabaseRange));
      }
    }
  }
  if (!apply_query(url, cfg, why)) return boost::system::error_code(error::invalid_argument);
  return cfg;
}

bool valid_master_name(std::string_view name) {
  // What check(config) asks of any master name, and nothing that would read as URL syntax.
  return !name.empty() && detail::is_printable_word(name) &&
         name.find_first_of("/?#%") == std::string_view::npos;
}

// redis+cluster://[userinfo@]h1:p1,h2:p2[/][?query] and
// redis+sentinel://[userinfo@]s1:p1,s2:p2/master[/db][?query]. Boost.URL reads one host per
// authority, so the host list is split here; each host, and the URL rebuilt around the
// first one, go through the single-host parser (user info decoding, database, query).
Result parse_multi(std::string_view text, Topology topology, bool tls, std::string& why) {
  const auto rest = text.substr(text.find("://") + 3);
  if (at_after_host(rest, topology == Topology::sentinel)) return fail(why, kAtAfterHost);
  const auto authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  const auto authority = rest.substr(0, authority_end);
  auto tail = std::string(rest.substr(authority_end));
  const auto at = authority.rfind('@');
  const auto userinfo =
      at == std::string_view::npos ? std::string_view{} : authority.substr(0, at + 1);
  auto hosts = at == std::string_view::npos ? authority : authority.substr(at + 1);

  std::string master;
  if (topology == Topology::sentinel) {
    // The path starts with the master's name; what follows is the usual /db.
    const auto name_end = std::min(tail.find_first_of("/?#", 1), tail.size());
    if (tail.size() < 2 || tail[0] != '/' || name_end == 1) {
      return fail(
          why, "Sentinel master name is missing (write redis+sentinel://host:26379/master-name)");
    }
    master = tail.substr(1, name_end - 1);
    if (!valid_master_name(master)) {
      return fail(why,
                  "Sentinel master name: printable characters only, without spaces, '/', '?', "
                  "'#' or '%'");
    }
    tail.erase(0, name_end);
  }
  const std::string scheme = tls ? "rediss://" : "redis://";
  const std::string first_host(hosts.substr(0, hosts.find(',')));
  std::vector<Endpoint> nodes;
  for (int position = 1;; ++position) {
    const auto comma = hosts.find(',');
    const auto one = hosts.substr(0, comma);
    if (one.empty()) {
      if (position == 1 && comma == std::string_view::npos) {
        return fail(why, "host is missing (write redis+cluster://host:port,host:port)");
      }
      return fail(why, "host " + std::to_string(position) + " of the list is empty (a stray ',')");
    }
    std::string node_why;
    auto node = parse_single(scheme + std::string(one), Topology::standalone, node_why);
    if (!node) return fail(why, "host " + std::to_string(position) + " of the list: " + node_why);
    // Sentinels listen on 26379 unless told otherwise.
    const auto bracket = one.rfind(']');
    const bool has_port =
        one.find(':', bracket == std::string_view::npos ? 0 : bracket) != std::string_view::npos;
    if (topology == Topology::sentinel && !has_port) node->port = 26379;
    nodes.push_back({node->host, node->port});
    if (comma == std::string_view::npos) break;
    hosts.remove_prefix(comma + 1);
  }
  auto cfg = parse_single(scheme + std::string(userinfo) + first_host + tail, topology, why);
  if (!cfg) return cfg;
  if (topology == Topology::cluster && cfg->database != 0) {
    return fail(why, "database index: a Redis Cluster has database 0 only");
  }
  cfg->nodes = std::move(nodes);
  cfg->sentinel_master = std::move(master);
  return cfg;
}

}  // namespace

boost::system::result<ConnectionConfig> ConnectionConfig::from_url(std::string_view text) {
  std::string why;
  return from_url(text, why);
}

boost::system::result<ConnectionConfig> ConnectionConfig::from_url(std::string_view text,
                                                                   std::string& why) {
  why.clear();
  const auto colon = text.find("://");
  const auto scheme = colon == std::string_view::npos ? std::string_view{} : text.substr(0, colon);
  const bool tls = scheme.starts_with("rediss");
  if (scheme == "redis+cluster" || scheme == "rediss+cluster") {
    return parse_multi(text, Topology::cluster, tls, why);
  }
  if (scheme == "redis+sentinel" || scheme == "rediss+sentinel") {
    return parse_multi(text, Topology::sentinel, tls, why);
  }
  if (scheme == "redis+redlock" || scheme == "rediss+redlock") {
    auto cfg = parse_multi(text, Topology::redlock, tls, why);
    if (cfg && cfg->nodes.size() < 3) {
      return fail(why, "Redlock needs at least 3 masters; the URL names " +
                           std::to_string(cfg->nodes.size()));
    }
    return cfg;
  }
  return parse_single(text, Topology::standalone, why);
}

}  // namespace redis_lock
