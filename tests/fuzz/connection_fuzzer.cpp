// SPDX-License-Identifier: MIT
// libFuzzer target: a fake server sends arbitrary bytes (in chunks whose sizes come from the
// input) to a real Connection with commands queued, then closes. Whatever it sends, every
// command completes exactly once and nothing crashes or leaks.
#include "connection.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include <unistd.h>

namespace asio = boost::asio;
using asio::local::stream_protocol;

namespace {

// An abstract Unix socket (leading NUL): nothing on the file system to clean up.
const std::string& socket_path() {
  static const std::string path =
      std::string(1, '\0') + "redis_lock_fuzz_" + std::to_string(::getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t chunk = 1 + data[0] % 32;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  asio::io_context io;
  stream_protocol::acceptor acceptor(io, stream_protocol::endpoint(socket_path()));
  stream_protocol::socket server(io);
  std::size_t sent = 0;
  std::function<void()> send_next = [&] {
    if (sent >= bytes.size()) {
      boost::system::error_code ignored;
      server.shutdown(stream_protocol::socket::shutdown_both, ignored);
      server.close(ignored);
      return;
    }
    const std::size_t n = std::min(chunk, bytes.size() - sent);
    asio::async_write(server, asio::buffer(bytes.data() + sent, n),
                      [&, n](boost::system::error_code ec, std::size_t) {
                        sent += n;
                        if (ec) sent = bytes.size();
                        send_next();
                      });
  };
  acceptor.async_accept(server, [&](boost::system::error_code ec) {
    if (!ec) send_next();
  });

  redis_lock::ConnectionConfig cfg;
  cfg.unix_socket = socket_path();
  cfg.connect_timeout = std::chrono::milliseconds(500);
  cfg.command_timeout = std::chrono::milliseconds(500);
  auto conn = std::make_shared<redis_lock::detail::Connection>(asio::make_strand(io), cfg, "");
  // Bit 5 of the first byte: a handshake that loads two scripts (its errors are tolerated)
  // instead of a PING.
  if ((data[0] & 32) != 0) conn->set_preload({"return 1", "return 2"});
  int calls[3] = {0, 0, 0};
  asio::post(conn->strand(), [&] {
    for (int i = 0; i < 3; ++i) {
      const std::string_view command[] = {"EVALSHA", "0123", "1", "key", "arg"};
      conn->execute(command, redis_lock::detail::Connection::Callback(
                                 [&calls, i](boost::system::error_code, redis_lock::detail::Reply) {
                                   ++calls[i];
                                 }));
    }
  });
  io.run_for(std::chrono::seconds(3));
  for (int c : calls) {
    if (c != 1) std::abort();  // a command completed twice, or never
  }
  return 0;
}
