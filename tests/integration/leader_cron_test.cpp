// SPDX-License-Identifier: MIT
// examples/leader_cron, three processes against a real server: its leaders are killed with
// SIGKILL, one after the other. The fenced store's log shows that no period ran twice, one
// leader per term, terms in order, and that the job never paused longer than the ttl plus
// one period (plus the scheduling slack of a loaded machine).
#include "child_process.hpp"
#include "cron_log.hpp"
#include "live.hpp"

#include <memory>

using namespace redis_lock;
using namespace redis_lock::test;

namespace {

constexpr auto period = 200ms;
constexpr auto ttl = 1000ms;

struct Cron {
  explicit Cron(std::string election) : name(std::move(election)) {}
  std::unique_ptr<ChildProcess> spawn() {
    auto node = std::make_unique<ChildProcess>(std::vector<std::string>{
        REDIS_LOCK_LEADER_CRON_PATH, "redis://127.0.0.1:" + std::to_string(shared_server_port()),
        "--name", name, "--period", std::to_string(period.count()), "--ttl",
        std::to_string(ttl.count()), "--work", "5", "--quiet"});
    // Ready: a SIGTERM from here on is handled (the node resigns, exits 0).
    EXPECT_EQ(node->read_line(), "candidate " + std::to_string(node->pid()));
    return node;
  }
  std::vector<CronRun> runs() const {
    return cron_runs(shared_server_port(), "cron:" + name + ":log");
  }
  std::string name;
};

}  // namespace

TEST(LeaderCron, KilledLeadersAreReplacedWithinTheTtlAndNoPeriodRunsTwice) {
  Cron cron(unique_resource());
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(cron.spawn());
  std::vector<long> killed;
  for (int kill = 0; kill < 2; ++kill) {
    // A leader that has run a few periods (not one killed before).
    wait_until(
        [&] {
          const auto runs = cron.runs();
          if (runs.size() < 3) return false;
          const auto pid = runs.back().pid;
          std::size_t by_it = 0;
          for (const auto& r : runs) by_it += r.pid == pid;
          return by_it >= 3 && std::find(killed.begin(), killed.end(), pid) == killed.end();
        },
        15s, "a leader that ran three periods");
    const auto leader = cron.runs().back().pid;
    for (auto& node : nodes) {
      if (node->pid() == leader) node->kill9();
    }
    killed.push_back(leader);
    nodes.push_back(cron.spawn());  // a node comes back
  }
  // The last leader runs a few periods too, then everyone stops (and the leader resigns).
  wait_until(
      [&] {
        const auto runs = cron.runs();
        std::size_t after = 0;
        for (auto it = runs.rbegin(); it != runs.rend() && it->pid != killed.back(); ++it) ++after;
        return after >= 3;
      },
      15s, "the second successor's runs");
  for (auto& node : nodes) node->signal(SIGTERM);
  for (auto& node : nodes) {
    if (node->pid() > 0) {
      EXPECT_EQ(node->wait(), 0);
    }
  }

  const auto runs = cron.runs();
  const auto verdict = check_cron_runs(runs);
  EXPECT_EQ(verdict.broken, "");
  EXPECT_GE(verdict.terms, 3u) << "two successors";
  // The longest pause: the killed leader's last run, then its lease's ttl, then the
  // successor's run at once (its period had not run). 300 ms of slack for the hand-off and
  // for scheduling on a busy machine (sanitized processes, the suite beside them).
  EXPECT_LE(verdict.longest_gap_ms, (ttl + period + 300ms).count());
  // (A deposed leader's late commit refused by the store is the fencing at work: counted.)
  const auto refused =
      redis_command(shared_server_port(), {"LLEN", "cron:" + cron.name + ":refused"});
  std::printf(
      "%zu runs, %zu terms, %s refused, longest gap %lld ms (ttl %lld ms + period %lld "
      "ms)\n",
      runs.size(), verdict.terms, refused.c_str(), verdict.longest_gap_ms,
      static_cast<long long>(ttl.count()), static_cast<long long>(period.count()));
}
