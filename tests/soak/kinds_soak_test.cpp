// SPDX-License-Identifier: MIT
// Soaks of the other kinds of lock, P worker processes each, plainly and with holders killed
// with SIGKILL midway (a killed worker is replaced): a semaphore's holders, counted on the
// data server, never exceed its limit and reach it; readers never see a record change under
// them (nor, without kills, half written); transfers between accounts under
// async_acquire_all never change the sum of the balances.
//
// Size: REDIS_LOCK_SOAK_PROCESSES (default 4) x REDIS_LOCK_SOAK_ROUNDS (default 60).
#include "child_process.hpp"
#include "live.hpp"
#include "soak_size.hpp"

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

long long number(std::uint16_t port, const std::string& key) {
  const auto text = redis_command(port, {"GET", key});
  return text == "(nil)" || text.empty() ? 0LL : std::stoll(text);
}

/// Runs `processes` workers of `mode` for `rounds` each; with `kills`, that many of them are
/// killed with SIGKILL after a few rounds (perhaps holding the lock, perhaps mid-update) and
/// replaced. Returns the number of workers that did not finish cleanly (killed ones aside).
int run_workers(const std::string& mode, const std::string& resource, int processes, int rounds,
                int kills, const std::string& extra = {}) {
  const auto spawn = [&] {
    std::vector<std::string> argv{REDIS_LOCK_KINDS_SOAK_WORKER_PATH,
                                  mode,
                                  std::to_string(shared_server_port()),
                                  resource,
                                  std::to_string(rounds),
                                  "2000"};
    if (!extra.empty()) argv.push_back(extra);
    return std::make_unique<ChildProcess>(argv);
  };
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int i = 0; i < processes; ++i) workers.push_back(spawn());
  for (int k = 0; k < kills; ++k) {
    auto& victim = workers[static_cast<std::size_t>(k)];
    for (int i = 0; i < 3; ++i) victim->read_line();
    victim->kill9();
    workers.push_back(spawn());
  }
  int unclean = 0;
  for (std::size_t i = static_cast<std::size_t>(kills); i < workers.size(); ++i) {
    unclean += workers[i]->wait() != 0;
  }
  return unclean;
}

void semaphore_soak(int kills) {
  const int processes = env_or("REDIS_LOCK_SOAK_PROCESSES", 4) + 1;
  const int rounds = env_or("REDIS_LOCK_SOAK_ROUNDS", 60);
  const int limit = 2;
  const auto resource = unique_resource();
  EXPECT_EQ(run_workers("semaphore", resource, processes, rounds, kills, std::to_string(limit)), 0);
  const auto peak = number(shared_server_port(), "soak:{" + resource + "}:peak");
  std::printf(
      "[ soak     ] semaphore of %d, %d processes x %d rounds, %d killed: at most %lld "
      "holders at once\n",
      limit, processes, rounds, kills, peak);
  EXPECT_LE(peak, limit) << "more holders than permits";
  // Reached (plainly; with kills, dead holders and dead waiters may keep permits for much
  // of a short run).
  if (kills == 0) {
    EXPECT_EQ(peak, limit) << "the limit was never reached: the soak tested nothing";
  }
}

void read_write_soak(int kills) {
  const int processes = env_or("REDIS_LOCK_SOAK_PROCESSES", 4);
  const int rounds = env_or("REDIS_LOCK_SOAK_ROUNDS", 60);
  const auto resource = unique_resource();
  EXPECT_EQ(run_workers("rw", resource, processes, rounds, kills), 0);
  const auto port = shared_server_port();
  const std::string data = "soak:{" + resource + "}:";
  const auto reads = number(port, data + "reads"), writes = number(port, data + "writes");
  const auto changed = number(port, data + "changed"), half = number(port, data + "half");
  const auto sharing = number(port, data + "readers_peak"), lapsed = number(port, data + "lapsed");
  std::printf(
      "[ soak     ] read-write lock, %d processes x %d rounds, %d killed: %lld reads "
      "(at most %lld at once), %lld writes, %lld records changed under a reader, %lld "
      "half written, %lld leases ran out mid-round\n",
      processes, rounds, kills, reads, sharing, writes, changed, half, lapsed);
  EXPECT_GT(reads, 0);
  EXPECT_GT(writes, 0);
  EXPECT_GT(sharing, 1) << "readers never held together";
  EXPECT_EQ(changed, 0) << "a writer wrote beside a reader";
  // A writer killed between its two fields leaves the record half written (no lock can
  // undo that), and so does one whose lease ran out mid-round (it skips the second field:
  // fencing's business); otherwise no reader may ever see one.
  if (kills == 0 && lapsed == 0) {
    EXPECT_EQ(half, 0) << "a reader saw a writer's record half written";
  }
}

void transfer_soak(int kills) {
  const int processes = env_or("REDIS_LOCK_SOAK_PROCESSES", 4);
  const int rounds = env_or("REDIS_LOCK_SOAK_ROUNDS", 60);
  const int accounts = 4;
  const auto resource = unique_resource();
  const auto port = shared_server_port();
  const std::string data = "soak:{" + resource + "}:";
  for (int i = 0; i < accounts; ++i) {
    redis_command(port, {"SET", data + resource + ":account:" + std::to_string(i), "1000"});
  }
  EXPECT_EQ(run_workers("transfer", resource, processes, rounds, kills, std::to_string(accounts)),
            0);
  long long sum = 0;
  for (int i = 0; i < accounts; ++i) {
    sum += number(port, data + resource + ":account:" + std::to_string(i));
  }
  const auto transfers = number(port, data + "transfers");
  std::printf(
      "[ soak     ] transfers between %d accounts, %d processes x %d rounds, %d killed: "
      "%lld transfers, sum of balances %lld (was %d)\n",
      accounts, processes, rounds, kills, transfers, sum, accounts * 1000);
  EXPECT_GE(transfers, static_cast<long long>(processes) * rounds);
  EXPECT_EQ(sum, accounts * 1000) << "two transfers overlapped: an update was lost";
}

}  // namespace

TEST(Soak, SemaphoreHoldersNeverExceedTheLimitAndReachIt) { semaphore_soak(0); }
TEST(Soak, SemaphoreWithHoldersKilled) { semaphore_soak(2); }
TEST(Soak, ReadersNeverSeeAWriterAtWork) { read_write_soak(0); }
TEST(Soak, ReadWriteLockWithHoldersKilled) { read_write_soak(2); }
TEST(Soak, TransfersKeepTheSumOfTheBalances) { transfer_soak(0); }
TEST(Soak, TransfersWithHoldersKilled) { transfer_soak(2); }
