// SPDX-License-Identifier: MIT
// The nemesis suite's checker: the workers' histories merged on one clock (steady_clock, the
// same for every process here) and held to docs/safety.md, fault by fault.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace redis_lock::nemesis {

enum class FaultKind {
  partition,
  delay,
  pause,
  reset,         ///< the holder's connections reset by its proxy
  pause_waiter,  ///< a worker that waits for the lock paused
  restart,
  flushall,
  clock_forward,
  clock_back,
  failover,                ///< Cluster: CLUSTER FAILOVER of the lock's master (a replica in sync)
  migration,               ///< Cluster: the lock's slot moved to another master, keys and all
  master_killed,           ///< Cluster: the lock's master SIGKILLed, its replica promoted
  sentinel_failover,       ///< Sentinel: SENTINEL FAILOVER
  sentinel_master_killed,  ///< Sentinel: the master SIGKILLed, the sentinels promote
};
const char* to_string(FaultKind k) noexcept;

/// A fault as the schedule made it: from `at` until `healed` (steady ns).
struct Fault {
  FaultKind kind;
  int target = -1;  ///< the worker it hit, or -1: all of them / the server
  long long at = 0, healed = 0;
};

long long now_ns() noexcept;

struct Report {
  int acquisitions = 0, writes = 0, refused = 0, releases = 0, timeouts = 0;
  int late_writes_refused = 0;        ///< refused, written after the writer's own validity ended
  std::map<std::string, int> errors;  ///< named errors, with counts
  /// Per fault kind: how many, overlaps they explain, the longest time to the next grant.
  struct Row {
    int faults = 0, hits = 0, overlaps = 0, refused = 0;
    long long worst_recovery_ms = 0;
    long long longest_ms =
        0;  ///< from the fault made to healed (a failover: the old master demoted)
  };
  std::map<std::string, Row> rows;
  std::vector<std::string> violations;  ///< each a promise, with what broke it
  std::string table() const;
};

/// Checks the histories (one text per worker, its lines as nemesis_worker writes them):
/// - OVERLAP: no two workers believe they hold the lock at once (from the grant to the
///   release, or to the guard's validity if sooner), except across a fault that loses the
///   lock's data or steps the server's clock forward (docs/safety.md says so), counted;
/// - TOKEN_ORDER: a grant asked for after another was granted, or granted after another
///   holding ended, has the larger fencing token;
/// - WRITES: the register refuses a token only where an overlap is explained;
/// - LOST_SIGNAL: a guard past its validity says it is lost;
/// - HANG: every acquire and every release ends, within its wait and timeouts (and a pause);
/// - NAMED: every error has a name ("<category>:<value> <message>");
/// and measures each fault's recovery (from its heal to the next grant).
Report check(const std::vector<std::string>& histories, const std::vector<Fault>& faults,
             std::chrono::milliseconds ttl);

}  // namespace redis_lock::nemesis
