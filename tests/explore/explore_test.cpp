// SPDX-License-Identifier: MIT
// The explorer in the suite (docs/reliability.md has its figures): sampled runs from a fixed
// list of seeds for a bounded time, every interleaving of two clients to a small depth, and
// the three planted bugs it must find. Longer on demand:
//   REDIS_LOCK_EXPLORE_SECONDS=600 REDIS_LOCK_EXPLORE_DEPTH=6 ctest --test-dir build/dev
//     -R '^explore[.]' --timeout 0
// A violation prints its seed, its clients' builds and the shortest sequence that breaks the
// promise; Explore.FoundSequencesKeepEveryPromise replays the ones found so far.
#include "explorer.hpp"

#include "clock_file.hpp"
#include "keys.hpp"
#include "redis_server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

namespace redis_lock::explore {
namespace {

using Clock = std::chrono::steady_clock;
using test::RedisServer;

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}

/// Under a sanitizer (tests/CMakeLists.txt sets REDIS_LOCK_EXPLORE_QUICK) the explorer checks
/// its own code more than the scripts': shorter sampling and enumeration.
bool quick() { return env_number("REDIS_LOCK_EXPLORE_QUICK", 0) > 0; }

std::atomic<std::int64_t>* clock_cell = nullptr;  // the suite's server's

/// An explorer of the suite's server, which steps its clock.
std::unique_ptr<Explorer> explorer(std::uint16_t port, const std::string& plant = {}) {
  auto x = std::make_unique<Explorer>(port, plant);
  x->set_clock(clock_cell);
  return x;
}

class Explore : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The server starts with the clock shim preloaded (nothing else in this process execs).
    clock_ = std::make_unique<test::ClockFile>();
    clock_->with_shim(REDIS_LOCK_CLOCK_SHIM, [] { server_ = std::make_unique<RedisServer>(); });
    clock_cell = clock_->cell();
  }
  static void TearDownTestSuite() {
    clock_cell = nullptr;
    server_.reset();
    clock_.reset();
  }
  static std::uint16_t port() { return server_->port(); }

 private:
  static inline std::unique_ptr<RedisServer> server_;
  static inline std::unique_ptr<test::ClockFile> clock_;
};

std::string describe(const Setup& s) {
  std::string out;
  for (std::size_t i = 0; i < s.builds.size(); ++i) {
    out.append(out.empty() ? "" : ",");
    if (i < s.kinds.size() && s.kinds[i] != Kind::mutex) {
      out.append(to_string(s.kinds[i]));
    } else {
      out.append(to_string(s.builds[i]));
    }
    if (i < s.resources.size() && s.resources[i] == 1) out.append("@s");
  }
  for (const auto& [a, b] : s.groups) {
    out.append(" group=c").append(std::to_string(a)).append("+c").append(std::to_string(b));
  }
  if (!s.kinds.empty()) out.append(" limit=").append(std::to_string(s.limit));
  if (s.crowd > 0) out.append(" crowd=").append(std::to_string(s.crowd));
  return out;
}

/// The clients of a sampled run, drawn from its seed: 2 to 4, mostly today's (signing, as
/// the library queues by default), with the builds before mixed in; one run in three on a
/// lease set (a semaphore of limit 1 to 3, or a read-write lock), with a mutex client now and
/// then on the same resource; one mutex run in three with a group (two clients of today's
/// that take r and the other resource of its slot at once, the others on either).
Setup setup_of(std::uint64_t seed) {
  constexpr Build pool[] = {Build::signing, Build::signing,  Build::signing, Build::folded,
                            Build::b34e159, Build::p89ab635, Build::ec7000c};
  Setup s;
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
  };
  const std::size_t n = 2 + next() % 3;
  for (std::size_t i = 0; i < n; ++i) s.builds.push_back(pool[next() % std::size(pool)]);
  s.crowd = next() % 3 == 0 ? 70 : 0;  // more than 64 dead waiters ahead, now and then
  if (next() % 3 == 0) {
    const bool semaphore = next() % 2 == 0;
    s.limit = 1 + static_cast<int>(next() % 2);
    if (semaphore && next() % 3 == 0) s.limit = 3;
    for (std::size_t i = 0; i < n; ++i) {
      s.kinds.push_back(semaphore         ? Kind::permit
                        : next() % 2 == 0 ? Kind::shared
                                          : Kind::exclusive);
    }
    if (next() % 2 == 0) s.kinds[0] = Kind::mutex;
  } else if (next() % 4 == 0) {
    // An election: today's candidates only (a candidate's lease keeps its record beside it).
    s.kinds.assign(n, Kind::candidate);
    s.builds.assign(n, Build::signing);
  } else if (next() % 3 == 0) {
    s.groups = {{0, 1}};
    s.builds[0] = s.builds[1] = Build::signing;
    s.resources = {0, 1};
    for (std::size_t i = 2; i < n; ++i) s.resources.push_back(static_cast<int>(next() % 2));
  }
  return s;
}

struct Found {
  std::uint64_t seed = 0;
  Setup setup;
  Violation violation;
  std::vector<Event> shortest;
  double seconds = 0;
};

/// Sampled runs (seeds 1, 2, ...) for `seconds` or `max_steps`, whichever ends first; the
/// first violation, shrunk.
std::optional<Found> sample_for(Explorer& x, double seconds, std::size_t depth,
                                const std::string& plant,
                                std::uint64_t max_steps = ~std::uint64_t{0}) {
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<Event> played;
  std::uint64_t seed = 0;
  while (Clock::now() < until && x.steps() < max_steps) {
    ++seed;
    auto setup = setup_of(seed);
    setup.plant = plant;
    if (auto v = x.sample(setup, seed, depth, played)) {
      Found f{seed, setup, *v, {}, 0};
      f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      f.shortest = x.shrink(setup, played, v->invariant);
      if (auto shortest = x.play(setup, f.shortest)) f.violation = *shortest;  // its own words
      return f;
    }
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "[explore] " << seed << " sampled runs of " << depth << " events, " << x.steps()
            << " steps in " << took << " s (" << x.steps() / took << " steps/s), "
            << x.distinct_states() << " distinct states, " << x.holds_ended_by_clock()
            << " holds ended under their holders by a forward step of the server's clock, "
            << x.revived_by_clock() << " holds and places revived by a step back, "
            << x.groups_taken() << " groups taken at once and " << x.groups_refused()
            << " refused\n";
  return std::nullopt;
}

std::string report(const Found& f) {
  return "seed " + std::to_string(f.seed) + ", clients " + describe(f.setup) + ": " +
         f.violation.invariant + ": " + f.violation.detail + "\n  shortest sequence (" +
         std::to_string(f.shortest.size()) + " events): \"" + to_string(f.shortest) + "\"";
}

TEST_F(Explore, SampledRunsKeepEveryPromise) {
  const auto explorer_ = explorer(port());
  Explorer& x = *explorer_;
  const auto found =
      sample_for(x, env_number("REDIS_LOCK_EXPLORE_SECONDS", quick() ? 8 : 20), 60, /*plant=*/"");
  EXPECT_FALSE(found) << report(*found);
  EXPECT_GT(x.steps(), 1000u) << "the explorer hardly ran";
}

TEST_F(Explore, EveryInterleavingOfTwoClientsKeepsEveryPromise) {
  // Today's signing client beside each build (itself, the unsigned one, the two before and
  // one further back), every sequence of `depth` events.
  const auto depth =
      static_cast<std::size_t>(env_number("REDIS_LOCK_EXPLORE_DEPTH", quick() ? 3 : 4));
  const auto explorer_ = explorer(port());
  Explorer& x = *explorer_;
  const auto start = Clock::now();
  std::vector<explore::Setup> pairs;
  for (const auto other :
       {Build::signing, Build::folded, Build::b34e159, Build::p89ab635, Build::ec7000c}) {
    pairs.push_back({.builds = {Build::signing, other},
                     .kinds = {},
                     .crowd = 0,
                     .plant = {},
                     .clock_steps = other == Build::signing});  // (its steps once: a pair)
  }
  // And the lease sets: two permits of one, a reader and a writer, an election's two
  // candidates, a mutex beside a permit.
  const std::vector<Build> two = {Build::signing, Build::signing};
  pairs.push_back({.builds = two,
                   .kinds = {Kind::permit, Kind::permit},
                   .limit = 1,
                   .plant = {},
                   .clock_steps = false});
  pairs.push_back(
      {.builds = two, .kinds = {Kind::shared, Kind::exclusive}, .plant = {}, .clock_steps = false});
  pairs.push_back({.builds = two,
                   .kinds = {Kind::candidate, Kind::candidate},
                   .plant = {},
                   .clock_steps = false});
  pairs.push_back({.builds = two,
                   .kinds = {Kind::mutex, Kind::permit},
                   .limit = 1,
                   .plant = {},
                   .clock_steps = false});
  // And a group (the two halves of one client's async_acquire_all of r and the other
  // resource of its slot) beside a mutex client on the other resource.
  pairs.push_back({.builds = {Build::signing, Build::signing, Build::signing},
                   .kinds = {},
                   .plant = {},
                   .clock_steps = false,
                   .resources = {0, 1, 1},
                   .groups = {{0, 1}}});
  for (const auto& setup : pairs) {
    std::vector<Event> sequence;
    const auto v = x.enumerate(setup, depth, sequence);
    EXPECT_FALSE(v) << describe(setup) << ": " << v->invariant << ": " << v->detail << "\n  \""
                    << to_string(sequence) << "\"";
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "[explore] every sequence of " << depth << " events for " << pairs.size()
            << " pairs: " << x.sequences() << " sequences, " << x.steps() << " steps in " << took
            << " s (" << x.sequences() / took << " sequences/s), " << x.distinct_states()
            << " distinct states\n";
  EXPECT_GT(x.sequences(), 100u);
}

/// A planted bug is found by the sampled runs within `budget` steps (seeds 1, 2, ...: the
/// same steps on every machine, however fast), as one of `invariants`.
void finds_planted(std::uint16_t port, const std::string& plant,
                   const std::vector<std::string>& invariants, double budget) {
  const auto explorer_ = explorer(port, plant);
  Explorer& x = *explorer_;
  const auto found = sample_for(x, 500, 60, plant, static_cast<std::uint64_t>(budget));
  ASSERT_TRUE(found) << "the planted " << plant << " was not found in " << budget << " steps";
  std::cout << "[explore] planted " << plant << " found after " << found->seconds << " s, "
            << x.steps() << " steps: " << report(*found) << "\n";
  const auto named = [&](const std::string& name) {
    return std::find(invariants.begin(), invariants.end(), name) != invariants.end();
  };
  EXPECT_TRUE(named(found->violation.invariant)) << report(*found);
  // Its shortest sequence breaks the promise on every replay, and today's scripts keep it.
  const auto again = x.play(found->setup, found->shortest);
  ASSERT_TRUE(again) << "the shortest sequence does not replay";
  EXPECT_EQ(again->invariant, found->violation.invariant);
  const auto today = explorer(port);
  auto setup = found->setup;
  setup.plant.clear();
  const auto fixed = today->play(setup, found->shortest);
  EXPECT_FALSE(fixed) << fixed->invariant << ": " << fixed->detail;
}

TEST_F(Explore, FindsThePlantedClaimThatReusesAnotherLeasesToken) {
  // acquire.lua's claim as before 44ab8f5: the hand-off's record reused whoever it names.
  finds_planted(port(), "claim_token_reuse", {"FENCE"},
                env_number("REDIS_LOCK_EXPLORE_PLANT_STEPS", 200000));
}

TEST_F(Explore, FindsThePlantedPurgeOf64LapsedPlaces) {
  // drop_dead_waiters as before 44ab8f5: 64 lapsed places removed a call. A release then
  // serves nobody while a live waiter waits behind the rest, or an attempt finds the
  // resource free of anything live and is refused.
  finds_planted(port(), "purge_64", {"SERVED", "LIVE"},
                env_number("REDIS_LOCK_EXPLORE_PLANT_STEPS", 200000));
}

TEST_F(Explore, FindsThePlantedGroupThatOvertakesAWaiter) {
  // acquire_group.lua that looks at the leases only, not the queues: a group takes a
  // resource whose holder's lease lapsed over the live waiter queued for it.
  finds_planted(port(), "group_overtakes", {"FIFO"},
                env_number("REDIS_LOCK_EXPLORE_PLANT_STEPS", 200000));
}

TEST_F(Explore, FoundSequencesKeepEveryPromise) {
  // What the explorer found in the scripts, each replayed as it printed it.
  struct Case {
    const char* what;
    explore::Setup setup;
    const char* events;
    const char* lease_type;  ///< what the lease key is after them (a queue is left nowhere)
  };
  const std::vector<Build> today(4, Build::signing);
  const Case cases[] = {
      {"a read-write lock's waiter that gave up left its place's life to the queue, and the "
       "key lived on a semaphore of nobody (seed 420)",
       {.builds = today, .kinds = {Kind::exclusive, Kind::exclusive, Kind::shared}, .plant = {}},
       "c0.join c1.join c2.join c1.lapse_place c2.give_up c0.lapse_hold",
       "none"},
      {"the same on a mutex's queue: a permit refused with WRONGTYPE",
       {.builds = today,
        .kinds = {Kind::mutex, Kind::mutex, Kind::mutex, Kind::permit},
        .plant = {}},
       "c0.take c1.join c2.join c1.lapse_place c2.give_up w.lapse_lease c3.take",
       "zset"},
  };
  const auto x = explorer(port());
  const auto keys = detail::make_keys("x:", "r");
  for (const auto& c : cases) {
    const auto v = x->play(c.setup, parse_events(c.events));
    EXPECT_FALSE(v) << c.what << ": " << v->invariant << ": " << v->detail;
    // No queue life was left behind by the waiter that gave up (the explorer's FREE allows a
    // served waiter's place life, not this): the name is free, or the permit's.
    EXPECT_EQ(test::redis_command(port(), {"TYPE", keys.lease()}), c.lease_type) << c.what;
    EXPECT_EQ(test::redis_command(
                  port(), {"EXISTS", keys.queue(), detail::make_keys("x:", "r", true).queue()}),
              "0")
        << c.what;
  }
}

TEST(ExploreEvents, ASequenceReadsBackAsItWasWritten) {
  const std::string text =
      "c0.take c1.join w.lapse_lease c1.lapse_place w.crowd c2.claim c0.take_all ws.lapse_lease";
  EXPECT_EQ(to_string(parse_events(text)), text);
  EXPECT_THROW(parse_events("c0.jump"), std::invalid_argument);
  EXPECT_THROW(parse_events("wx.lapse_lease"), std::invalid_argument);
}

}  // namespace
}  // namespace redis_lock::explore
