// SPDX-License-Identifier: MIT
#include "history.hpp"

#include <algorithm>
#include <sstream>

namespace redis_lock::nemesis {

const char* to_string(FaultKind k) noexcept {
  switch (k) {
    case FaultKind::partition:
      return "the holder's path frozen (1.5 s)";
    case FaultKind::delay:
      return "every path 150 ms slower (2 s)";
    case FaultKind::pause:
      return "the holder paused, SIGSTOP (1.5 s)";
    case FaultKind::reset:
      return "the holder's connections reset";
    case FaultKind::pause_waiter:
      return "a waiter paused, SIGSTOP (1.5 s)";
    case FaultKind::restart:
      return "server SIGKILL + restart, no persistence";
    case FaultKind::flushall:
      return "FLUSHALL";
    case FaultKind::clock_forward:
      return "server clock +2 s";
    case FaultKind::clock_back:
      return "server clock -2 s";
    case FaultKind::failover:
      return "Cluster: CLUSTER FAILOVER of the lock's master";
    case FaultKind::migration:
      return "Cluster: the lock's slot migrated";
    case FaultKind::master_killed:
      return "Cluster: the lock's master SIGKILLed, replica promoted";
    case FaultKind::sentinel_failover:
      return "Sentinel: SENTINEL FAILOVER";
    case FaultKind::sentinel_master_killed:
      return "Sentinel: the master SIGKILLed, replica promoted";
  }
  return "?";
}

long long now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

/// One holding as its worker saw it.
struct Holding {
  int worker = 0;
  std::uint64_t fence = 0;
  long long invoked = 0, granted = 0, ends = 0;  // ends: release sent, or validity, sooner
  long long wrote = 0;                           // when its fenced write was answered
  bool refused = false;
};

bool loses_data(FaultKind k) {
  // docs/safety.md: a restart without persistence and FLUSHALL lose the leases; a server
  // clock stepped forward expires them early. Each may let a second holder in.
  // So may a master killed before its replica had the last writes (asynchronous
  // replication: the "Replica promoted" rows).
  return k == FaultKind::restart || k == FaultKind::flushall || k == FaultKind::clock_forward ||
         k == FaultKind::master_killed || k == FaultKind::sentinel_failover ||
         k == FaultKind::sentinel_master_killed;
}

/// How long after a fault heals it may still let a second holder in: a Sentinel failover
/// heals when the old master says it is a replica (it "accepts writes until a sentinel
/// reconfigures it", docs/safety.md, Sentinel, failover window); after that a write there
/// fails and the client moves. A second of margin for the poll that saw it.
long long aftermath_ns(FaultKind k) {
  return k == FaultKind::sentinel_failover ? 1'000'000'000LL : 0;
}

/// NAMED: an error as the worker writes it, "<category>:<value> <message>" (its category, its
/// code and what it says), not a bare word.
bool named_error(const std::string& name) {
  const auto colon = name.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::size_t i = colon + 1;
  if (i < name.size() && name[i] == '-') ++i;
  const std::size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  return i > digits && i + 1 < name.size() && name[i] == ' ';
}

}  // namespace

Report check(const std::vector<std::string>& histories, const std::vector<Fault>& faults,
             std::chrono::milliseconds ttl) {
  Report r;
  std::vector<Holding> holdings;
  std::vector<long long> grants;
  const long long bound_ns = (3000 + 2000 + 1500 + 2 * ttl.count()) * 1000000LL;
  for (int w = 0; w < static_cast<int>(histories.size()); ++w) {
    std::istringstream in(histories[w]);
    long long invoked = -1, releasing = -1;  // an acquire's, a release's call under way
    long open = -1;                          // the holding not yet released, in `mine`
    std::vector<Holding> mine;
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      long long t = 0;
      std::string event, what;
      f >> t >> event >> what;
      // HANG: a call (an acquire, a release) called at `since` ends within the bound; a
      // release retries while the lease may be valid, then gives up.
      const auto ended = [&](long long since) {
        if (since >= 0 && t - since > bound_ns) {
          r.violations.push_back("HANG: worker " + std::to_string(w) + "'s " + event + " took " +
                                 std::to_string((t - since) / 1000000) + " ms");
        }
      };
      // NAMED: the rest of the line names the error; counted under `label` + its name.
      const auto failed = [&](const std::string& label) {
        std::string name;
        std::getline(f, name);
        if (!name.empty()) name.erase(0, 1);
        if (!named_error(name)) r.violations.push_back("NAMED: an error without a name: " + line);
        ++r.errors[label + name];
      };
      if (event == "acquire" && what == "invoke") {
        invoked = t;
        continue;
      }
      if (event == "acquire") {
        ended(invoked);
        if (what == "ok") {
          Holding h;
          h.worker = w;
          h.invoked = invoked;
          h.granted = t;
          long long valid = 0;
          f >> h.fence >> valid;
          h.ends = valid;
          mine.push_back(h);
          open = static_cast<long>(mine.size()) - 1;
          grants.push_back(t);
          ++r.acquisitions;
        } else if (what == "none") {
          ++r.timeouts;
        } else {
          failed("");
        }
        invoked = -1;
      } else if (event == "write") {
        ++r.writes;
        if (open >= 0) mine[open].wrote = t;
        if (what == "refused" && open >= 0) {
          mine[open].refused = true;
          ++r.refused;
        }
      } else if (event == "release" && what == "invoke" && open >= 0) {
        releasing = t;
        std::uint64_t fence = 0;
        int lost = 0;
        long long valid = 0;
        f >> fence >> lost >> valid;
        mine[open].ends = std::min(t, valid);
        // LOST_SIGNAL: an auto-renewed guard's lost() "is true from valid_until() on".
        if (t > valid && lost == 0) {
          r.violations.push_back("LOST_SIGNAL: worker " + std::to_string(w) + "'s guard (token " +
                                 std::to_string(fence) + ") said it was not lost " +
                                 std::to_string((t - valid) / 1000000) +
                                 " ms after its validity ended");
        }
        ++r.releases;
      } else if (event == "release" && what != "invoke") {
        ended(releasing);
        if (what == "fail") failed("release: ");
        releasing = -1;
        open = -1;
      } else if (event == "crash") {
        r.violations.push_back("CRASH: worker " + std::to_string(w) + ": " + line);
      }
    }
    if (invoked >= 0) {
      r.violations.push_back("HANG: worker " + std::to_string(w) + "'s last acquire never ended");
    }
    if (releasing >= 0) {
      r.violations.push_back("HANG: worker " + std::to_string(w) + "'s last release never ended");
    }
    holdings.insert(holdings.end(), mine.begin(), mine.end());
  }
  std::sort(holdings.begin(), holdings.end(),
            [](const Holding& a, const Holding& b) { return a.granted < b.granted; });

  // The fault (of those that may let a second holder in) between two grants, if any.
  auto explained_by = [&](long long from, long long to) -> const Fault* {
    for (const auto& f : faults) {
      if (loses_data(f.kind) && f.at <= to && f.healed + aftermath_ns(f.kind) >= from) return &f;
    }
    return nullptr;
  };
  for (std::size_t i = 0; i < holdings.size(); ++i) {
    const Holding& a = holdings[i];
    for (std::size_t j = i + 1; j < holdings.size(); ++j) {
      const Holding& b = holdings[j];
      // TOKEN_ORDER: b was asked for after a's grant completed, so it was granted later; or
      // b was granted after a stopped holding (a waiter queued before a's grant, handed the
      // lock by a's release or its lapse): its token was minted after a's. (A holding whose
      // validity ended before its grant was read is neither: its token may be the older.)
      const bool after = b.invoked > a.granted ||
                         (b.granted >= a.ends && a.ends > a.granted && b.ends > b.granted);
      if (after && b.fence <= a.fence) {
        const bool exempt = std::any_of(faults.begin(), faults.end(), [&](const Fault& f) {
          // "never lowers a token while the counter survives": a lost counter after a step
          // back (none in the schedule's order) would be exempt.
          return f.kind == FaultKind::clock_back && f.at < b.granted &&
                 std::any_of(faults.begin(), faults.end(), [&](const Fault& g) {
                   return (g.kind == FaultKind::restart || g.kind == FaultKind::flushall) &&
                          g.at > f.at && g.at < b.granted;
                 });
        });
        if (!exempt) {
          r.violations.push_back("TOKEN_ORDER: worker " + std::to_string(b.worker) + " got " +
                                 std::to_string(b.fence) + " after worker " +
                                 std::to_string(a.worker) + "'s " + std::to_string(a.fence) +
                                 " had been granted");
        }
      }
      // OVERLAP: b holds while a still may. (A holding whose validity ended before its
      // grant was even read, a worker stopped with the reply in flight, was never believed
      // held: "a client pauses", docs/safety.md.) A fault counts from a's invoke: its lease
      // can only have been set after that, and its grant is logged some time after.
      if (b.granted >= a.ends || a.ends <= a.granted || b.ends <= b.granted) continue;
      if (const Fault* f = explained_by(a.invoked, b.granted)) {
        ++r.rows[to_string(f->kind)].overlaps;
        continue;
      }
      r.violations.push_back("OVERLAP: worker " + std::to_string(b.worker) + " (token " +
                             std::to_string(b.fence) + ") was granted the lock " +
                             std::to_string((a.ends - b.granted) / 1000000) + " ms before worker " +
                             std::to_string(a.worker) + " (token " + std::to_string(a.fence) +
                             ") stopped holding it, with no fault "
                             "that explains it");
    }
  }
  // WRITES: a refused token is a holder's that another, later, overtook: explained only by
  // an overlap a fault explains.
  for (const Holding& h : holdings) {
    if (!h.refused) continue;
    // Or the writer was paused past its validity before it wrote: "fencing protects the
    // resource" (docs/safety.md, a client pauses), which is this refusal.
    const auto paused = std::find_if(faults.begin(), faults.end(), [&](const Fault& f) {
      return f.kind == FaultKind::pause && f.target == h.worker && f.at <= h.ends &&
             f.healed >= h.granted;
    });
    if (paused != faults.end()) {
      ++r.rows[to_string(paused->kind)].refused;
    } else if (h.wrote >= h.ends) {
      ++r.late_writes_refused;  // written after its own validity: fencing did its job
    } else if (const Fault* f = explained_by(h.invoked, h.ends + 1000000000LL)) {
      ++r.rows[to_string(f->kind)].refused;
    } else {
      r.violations.push_back("WRITES: the register refused worker " + std::to_string(h.worker) +
                             "'s token " + std::to_string(h.fence) + " with no fault to explain");
    }
  }
  // Recovery: from each fault's heal to the next grant.
  std::sort(grants.begin(), grants.end());
  for (const auto& f : faults) {
    auto& row = r.rows[to_string(f.kind)];
    ++row.faults;
    // Whether it struck while someone held the lock (a fault between holdings tests less).
    if (std::any_of(holdings.begin(), holdings.end(),
                    [&](const Holding& h) { return h.granted <= f.healed && h.ends >= f.at; })) {
      ++row.hits;
    }
    const auto next = std::lower_bound(grants.begin(), grants.end(), f.healed);
    const long long ms = next == grants.end() ? -1 : (*next - f.healed) / 1000000;
    row.worst_recovery_ms = std::max(row.worst_recovery_ms, ms);
    row.longest_ms = std::max(row.longest_ms, (f.healed - f.at) / 1000000);
  }
  return r;
}

std::string Report::table() const {
  std::ostringstream out;
  out << "[nemesis] " << acquisitions << " grants, " << writes << " fenced writes (" << refused
      << " refused, " << late_writes_refused << " of them written after the writer's validity), "
      << releases << " releases, " << timeouts << " waits that ran out\n";
  out << "[nemesis] | fault | count | struck a holding | overlaps it explains | writes refused "
         "| worst recovery (ms) | longest (ms) |\n";
  for (const auto& [name, row] : rows) {
    out << "[nemesis] | " << name << " | " << row.faults << " | " << row.hits << " | "
        << row.overlaps << " | " << row.refused << " | " << row.worst_recovery_ms << " | "
        << row.longest_ms << " |\n";
  }
  for (const auto& [name, count] : errors)
    out << "[nemesis] error " << name << ": " << count << "\n";
  for (std::size_t i = 0; i < violations.size() && i < 10; ++i) {
    out << "[nemesis] VIOLATION " << violations[i] << "\n";
  }
  if (violations.size() > 10) out << "[nemesis] ... " << violations.size() - 10 << " more\n";
  return out.str();
}

}  // namespace redis_lock::nemesis
