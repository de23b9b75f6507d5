// SPDX-License-Identifier: MIT
// Idempotent requests under crashes: P processes run M duplicates of each of K keys, each
// work call a side effect that is not idempotent (a counter per key), and each process kills
// itself (SIGKILL) inside some work calls, before or after the effect; a dead process is
// replaced. Then one process asks every key until it is decided. Every key's effect must
// have happened exactly once, and every caller told a decision must have been told the one
// the downstream made: nothing was re-executed while its outcome was unknown.
//
// Size: REDIS_LOCK_SOAK_PROCESSES (default 4) x REDIS_LOCK_SOAK_ROUNDS keys (default 60).
#include "child_process.hpp"
#include "live.hpp"
#include "soak_size.hpp"

#include <map>
#include <set>
#include <sstream>

using namespace redis_lock;
using namespace redis_lock::test;

TEST(IdempotencySoak, EachKeysEffectHappensOnceThroughCrashes) {
  const int processes = env_or("REDIS_LOCK_SOAK_PROCESSES", 4);
  const int keys = env_or("REDIS_LOCK_SOAK_ROUNDS", 60);
  const int duplicates = 3;
  const auto port = shared_server_port();
  const auto prefix = unique_resource("idem") + ":";
  int seed = static_cast<int>(std::random_device{}() % 100000);
  SCOPED_TRACE("first seed " + std::to_string(seed));
  // The first P processes each die at their third or fourth work call (before the effect,
  // after it); every process may also die at any work call (15 in 1,000 at each of its two
  // points).
  int first = 0;
  const auto spawn = [&](bool finish) {
    const int nth = first < processes ? 3 + first++ % 2 : 0;
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        REDIS_LOCK_IDEMPOTENCY_SOAK_WORKER_PATH, std::to_string(port), prefix, std::to_string(keys),
        std::to_string(duplicates), std::to_string(seed++), "15", finish ? "finish" : "run",
        std::to_string(nth)});
  };
  // What each caller was told, per key: the bodies of its decisions.
  std::map<std::string, std::set<std::string>> told;
  int decided_answers = 0, crashes = 0, errors = 0;
  const auto read = [&](ChildProcess& worker) {
    std::istringstream lines(worker.read_all());
    std::string line;
    bool done = false;
    while (std::getline(lines, line)) {
      if (line == "done") {
        done = true;
        continue;
      }
      if (line.rfind("reconciled", 0) == 0) {
        std::printf("[ soak     ] %s\n", line.c_str());
        continue;
      }
      std::istringstream words(line);
      std::string key, result, body;
      words >> key >> result >> body;
      if (result == "executed" || result == "replayed") {
        told[key].insert(body);
        ++decided_answers;
      }
      if (result == "error") ++errors;
    }
    return done;
  };
  // P at a time; each crash is replaced, up to 4 P processes in all.
  std::vector<std::unique_ptr<ChildProcess>> running;
  for (int i = 0; i < processes; ++i) running.push_back(spawn(false));
  int spawned = processes;
  while (!running.empty()) {
    auto worker = std::move(running.front());
    running.erase(running.begin());
    const bool finished = read(*worker);
    const int status = worker->wait();
    if (!finished) {
      ++crashes;
      EXPECT_EQ(status, -1) << "a worker ended without finishing and was not killed";
      if (spawned < 4 * processes) {
        running.push_back(spawn(false));
        ++spawned;
      }
    } else {
      EXPECT_EQ(status, 0);
    }
  }
  auto finisher = spawn(true);
  EXPECT_TRUE(read(*finisher));
  EXPECT_EQ(finisher->wait(), 0);

  // Every key: one effect, one decision told to everyone, the downstream's.
  int effects_total = 0;
  for (int k = 0; k < keys; ++k) {
    const std::string key = "key" + std::to_string(k);
    SCOPED_TRACE(key);
    const auto effects = redis_command(port, {"GET", prefix + "effects:{" + key + "}"});
    EXPECT_EQ(effects, "1") << "the side effect ran " << effects << " times";
    effects_total += effects == "1";
    const auto charge = redis_command(port, {"HGET", prefix + "charges", key + "/1"});
    ASSERT_EQ(told[key].size(), 1u) << "callers were told different decisions, or none";
    EXPECT_EQ(*told[key].begin(), charge) << "a caller was told something the downstream "
                                             "did not decide";
  }
  std::printf(
      "[ soak     ] %d processes (%d crashed inside a work call), %d keys x %d duplicates: "
      "%d effects exactly once, %d decisions told, %d errors\n",
      spawned, crashes, keys, duplicates, effects_total, decided_answers, errors);
  EXPECT_GT(crashes, 0) << "no crash happened: the soak proved nothing about them";
  EXPECT_EQ(errors, 0);
}
