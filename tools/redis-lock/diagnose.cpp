// SPDX-License-Identifier: MIT
#include "diagnose.hpp"

#include <redis_lock/error.hpp>

#include <cerrno>
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

/// Whether the server answers a plain-text PING (a TLS URL pointed at a plain port).
bool answers_plain_text(int fd) {
  constexpr char ping[] = "PING\r\n";
  if (::send(fd, ping, sizeof ping - 1, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ping - 1)) {
    return false;
  }
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, probe_timeout_ms) != 1) return false;
  char reply[1] = {};
  return ::recv(fd, reply, 1, 0) == 1 && (reply[0] == '+' || reply[0] == '-');
}

}  // namespace

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
    if (ec == error::server_error && !server_error.empty())
      text += ": " + std::string(server_error);
    return text;
  }
  if (config.topology != Topology::standalone) return text + " (" + describe_target(config) + ")";
  // Connect again, once, to learn what the library's error code does not carry.
  Probe probe;
  connect_once(config, probe);
  std::string why;
  if (probe.fd < 0) {
    why = probe.failure;
  } else if (config.tls && answers_plain_text(probe.fd)) {
    why = "the server answers in plain text, not TLS: use redis:// (or the server's TLS port)";
  } else {
    why = text;
  }
  return "could not connect to " + describe_target(config) + ": " + why;
}

}  // namespace redis_lock::cli
