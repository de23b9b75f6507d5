// SPDX-License-Identifier: MIT
#include "diagnose.hpp"

#include <redis_lock/error.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace redis_lock::cli {

namespace {

/// A connected socket, or the reason there is none.
struct Probe {
  int fd = -1;
  std::string failure;
  ~Probe() {
    if (fd >= 0) ::close(fd);
  }
};

constexpr int probe_timeout_ms = 1000;

/// Connects like the library does, once, blocking for at most probe_timeout_ms.
void connect_once(const ConnectionConfig& config, Probe& probe) {
  if (!config.unix_socket.empty()) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, config.unix_socket.c_str(), sizeof address.sun_path - 1);
    probe.fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(probe.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      probe.failure = std::strerror(errno);
      ::close(probe.fd);
      probe.fd = -1;
    }
    return;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(config.port);
  if (const int rc = ::getaddrinfo(config.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    probe.failure = std::string("cannot resolve '") + config.host + "': " + ::gai_strerror(rc);
    return;
  }
  for (addrinfo* a = found; a != nullptr && probe.fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, probe_timeout_ms) == 1) {
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    if (err == 0) {
      probe.fd = fd;
      probe.failure.clear();
    } else {
      probe.failure = std::strerror(err);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
}

}  // namespace

/// The length of the UTF-8 sequence at the start of `s`, 0 if it is not a valid one.
std::size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t n = 0;
  unsigned min = 0;
  unsigned code = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, min = 0x80, code = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, min = 0x800, code = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, min = 0x10000, code = lead & 0x07u;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i) & 0x3fu);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return n;
}

std::string printable(std::string_view s) {
  std::string out;
  const auto hex = [&](unsigned char c, const char* format) {
    char buf[12];
    std::snprintf(buf, sizeof buf, format, c);
    out += buf;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const auto n = utf8_sequence(s.substr(i));
      if (n == 0) {
        hex(c, "\\x%02x");
        ++i;
      } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
        hex(static_cast<unsigned char>(s[i + 1]), "\\u%04x");  // a C1 control
        i += 2;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      hex(c, "\\x%02x");
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string in_cli_words(std::string_view library_text) {
  std::string text = printable(library_text);
  constexpr std::string_view field = "ManagerOptions::accept_evicting_server";
  for (auto at = text.find(field); at != std::string::npos; at = text.find(field, at)) {
    text.replace(at, field.size(), "--accept-evicting-server");
  }
  return text;
}

std::string describe_target(const ConnectionConfig& config) {
  if (!config.unix_socket.empty()) return config.unix_socket;
  const auto address = [](const std::string& host, std::uint16_t port) {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  };
  if (config.topology == Topology::standalone || config.nodes.empty()) {
    return address(config.host, config.port);
  }
  std::string all;
  for (const auto& node : config.nodes)
    all += (all.empty() ? "" : ",") + address(node.host, node.port);
  return all;
}

std::string describe_failure(const ConnectionConfig& config, boost::system::error_code ec,
                             std::string_view server_error) {
  std::string text = ec.message();
  const bool connecting = ec == error::connect_failed || ec == error::connect_timeout ||
                          ec == error::tls_handshake_failed || ec == error::connection_lost ||
                          (config.tls && ec == error::timeout);  // a handshake left unanswered
  if (!connecting) {
    // The library reports a refused SELECT as invalid_argument (without the server's text).
    if (ec == error::invalid_argument && config.database != 0) {
      return "database " + std::to_string(config.database) + " does not exist on " +
             describe_target(config) + " (the server refused SELECT)";
    }
    if (ec == error::server_error && !server_error.empty()) text += ": " + printable(server_error);
    // The version found and the version needed, which the code alone does not carry.
    if (ec == error::server_unsupported && !server_error.empty()) {
      return printable(server_error) + " (" + describe_target(config) + ")";
    }
    // The policy and maxmemory found, and how to accept them.
    if (ec == error::server_evicts && !server_error.empty()) {
      return in_cli_words(server_error) + " (" + describe_target(config) + ")";
    }
    return text;
  }
  if (config.topology != Topology::standalone) return text + " (" + describe_target(config) + ")";
  // Connect again, once, to learn what the library's error code does not carry.
  Probe probe;
  connect_once(config, probe);
  std::string why;
  if (probe.fd < 0) {
    why = probe.failure;
  } else if (config.tls && (ec == error::timeout || ec == error::connect_timeout ||
                            ec == error::connection_lost)) {
    // The port accepts connections but gave no TLS answer. A plain-text Redis does exactly
    // that (it waits for a line that a TLS hello never ends); asking it in plain text would
    // tell, but nothing is ever sent unencrypted to a TLS URL's server.
    why =
        "the server accepts connections but did not answer the TLS handshake: if this port "
        "speaks plain text, use redis:// (or the server's TLS port)";
  } else {
    why = text;
  }
  return "could not connect to " + describe_target(config) + ": " + why;
}

}  // namespace redis_lock::cli
