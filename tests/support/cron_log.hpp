// SPDX-License-Identifier: MIT
// The log examples/leader_cron keeps in its fenced store (`cron:NAME:log`, one entry per
// period that ran: "PERIOD TERM SERVER_MS PID"), read back and checked: no period ran twice,
// one leader per term, terms never overlap.
#pragma once

#include "redis_server.hpp"

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace redis_lock::test {

struct CronRun {
  long long period = 0;
  std::uint64_t term = 0;
  long long server_ms = 0;  // the store's clock when it recorded the run
  long pid = 0;
};

inline std::vector<CronRun> cron_runs(std::uint16_t port, const std::string& key) {
  std::vector<CronRun> runs;
  std::istringstream in(redis_command(port, {"LRANGE", key, "0", "-1"}));
  for (CronRun r; in >> r.period >> r.term >> r.server_ms >> r.pid;) runs.push_back(r);
  return runs;
}

/// What a log shows; `broken` says the first thing wrong with it ("" when nothing is).
struct CronVerdict {
  std::string broken;
  long long longest_gap_ms = 0;  // between two consecutive runs, on the store's clock
  std::size_t terms = 0;
};

inline CronVerdict check_cron_runs(const std::vector<CronRun>& runs) {
  CronVerdict v;
  std::map<std::uint64_t, long> leader_of;  // term -> its one pid
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    auto [it, fresh] = leader_of.emplace(r.term, r.pid);
    if (!fresh && it->second != r.pid && v.broken.empty()) {
      v.broken = "term " + std::to_string(r.term) + " had two leaders: pids " +
                 std::to_string(it->second) + " and " + std::to_string(r.pid);
    }
    if (i == 0) continue;
    const auto& prev = runs[i - 1];
    if (r.period <= prev.period && v.broken.empty()) {
      v.broken = "period " + std::to_string(r.period) + " ran after period " +
                 std::to_string(prev.period) + " (twice, or out of order)";
    }
    if (r.term < prev.term && v.broken.empty()) {
      v.broken = "term " + std::to_string(r.term) + " wrote after term " +
                 std::to_string(prev.term) + ": two leaderships overlapped";
    }
    if (r.term != prev.term && !fresh && v.broken.empty()) {
      v.broken = "term " + std::to_string(r.term) + " wrote again after term " +
                 std::to_string(prev.term) + " had begun";
    }
    v.longest_gap_ms = std::max(v.longest_gap_ms, r.server_ms - prev.server_ms);
  }
  v.terms = leader_of.size();
  return v;
}

}  // namespace redis_lock::test
