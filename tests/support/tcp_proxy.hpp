// SPDX-License-Identifier: MIT
// Test harness: a TCP proxy between the client and redis-server that adds latency or cuts the
// path (a partition that later heals), for faults the kernel's netem cannot make here.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace redis_lock::test {

class TcpProxy {
 public:
  /// Listens on a free loopback port and forwards each connection to 127.0.0.1:target_port,
  /// on a thread of its own.
  explicit TcpProxy(std::uint16_t target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  std::uint16_t port() const noexcept;
  /// Every chunk is delivered this much later than it arrived, in each direction.
  void set_delay(std::chrono::milliseconds delay) noexcept;
  /// On: nothing is forwarded (bytes wait, as behind a dead link); off: the path heals and
  /// what waited is delivered.
  void set_blackhole(bool on) noexcept;
  /// Every connection open now is reset (RST, both ends); new ones are accepted as before.
  void reset_connections();
  /// The next chunk the server sends is replaced by bytes that are not RESP (the command
  /// it answers has run on the server; the client sees a protocol error).
  void corrupt_next_reply() noexcept;
  /// On each connection whose client has sent bytes containing `needle`, every later reply
  /// comes `delay` late (on top of set_delay): e.g. the replies to a CLUSTER SLOTS. Call it
  /// before any client connects.
  void delay_replies_after(std::string needle, std::chrono::milliseconds delay);
  /// Every chunk the server sends has each match of `pattern` (ECMAScript) replaced by
  /// `replacement` ($1 ... for its groups): e.g. the version in a HELLO reply. From then
  /// on (call it before the client connects for every reply to be rewritten).
  void rewrite_replies(std::string pattern, std::string replacement);
  /// The server's HELLO replies say `version` instead of its own (a server older, or newer,
  /// than it is), through rewrite_replies.
  void rewrite_server_version(const std::string& version);
  /// Bytes forwarded from clients to the server so far.
  unsigned long long bytes_from_clients() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace redis_lock::test
