// SPDX-License-Identifier: MIT
// CTest fixture: `redis_fixture start STATE [ARGS...]` starts a redis-server on a free loopback
// port and writes "port pid dir" to STATE; `redis_fixture stop STATE` kills it and cleans up.
#include "redis_server.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: redis_fixture start|stop STATE [redis-server args...]\n";
    return 2;
  }
  const std::string verb = argv[1];
  const std::string state = argv[2];
  if (verb == "start") {
    std::vector<std::string> extra(argv + 3, argv + argc);
    redis_lock::test::RedisServer server(extra, /*die_with_parent=*/false);
    FILE* f = std::fopen(state.c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "%u %d %s\n", server.port(), static_cast<int>(server.pid()),
                 server.dir().c_str());
    std::fclose(f);
    std::cout << "redis-server pid " << server.pid() << " on 127.0.0.1:" << server.port() << "\n";
    server.detach();
    return 0;
  }
  if (verb == "stop") {
    FILE* f = std::fopen(state.c_str(), "r");
    if (f == nullptr) return 0;
    unsigned port = 0;
    int pid = 0;
    char dir[4096] = {};
    const int n = std::fscanf(f, "%u %d %4095s", &port, &pid, dir);
    std::fclose(f);
    if (n >= 2 && pid > 0) {
      ::kill(pid, SIGCONT);
      ::kill(pid, SIGKILL);
    }
    if (n == 3 && std::strncmp(dir, "/tmp/redis_lock_test_", 21) == 0) {
      const std::string cmd = std::string("rm -rf '") + dir + "'";
      [[maybe_unused]] int rc = std::system(cmd.c_str());
    }
    std::remove(state.c_str());
    std::cout << "stopped redis-server pid " << pid << "\n";
    return 0;
  }
  std::cerr << "unknown verb " << verb << "\n";
  return 2;
}
