// SPDX-License-Identifier: MIT
// ConnectionConfig::from_url: redis://, rediss:// and unix:// URLs, parsed with Boost.URL.
#include <redis_lock/config.hpp>
#include <redis_lock/error.hpp>

#include "tls.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include <charconv>
#include <limits>

namespace redis_lock {
namespace {

template <class Int>
bool parse_int(std::string_view text, Int& out, Int min, Int max) {
  if (text.empty()) return false;
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return false;
  if (value < static_cast<long long>(min) || value > static_cast<long long>(max)) return false;
  out = static_cast<Int>(value);
  return true;
}

bool parse_millis(std::string_view text, std::chrono::milliseconds& out) {
  long long ms = 0;
  if (!parse_int<long long>(text, ms, 1, 24LL * 3600 * 1000)) return false;
  out = std::chrono::milliseconds(ms);
  return true;
}

bool apply_query(const boost::urls::url_view& url, ConnectionConfig& cfg) {
  for (auto param : url.params()) {
    if (!param.has_value) return false;
    if (cfg.topology == Topology::sentinel && param.key == "sentinel_username") {
      cfg.sentinel_username = param.value;
    } else if (cfg.topology == Topology::sentinel && param.key == "sentinel_password") {
      cfg.sentinel_password = param.value;
    } else if (param.key == "db") {
      if (!parse_int(std::string_view(param.value), cfg.database, 0, 1 << 20)) return false;
    } else if (param.key == "connect_timeout") {
      if (!parse_millis(param.value, cfg.connect_timeout)) return false;
    } else if (param.key == "command_timeout") {
      if (!parse_millis(param.value, cfg.command_timeout)) return false;
    } else if (!cfg.tls) {
      return false;  // the TLS parameters below only mean something with rediss://
    } else if (param.key == "tls_ca_file") {
      cfg.tls_ca_file = param.value;
    } else if (param.key == "tls_cert_file") {
      cfg.tls_cert_file = param.value;
    } else if (param.key == "tls_key_file") {
      cfg.tls_key_file = param.value;
    } else if (param.key == "tls_server_name") {
      cfg.tls_server_name = param.value;
    } else if (param.key == "tls_verify") {
      if (param.value == "true") {
        cfg.tls_verify = true;
      } else if (param.value == "false") {
        cfg.tls_verify = false;
      } else {
        return false;
      }
    } else {
      return false;
    }
  }
  return true;
}

boost::system::result<ConnectionConfig> parse_single(std::string_view text, Topology topology) {
  const boost::system::error_code bad = error::invalid_argument;
  auto parsed = boost::urls::parse_absolute_uri(text);
  if (!parsed) return bad;
  const boost::urls::url_view url = *parsed;
  if (url.has_fragment()) return bad;

  ConnectionConfig cfg;
  cfg.topology = topology;
  const std::string scheme = url.scheme();
  if (scheme == "unix" || scheme == "redis+unix") {
    // unix:///path.sock: the authority is empty and the path is the socket.
    if (!url.has_authority() || !url.encoded_host().empty() || url.has_port()) return bad;
    if (url.has_userinfo()) {
      cfg.username = url.user();
      if (url.has_password()) cfg.password = url.password();
    }
    cfg.unix_socket = url.path();
    if (cfg.unix_socket.empty() || cfg.unix_socket == "/") return bad;
    cfg.host.clear();
  } else if (scheme == "redis" || scheme == "rediss") {
    cfg.tls = scheme == "rediss";
    if (!url.has_authority()) return bad;
    switch (url.host_type()) {
      case boost::urls::host_type::ipv6:
      case boost::urls::host_type::ipv4:
        cfg.host = url.host_address();
        break;
      case boost::urls::host_type::name:
        cfg.host = url.host();
        break;
      default:
        return bad;  // ipvfuture or none
    }
    if (cfg.host.empty()) return bad;
    if (url.has_port()) {
      if (!parse_int<std::uint16_t>(url.port(), cfg.port, 1, 65535)) return bad;
    }
    if (url.has_userinfo()) {
      cfg.username = url.user();
      if (url.has_password()) cfg.password = url.password();
      if (cfg.username.empty() && cfg.password.empty()) return bad;
    }
    const std::string path = url.path();
    if (!path.empty() && path != "/") {
      if (!parse_int(std::string_view(path).substr(1), cfg.database, 0, 1 << 20)) return bad;
    }
  } else {
    return bad;
  }
  if (!apply_query(url, cfg)) return bad;
  return cfg;
}

bool valid_master_name(std::string_view name) {
  // What validate() asks of any master name, and nothing that would read as URL syntax.
  return !name.empty() && detail::is_printable_word(name) &&
         name.find_first_of("/?#%") == std::string_view::npos;
}

// redis+cluster://[userinfo@]h1:p1,h2:p2[/][?query] and
// redis+sentinel://[userinfo@]s1:p1,s2:p2/master[/db][?query]. Boost.URL reads one host per
// authority, so the host list is split here; each host, and the URL rebuilt around the
// first one, go through the single-host parser (user info decoding, database, query).
boost::system::result<ConnectionConfig> parse_multi(std::string_view text, Topology topology,
                                                    bool tls) {
  const boost::system::error_code bad = error::invalid_argument;
  const auto rest = text.substr(text.find("://") + 3);
  const auto authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  const auto authority = rest.substr(0, authority_end);
  auto tail = std::string(rest.substr(authority_end));
  const auto at = authority.rfind('@');
  const auto userinfo = at == std::string_view::npos ? std::string_view{} : authority.substr(0, at + 1);
  auto hosts = at == std::string_view::npos ? authority : authority.substr(at + 1);

  std::string master;
  if (topology == Topology::sentinel) {
    // The path starts with the master's name; what follows is the usual /db.
    if (tail.size() < 2 || tail[0] != '/') return bad;
    const auto name_end = std::min(tail.find_first_of("/?#", 1), tail.size());
    master = tail.substr(1, name_end - 1);
    if (!valid_master_name(master)) return bad;
    tail.erase(0, name_end);
  }
  const std::string scheme = tls ? "rediss://" : "redis://";
  const std::string first_host(hosts.substr(0, hosts.find(',')));
  std::vector<Endpoint> nodes;
  while (true) {
    const auto comma = hosts.find(',');
    const auto one = hosts.substr(0, comma);
    if (one.empty()) return bad;
    auto node = parse_single(scheme + std::string(one), Topology::standalone);
    if (!node) return bad;
    // Sentinels listen on 26379 unless told otherwise.
    const auto bracket = one.rfind(']');
    const bool has_port = one.find(':', bracket == std::string_view::npos ? 0 : bracket) !=
                          std::string_view::npos;
    if (topology == Topology::sentinel && !has_port) node->port = 26379;
    nodes.push_back({node->host, node->port});
    if (comma == std::string_view::npos) break;
    hosts.remove_prefix(comma + 1);
  }
  auto cfg = parse_single(scheme + std::string(userinfo) + first_host + tail, topology);
  if (!cfg) return bad;
  if (topology == Topology::cluster && cfg->database != 0) return bad;  // Cluster has db 0 only
  cfg->nodes = std::move(nodes);
  cfg->sentinel_master = std::move(master);
  return cfg;
}

}  // namespace

boost::system::result<ConnectionConfig> ConnectionConfig::from_url(std::string_view text) {
  const auto colon = text.find("://");
  const auto scheme = colon == std::string_view::npos ? std::string_view{} : text.substr(0, colon);
  if (scheme == "redis+cluster" || scheme == "rediss+cluster") {
    return parse_multi(text, Topology::cluster, scheme.starts_with("rediss"));
  }
  if (scheme == "redis+sentinel" || scheme == "rediss+sentinel") {
    return parse_multi(text, Topology::sentinel, scheme.starts_with("rediss"));
  }
  if (scheme == "redis+redlock" || scheme == "rediss+redlock") {
    auto cfg = parse_multi(text, Topology::redlock, scheme.starts_with("rediss"));
    if (cfg && cfg->nodes.size() < 3) return boost::system::error_code(error::invalid_argument);
    return cfg;
  }
  return parse_single(text, Topology::standalone);
}

}  // namespace redis_lock
