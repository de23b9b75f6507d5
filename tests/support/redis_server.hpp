// SPDX-License-Identifier: MIT
// Test harness: real redis-server processes on free loopback ports, and faults made for real.
#pragma once

#include <redis_lock/config.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redis_lock::test {

/// A redis-server child process on a free loopback port (and a Unix socket), stopped with
/// the object. Admin commands go through a plain blocking hiredis client.
class RedisServer {
 public:
  /// An extra argument equal to this is replaced by a free port, chosen again on each start
  /// attempt like the server's own (e.g. `{"--tls-port", RedisServer::free_port_arg}`).
  static constexpr const char* free_port_arg = "<free port>";
  /// `die_with_parent`: the server is killed if the test process dies (false for fixtures).
  explicit RedisServer(std::vector<std::string> extra_args = {}, bool die_with_parent = true);
  /// A redis-server in Sentinel mode, with `config_lines` as its (rewritable) config file.
  static std::unique_ptr<RedisServer> sentinel(std::vector<std::string> config_lines);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  /// The port that replaced the first `free_port_arg` of the extra arguments (0: none).
  std::uint16_t extra_port() const noexcept { return extra_port_; }
  const std::string& unix_socket() const noexcept { return unix_socket_; }
  pid_t pid() const noexcept { return pid_; }
  ConnectionConfig config() const;

  void kill(int signal = 9);  ///< sends `signal`; SIGKILL/SIGTERM also reap the process
  void pause();               ///< SIGSTOP
  void resume();              ///< SIGCONT
  void restart();             ///< start again on the same port (after kill)
  bool running() const noexcept { return pid_ > 0; }
  const std::string& dir() const noexcept { return dir_; }
  /// Leaves the process running after this object is gone (for CTest fixtures).
  void detach() noexcept;

  /// Runs one command and returns the reply as text: strings and statuses as is, integers
  /// in decimal, nil as "(nil)", errors as "ERR:<text>", arrays as space-joined elements.
  std::string command(const std::vector<std::string>& args) const;

 private:
  struct SentinelMode {};
  RedisServer(SentinelMode, std::vector<std::string> config_lines);
  void start();
  void spawn();
  bool wait_ready(std::chrono::milliseconds limit);

  std::string sentinel_config_;  // path of the config file; empty: not a sentinel
  std::string password_;         // its requirepass: wait_ready() authenticates with it

  std::vector<std::string> extra_args_;
  std::string dir_;
  std::string unix_socket_;
  std::uint16_t port_ = 0;
  std::uint16_t extra_port_ = 0;
  pid_t pid_ = -1;
  bool die_with_parent_ = true;
  bool keep_dir_ = false;
};

/// The configuration of the shared standalone server that the CTest fixture started
/// (REDIS_LOCK_TEST_SERVER names its state file); without one, a server private to this
/// test process is started on first use.
ConnectionConfig shared_server_config();
std::uint16_t shared_server_port();

/// Polls `pred` every 20 ms until it holds; after `limit`, throws std::runtime_error saying
/// what it waited for (test set-up that cannot go on).
template <class Pred>
void wait_until(Pred pred, std::chrono::milliseconds limit, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("timed out waiting for " + what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// Picks a TCP port on 127.0.0.1 that nothing listens on right now.
std::uint16_t free_port();

/// Runs `args` (first is the command) against 127.0.0.1:port with hiredis.
std::string redis_command(std::uint16_t port, const std::vector<std::string>& args,
                          const std::string& password = {});

/// The server's clock in milliseconds (TIME; the scripts' queue places and lease-set scores
/// are on it).
inline long long server_ms(std::uint16_t port) {
  const auto t = redis_command(port, {"TIME"});  // "seconds microseconds"
  const auto space = t.find(' ');
  return std::stoll(t.substr(0, space)) * 1000 + std::stoll(t.substr(space + 1)) / 1000;
}

/// Waits until the server's clock is past `ms` (throws after 10 s: the test fails).
inline void server_clock_passes(std::uint16_t port, long long ms) {
  wait_until([&] { return server_ms(port) > ms; }, std::chrono::seconds(10),
             "the server's clock to pass " + std::to_string(ms));
}

}  // namespace redis_lock::test
