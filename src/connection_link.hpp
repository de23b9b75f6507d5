// SPDX-License-Identifier: MIT
// Layer 2 (connection): one link of a Connection, its socket and its buffers (the commands
// it awaits replies for are the connection's Pipeline's). Shared by the connection's two
// files: connection.cpp (commands, reads and writes, deadlines) and connection_connect.cpp
// (connecting, TLS, the handshake).
#pragma once

#include "connection.hpp"

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>

namespace redis_lock::detail {

namespace asio = boost::asio;

/// Sends what the socket takes now, without blocking and without SIGPIPE: the bytes sent
/// (0 when its buffer is full or the link is gone; what failed, the next write reports).
inline std::size_t send_now(int fd, std::string_view bytes) noexcept {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

struct Connection::Link {
  using error_code = boost::system::error_code;
  using Socket = asio::generic::stream_protocol::socket;
  Link(const asio::any_io_executor& ex, ReplyLimits limits)
      : socket(ex), resolver(ex), reader(limits) {}
  Socket socket;
  asio::ip::tcp::resolver resolver;
  std::unique_ptr<asio::ssl::stream<Socket&>> tls;  // rediss://: every byte goes through it
  std::vector<asio::generic::stream_protocol::endpoint> endpoints;
  ReplyReader reader;
  Pipeline::LinkId id = 0;  // its commands in flight are the pipeline's
  std::string write_buf;
  std::array<char, 16 * 1024> read_buf;
  bool writing = false;
  // Bytes of write_buf on the socket so far. Connection::write_now needs the true count
  // also for a write whose handler never runs (the io_context stopped): see write().
  std::size_t written = 0;
  // write_now left part of a command on the socket: nothing may be written after it.
  bool torn = false;
  bool reading = false;
  bool is_tcp = true;

  // One read and one write may be outstanding at once, on the strand, also through TLS.
  template <class Handler>
  void write(Handler&& handler) {
    written = 0;
    if (tls) {
      asio::async_write(*tls, asio::buffer(write_buf), std::forward<Handler>(handler));
    } else {
      // Our own first try, counted at once. Asio's speculative send counts only when its
      // handler runs, and a stop in between left bytes on the socket that we took for
      // unsent: a last word written after them landed in a command's middle (one run in 30
      // under TSan and a CPU hog). The rest, when the socket's buffer was full, goes
      // through async_write, whose parts are counted only as its intermediate handlers
      // run (the last one not at all): a stop then finds the write under way, and the last
      // words are not written (the places lapse, as after a crash).
      written = send_now(socket.native_handle(), write_buf);
      const auto first = written;
      asio::async_write(
          socket, asio::buffer(write_buf) + first,
          [this, first](const error_code& ec, std::size_t sent) -> std::size_t {
            written = first + sent;
            return ec || written >= write_buf.size() ? 0 : write_buf.size() - written;
          },
          std::forward<Handler>(handler));
    }
  }
  template <class Handler>
  void read_some(Handler&& handler) {
    if (tls) {
      tls->async_read_some(asio::buffer(read_buf), std::forward<Handler>(handler));
    } else {
      socket.async_read_some(asio::buffer(read_buf), std::forward<Handler>(handler));
    }
  }

  void close() noexcept {
    error_code ignored;
    resolver.cancel();
    socket.close(ignored);
  }
};

/// What a link's connect and I/O code shares: commands' deadlines that never come (a
/// handshake's own steps).
inline constexpr auto never = Pipeline::never;

}  // namespace redis_lock::detail
