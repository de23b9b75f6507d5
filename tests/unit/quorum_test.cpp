// SPDX-License-Identifier: MIT
// Redlock's decisions without a server: replies read, votes decided, tokens minted, leases
// judged still valid. Each table is the cases of one decision.
#include "quorum.hpp"
#include "reply_builders.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

using namespace redis_lock;
using namespace redis_lock::detail;
using namespace redis_lock::detail::quorum;
using namespace std::chrono_literals;
using Kind = Answer::Kind;

using namespace redis_lock::test;

TEST(Quorum, MajorityOfN) {
  const std::pair<std::size_t, std::size_t> cases[] = {{1, 1}, {2, 2}, {3, 2}, {4, 3},
                                                       {5, 3}, {6, 4}, {7, 4}};
  for (auto [n, m] : cases) EXPECT_EQ(majority(n), m) << n;
}

TEST(Quorum, ReadAcquireReply) {
  struct Case {
    const char* name;
    boost::system::error_code ec;
    Reply reply;
    Kind kind;
    long long fence, pttl;
    boost::system::error_code error;
  };
  // clang-format off (a table: one case per line)
  const Case cases[] = {
      {"granted", {}, pair(1, 1'700'000'000'000'000), Kind::granted, 1'700'000'000'000'000, -1, {}},
      {"refused, holder's pttl", {}, pair(0, 4200), Kind::refused, -1, 4200, {}},
      {"refused, no ttl known", {}, pair(0, -1), Kind::refused, -1, -1, {}},
      {"refused, expired meanwhile", {}, pair(0, 0), Kind::refused, -1, -1, {}},
      {"refused as invalid (-2)", {}, pair(0, -2), Kind::refused, -1, -1, {}},
      {"connection lost", error::connection_lost, Reply{}, Kind::failed, -1, -1,
       error::connection_lost},
      {"timeout", error::timeout, Reply{}, Kind::failed, -1, -1, error::timeout},
      {"OOM reply",
       {},
       error_reply("OOM command not allowed"),
       Kind::failed,
       -1,
       -1,
       error::out_of_memory},
      {"READONLY reply",
       {},
       error_reply("READONLY You can't write"),
       Kind::failed,
       -1,
       -1,
       error::read_only},
      {"NOPERM reply", {}, error_reply("NOPERM no"), Kind::failed, -1, -1, error::no_permission},
      {"integer instead of array", {}, integer(1), Kind::failed, -1, -1, error::unexpected_reply},
      {"array of one",
       {},
       [] {
         auto r = pair(1, 2);
         r.elements.pop_back();
         return r;
       }(),
       Kind::failed,
       -1,
       -1,
       error::unexpected_reply},
      {"string element",
       {},
       [] {
         auto r = pair(1, 2);
         r.elements[1] = text("2");
         return r;
       }(),
       Kind::failed,
       -1,
       -1,
       error::unexpected_reply},
  };
  // clang-format on
  for (const auto& c : cases) {
    const auto a = read_acquire(c.ec, c.reply);
    EXPECT_EQ(a.kind, c.kind) << c.name;
    EXPECT_EQ(a.fence, c.fence) << c.name;
    EXPECT_EQ(a.pttl, c.pttl) << c.name;
    EXPECT_EQ(a.error, c.error) << c.name;
  }
}

TEST(Quorum, ReadCompareReply) {
  EXPECT_EQ(read_compare({}, integer(1)).kind, Kind::granted);
  EXPECT_EQ(read_compare({}, integer(0)).kind, Kind::refused);
  EXPECT_EQ(read_compare({}, pair(1, 1)).error, error::unexpected_reply);
  EXPECT_EQ(read_compare({}, text("1")).error, error::unexpected_reply);
  EXPECT_EQ(read_compare({}, error_reply("WRONGTYPE x")).error, error::wrong_type);
  EXPECT_EQ(read_compare(error::connection_lost, integer(1)).kind, Kind::failed)
      << "an I/O error wins over whatever was decoded";
}

TEST(Quorum, DecideAsSoonAsCertain) {
  struct Case {
    std::size_t n, granted, refused, failed;
    Verdict verdict;
  };
  const Case cases[] = {
      // nothing or too little answered yet
      {3, 0, 0, 0, Verdict::undecided},
      {3, 1, 0, 0, Verdict::undecided},
      {3, 1, 1, 0, Verdict::undecided},
      {3, 1, 0, 1, Verdict::undecided},
      {5, 2, 2, 0, Verdict::undecided},
      {5, 2, 0, 2, Verdict::undecided},
      // a majority granted, whatever the rest will say
      {3, 2, 0, 0, Verdict::majority},
      {3, 2, 1, 0, Verdict::majority},
      {3, 2, 0, 1, Verdict::majority},
      {5, 3, 0, 0, Verdict::majority},
      {5, 3, 2, 0, Verdict::majority},
      {1, 1, 0, 0, Verdict::majority},
      // no majority possible: the answers disagree (held elsewhere / not ours)
      {3, 0, 2, 0, Verdict::contention},
      {3, 1, 2, 0, Verdict::contention},
      {3, 0, 2, 1, Verdict::contention},
      {5, 0, 3, 0, Verdict::contention},
      {5, 2, 3, 0, Verdict::contention},
      {5, 1, 2, 2, Verdict::contention},
      // no majority possible because too many failed
      {3, 0, 0, 2, Verdict::no_quorum},
      {3, 1, 0, 2, Verdict::no_quorum},
      {3, 0, 1, 2, Verdict::no_quorum},
      {5, 2, 0, 3, Verdict::no_quorum},
      {5, 0, 2, 3, Verdict::no_quorum},
      {5, 0, 0, 5, Verdict::no_quorum},
  };
  for (const auto& c : cases) {
    const Tally t{c.n, c.granted, c.refused, c.failed};
    EXPECT_EQ(decide(t), c.verdict) << "n=" << c.n << " granted=" << c.granted
                                    << " refused=" << c.refused << " failed=" << c.failed;
  }
}

TEST(Quorum, TallyCountsEachKind) {
  Tally t{5};
  for (Kind k : {Kind::granted, Kind::granted, Kind::refused, Kind::failed}) t.count(Answer{k});
  EXPECT_EQ(t.granted, 2u);
  EXPECT_EQ(t.refused, 1u);
  EXPECT_EQ(t.failed, 1u);
}

TEST(Quorum, MintTheLargestCounterAndRaiseTheRest) {
  struct Case {
    const char* name;
    std::vector<long long> fences;
    long long token;
    std::size_t at_token;
    std::vector<std::size_t> to_raise;
    bool durable;
  };
  const Case cases[] = {
      {"all at one value", {7, 7, 7}, 7, 3, {}, true},
      {"a majority at the max", {7, 7, 5}, 7, 2, {2}, true},
      {"one behind, one absent", {9, -1, 5}, 9, 1, {2}, false},
      {"max on a minority", {5, 9, 5}, 9, 1, {0, 2}, false},
      {"five masters, two missing", {3, -1, 3, -1, 3}, 3, 3, {}, true},
      {"five masters, spread", {1, 2, 3, -1, -1}, 3, 1, {0, 1}, false},
      {"a lost counter (0) among clocked ones",
       {0, 1'700'000'000'000'000, 1'700'000'000'000'000},
       1'700'000'000'000'000,
       2,
       {0},
       true},
  };
  for (const auto& c : cases) {
    const auto m = mint(c.fences);
    EXPECT_EQ(m.token, c.token) << c.name;
    EXPECT_EQ(m.at_token, c.at_token) << c.name;
    EXPECT_EQ(m.to_raise, c.to_raise) << c.name;
    EXPECT_EQ(m.durable(c.fences.size()), c.durable) << c.name;
  }
}

TEST(Quorum, ARaiseCountsOnlyWhenTheCounterReachedTheToken) {
  EXPECT_TRUE(raised_to({}, integer(10), 10));
  EXPECT_TRUE(raised_to({}, integer(11), 10)) << "raised past it by another acquire: still >=";
  EXPECT_FALSE(raised_to({}, integer(9), 10));
  EXPECT_FALSE(raised_to({}, error_reply("OOM x"), 10));
  EXPECT_FALSE(raised_to(error::timeout, integer(10), 10));
  EXPECT_FALSE(raised_to({}, text("10"), 10));
}

TEST(Quorum, ALeaseIsWorthHavingOnlyWithTimeLeft) {
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  struct Case {
    std::chrono::milliseconds ttl, elapsed;
    bool valid;
  };
  // drift margin: ttl / 100 + 2 ms
  const Case cases[] = {
      {10'000ms, 0ms, true},       {10'000ms, 9'897ms, true},
      {10'000ms, 9'898ms, false},  // 10 000 - 100 - 2
      {10'000ms, 12'000ms, false}, {100ms, 96ms, true},
      {100ms, 97ms, false},  // 100 - 1 - 2
      {1ms, 0ms, false},     // a 1 ms lease is used up by the margin
  };
  for (const auto& c : cases) {
    EXPECT_EQ(still_valid(t0, c.ttl, t0 + c.elapsed), c.valid)
        << "ttl " << c.ttl.count() << " elapsed " << c.elapsed.count();
  }
  EXPECT_EQ(drift_margin(10'000ms), 102ms);
}
