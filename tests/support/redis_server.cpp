// SPDX-License-Identifier: MIT
// Starting, stopping and hurting redis-server processes for the tests.
#include "redis_server.hpp"

#include "raw_redis.hpp"

#include <deque>
#include <fstream>

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace redis_lock::test {

namespace {

std::string reply_text(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::string(r->str, r->len);
    case REDIS_REPLY_ERROR:
      return "ERR:" + std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (std::size_t i = 0; i < r->elements; ++i) {
        if (i) out += ' ';
        out += reply_text(r->element[i]);
      }
      return out;
    }
    default:
      return "?";
  }
}

std::string make_temp_dir() {
  char tmpl[] = "/tmp/redis_lock_test_XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

}  // namespace

namespace {

// Binds a loopback TCP socket to `port` (0: any) and returns the port it got, or 0.
std::uint16_t try_bind(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  std::uint16_t got = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    got = ntohs(addr.sin_port);
  }
  ::close(fd);
  return got;
}

// A cluster node also listens on its port + 10000 (the cluster bus), so its port must be at
// most 55535 and that second port free too: an ephemeral port is above 55535 about one time
// in five here, and redis-server then exits at once.
constexpr std::uint16_t cluster_bus_offset = 10000;

std::uint16_t free_cluster_port() {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = free_port();
    if (port <= 65535 - cluster_bus_offset &&
        try_bind(static_cast<std::uint16_t>(port + cluster_bus_offset)) != 0) {
      return port;
    }
  }
  throw std::runtime_error("no free port pair for a cluster node");
}

bool is_cluster_node(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--cluster-enabled" && args[i + 1] == "yes") return true;
  }
  return false;
}

}  // namespace

std::uint16_t free_port() {
  const auto port = try_bind(0);
  if (port == 0) throw std::runtime_error("bind failed");
  return port;
}

std::string redis_command(std::uint16_t port, const std::vector<std::string>& args,
                          const std::string& password) {
  timeval tv{5, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr || c->err) {
    std::string err = c ? c->errstr : "alloc";
    if (c) redisFree(c);
    return "CONNECT:" + err;
  }
  redisSetTimeout(c, tv);
  if (!password.empty()) {
    auto* auth =
        static_cast<redisReply*>(redisCommand(c, "AUTH %b", password.data(), password.size()));
    if (auth) freeReplyObject(auth);
  }
  const auto r = raw_command(c, args);
  std::string out = r ? reply_text(r.get()) : std::string("IO:") + c->errstr;
  redisFree(c);
  return out;
}

RedisServer::RedisServer(std::vector<std::string> extra_args, bool die_with_parent)
    : extra_args_(std::move(extra_args)), dir_(make_temp_dir()), die_with_parent_(die_with_parent) {
  for (std::size_t i = 0; i + 1 < extra_args_.size(); ++i) {
    if (extra_args_[i] == "--requirepass") password_ = extra_args_[i + 1];
  }
  start();
}

std::unique_ptr<RedisServer> RedisServer::sentinel(std::vector<std::string> config_lines) {
  return std::unique_ptr<RedisServer>(new RedisServer(SentinelMode{}, std::move(config_lines)));
}

RedisServer::RedisServer(SentinelMode, std::vector<std::string> config_lines)
    : dir_(make_temp_dir()) {
  sentinel_config_ = dir_ + "/sentinel.conf";
  std::ofstream file(sentinel_config_);
  const std::string requirepass = "requirepass ";
  for (const auto& line : config_lines) {
    file << line << "\n";
    if (line.rfind(requirepass, 0) == 0) password_ = line.substr(requirepass.size());
  }
  file.close();
  start();
}

void RedisServer::start() {
  unix_socket_ = dir_ + "/redis.sock";
  const bool cluster_node = is_cluster_node(extra_args_);
  for (int attempt = 0; attempt < 10; ++attempt) {
    port_ = cluster_node ? free_cluster_port() : free_port();
    if (std::find(extra_args_.begin(), extra_args_.end(), free_port_arg) != extra_args_.end()) {
      extra_port_ = free_port();
    }
    spawn();
    if (wait_ready(std::chrono::seconds(5))) return;
    kill(SIGKILL);  // most likely a port was taken between free_port() and bind
  }
  // Say why: the last lines of the server's log (a bad option, a port it could not bind...).
  std::ifstream log(dir_ + "/redis.log");
  std::deque<std::string> tail;
  for (std::string line; std::getline(log, line);) {
    tail.push_back(std::move(line));
    if (tail.size() > 3) tail.pop_front();
  }
  std::string why = "could not start redis-server (port " + std::to_string(port_) + ")";
  for (const auto& line : tail) why += "\n  " + line;
  throw std::runtime_error(why);
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);
    kill(SIGKILL);
  }
  if (!keep_dir_) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    [[maybe_unused]] int rc = std::system(cmd.c_str());
  }
}

void RedisServer::detach() noexcept {
  pid_ = -1;
  keep_dir_ = true;
}

ConnectionConfig RedisServer::config() const {
  ConnectionConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = port_;
  return cfg;
}

void RedisServer::spawn() {
  std::vector<std::string> args = {"redis-server"};
  if (!sentinel_config_.empty()) {
    args.push_back(sentinel_config_);  // the config file comes first
    args.push_back("--sentinel");
  }
  const std::vector<std::string> common = {"--port",
                                           std::to_string(port_),
                                           "--bind",
                                           "127.0.0.1",
                                           "--unixsocket",
                                           unix_socket_,
                                           "--unixsocketperm",
                                           "700",
                                           "--save",
                                           "",
                                           "--appendonly",
                                           "no",
                                           "--protected-mode",
                                           "no",
                                           "--dir",
                                           dir_,
                                           "--logfile",
                                           dir_ + "/redis.log",
                                           "--enable-debug-command",
                                           "yes"};
  args.insert(args.end(), common.begin(), common.end());
  for (const auto& arg : extra_args_) {
    args.push_back(arg == free_port_arg ? std::to_string(extra_port_) : arg);
  }
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);  // a CTest fixture must not leave its output pipe open
    ::setsid();          // not killed with the fixture process's group
    // A test that crashes must not leave its servers behind (the fixture's server stays).
    if (die_with_parent_) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execvp("redis-server", argv.data());
    std::_Exit(127);
  }
  pid_ = pid;
}

bool RedisServer::wait_ready(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    // Ready when the server on the port is our child: after a failed bind (the port was
    // taken since free_port()) or on a restart's reused port, another process may answer.
    const auto info = redis_command(port_, {"INFO", "server"}, password_);
    if (info.find("\nprocess_id:" + std::to_string(pid_) + "\r") != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void RedisServer::kill(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  if (signal == SIGKILL || signal == SIGTERM) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

void RedisServer::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void RedisServer::restart() {
  if (pid_ > 0) kill(SIGKILL);
  for (int attempt = 0; attempt < 50; ++attempt) {
    spawn();
    if (wait_ready(std::chrono::seconds(10))) return;
    if (pid_ > 0) kill(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // port still in TIME_WAIT use
  }
  throw std::runtime_error("could not restart redis-server");
}

std::string RedisServer::command(const std::vector<std::string>& args) const {
  return redis_command(port_, args);
}

}  // namespace redis_lock::test

namespace redis_lock::test {

std::uint16_t shared_server_port() {
  static const std::uint16_t port = [] {
    if (const char* state = std::getenv("REDIS_LOCK_TEST_SERVER")) {
      FILE* f = std::fopen(state, "r");
      unsigned p = 0;
      int pid = 0;
      if (f != nullptr && std::fscanf(f, "%u %d", &p, &pid) == 2) {
        std::fclose(f);
        return static_cast<std::uint16_t>(p);
      }
      if (f != nullptr) std::fclose(f);
      throw std::runtime_error("REDIS_LOCK_TEST_SERVER is set but unreadable");
    }
    static RedisServer own;  // running a test binary by hand
    return own.port();
  }();
  return port;
}

ConnectionConfig shared_server_config() {
  ConnectionConfig cfg;
  cfg.port = shared_server_port();
  return cfg;
}

}  // namespace redis_lock::test
