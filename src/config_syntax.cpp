// SPDX-License-Identifier: MIT
// Layer 5 (public API): the syntax diagnosis of ConnectionConfig::from_url (config_syntax.hpp).
// As in config.cpp, every reason is made of literals: never of the URL's own text.
#include "config_syntax.hpp"

#include <boost/url/rfc/ipv6_address_rule.hpp>

#include <algorithm>
#include <string>
#include <string_view>

namespace redis_lock::detail {
namespace {

// The RFC 3986 character classes the syntax diagnosis needs.
bool is_unreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}
bool is_sub_delim(char c) {
  return std::string_view("!$&'()*+,;=").find(c) != std::string_view::npos;
}
bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Why `part` (named `name`) is not made of unreserved characters, sub-delimiters, valid
// percent-escapes and the characters in `extra`; empty if it is.
std::string bad_characters(std::string_view part, std::string_view extra, std::string_view name) {
  for (std::size_t i = 0; i < part.size(); ++i) {
    const char c = part[i];
    if (c == '%') {
      if (i + 2 >= part.size() || !is_hex(part[i + 1]) || !is_hex(part[i + 2])) {
        return std::string(name) +
               ": '%' must start a percent-escape such as %40 (write '%' itself as %25)";
      }
      i += 2;
    } else if (!is_unreserved(c) && !is_sub_delim(c) && extra.find(c) == std::string_view::npos) {
      if (c == '@') return std::string(name) + ": '@' must be written %40";
      return std::string(name) +
             ": a character that must be percent-encoded (a space is %20, '\"' is %22)";
    }
  }
  return {};
}

}  // namespace

bool at_after_host(std::string_view rest, bool path_may_hold_at) {
  const auto authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  if (rest.substr(0, authority_end).find('@') != std::string_view::npos) return false;
  auto after = rest.substr(authority_end);
  const auto fragment = after.find('#');
  if (fragment != std::string_view::npos) {
    if (after.substr(fragment).find('@') != std::string_view::npos) return true;
    after = after.substr(0, fragment);
  }
  const auto query = std::min(after.find('?'), after.size());
  if (!path_may_hold_at && after.substr(0, query).find('@') != std::string_view::npos) {
    return true;
  }
  if (query < after.size()) {
    auto first = after.substr(query + 1);
    first = first.substr(0, first.find('&'));
    if (first.find('=') == std::string_view::npos && first.find('@') != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

std::string explain_syntax(std::string_view rest, bool is_unix, std::string_view otherwise) {
  if (!rest.starts_with("//")) {
    return std::string(is_unix ? kUnixForm : kNoSlashes);
  }
  rest.remove_prefix(2);
  const auto fragment = rest.find('#');
  const auto body = rest.substr(0, fragment);
  const auto authority_end = std::min(body.find_first_of("/?"), body.size());
  const auto authority = body.substr(0, authority_end);
  const auto after = body.substr(authority_end);
  const auto at = authority.rfind('@');
  auto hostport = authority;
  if (at != std::string_view::npos) {
    const auto userinfo = authority.substr(0, at);
    const auto colon = userinfo.find(':');
    auto why = bad_characters(userinfo.substr(0, colon), "", "user name");
    if (why.empty() && colon != std::string_view::npos) {
      why = bad_characters(userinfo.substr(colon + 1), ":", "password");
    }
    if (!why.empty()) return why;
    hostport = authority.substr(at + 1);
  }
  if (is_unix) {
    if (!hostport.empty()) return std::string(kUnixForm);
  } else {
    std::string_view port;
    bool has_port = false;
    if (hostport.starts_with('[')) {
      const auto close = hostport.find(']');
      if (close == std::string_view::npos) {
        return "host: '[' without its ']' (an IPv6 address is written [::1])";
      }
      if (!boost::urls::parse_ipv6_address(hostport.substr(1, close - 1))) {
        return "host: not a valid IPv6 address";
      }
      const auto tail = hostport.substr(close + 1);
      if (!tail.empty() && tail[0] != ':') {
        return "host: unexpected text after ']' (write [::1]:6379)";
      }
      has_port = !tail.empty();
      if (has_port) port = tail.substr(1);
    } else {
      const auto colon = hostport.find(':');
      const auto host = hostport.substr(0, colon);
      if (host.empty() && std::count(hostport.begin(), hostport.end(), ':') > 1) {
        return "host: an IPv6 address is written in brackets ([::1]:6379)";
      }
      if (host.empty()) return std::string(kHostMissing);
      if (!bad_characters(host, "", "host").empty()) {
        return "host: a character that is not allowed in a host name (letters, digits, '-' and "
               "'.'; an IPv6 address in brackets)";
      }
      has_port = colon != std::string_view::npos;
      if (has_port) port = hostport.substr(colon + 1);
    }
    if (has_port && port.find(':') != std::string_view::npos) {
      return "port is not a number (an IPv6 address is written in brackets: [::1]:6379)";
    }
    if (has_port && port.find_first_not_of("0123456789") != std::string_view::npos) {
      return "port is not a number";
    }
  }
  const auto query = std::min(after.find('?'), after.size());
  const auto path = after.substr(0, query);
  if (is_unix) {
    auto why = bad_characters(path, ":@/", "unix socket path");
    if (!why.empty()) return why;
  } else if (!path.empty() && path != "/" &&
             path.substr(1).find_first_not_of("0123456789") != std::string_view::npos) {
    return "database index (the path /N after the host) is not a number";
  }
  if (query < after.size()) {
    auto why = bad_characters(after.substr(query + 1), ":@/?", "query");
    if (!why.empty()) return why;
  }
  if (fragment != std::string_view::npos) return std::string(kFragment);
  return std::string(otherwise);
}

}  // namespace redis_lock::detail
