// SPDX-License-Identifier: MIT
// What our scripts' replies and a command's failures mean, without a server.
#include "replies.hpp"
#include "reply_builders.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>

using namespace redis_lock;
using namespace redis_lock::detail;
using namespace redis_lock::detail::replies;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(Replies, ReadsAnAcquireReply) {
  using Kind = Acquire::Kind;
  Reply three = pair(1, 2);  // a grant carries no queue place
  three.elements.push_back(integer(3));
  Reply queued = pair(0, 2500);
  queued.elements.push_back(integer(1'764'000'001'200));
  Reply four = queued;
  four.elements.push_back(integer(4));
  Reply text_place = pair(0, 2500);
  text_place.elements.push_back(text("1764000001200"));
  Reply text_first = pair(1, 2);
  text_first.elements[0] = text("1");
  Reply text_second = pair(1, 2);
  text_second.elements[1] = text("2");
  struct Case {
    const char* name;
    Reply reply;
    Kind kind;
    long long value;
    long long place = 0;
  };
  // clang-format off (a table: one case per line)
  const Case cases[] = {
      {"granted", pair(1, 1'800'000'000'000'000), Kind::granted, 1'800'000'000'000'000},
      {"granted, token 0 (read as granted; the op refuses it)", pair(1, 0), Kind::granted, 0},
      {"held, pttl", pair(0, 2500), Kind::held, 2500},
      {"held, reserved for a claim", pair(0, -2), Kind::held, -2},
      {"held, no ttl", pair(0, -1), Kind::held, -1},
      {"any first element but 1 is held", pair(2, 10), Kind::held, 10},
      {"integer", integer(1), Kind::malformed, 0},
      {"held and queued: its place", queued, Kind::held, 2500, 1'764'000'001'200},
      {"granted, three elements", three, Kind::malformed, 0},
      {"four elements", four, Kind::malformed, 0},
      {"text place", text_place, Kind::malformed, 0},
      {"text first", text_first, Kind::malformed, 0},
      {"text second", text_second, Kind::malformed, 0},
      {"empty array",
       [] {
         Reply r;
         r.type = Reply::Type::array;
         return r;
       }(),
       Kind::malformed, 0},
      {"nil", Reply{}, Kind::malformed, 0},
      {"error", error_reply("ERR x"), Kind::malformed, 0},
  };
  // clang-format on
  for (const auto& c : cases) {
    const auto got = read_acquire(c.reply);
    EXPECT_EQ(got.kind, c.kind) << c.name;
    if (c.kind != Kind::malformed) {
      EXPECT_EQ(got.value, c.value) << c.name;
      EXPECT_EQ(got.place, c.place) << c.name;
    }
  }
}

TEST(Replies, ALateReplyMayHaveGrantedUnlessItSaysOtherwise) {
  // Looser than read_acquire: a reply that starts like a grant is given back.
  Reply one = pair(1, 2);
  one.elements.pop_back();
  Reply three = pair(1, 2);
  three.elements.push_back(integer(3));
  Reply text_second = pair(1, 2);
  text_second.elements[1] = text("x");
  Reply text_first = pair(1, 2);
  text_first.elements[0] = text("1");
  const std::pair<Reply, bool> cases[] = {
      {pair(1, 7), true},  {one, true},           {three, true},
      {text_second, true}, {pair(0, 100), false}, {text_first, false},
      {integer(1), false}, {Reply{}, false},      {error_reply("ERR"), false},
  };
  for (const auto& [reply, want] : cases) EXPECT_EQ(may_have_granted(reply), want);
}

TEST(Replies, ReadsAGroupAcquireReply) {
  Reply two = pair(1, 7);
  two.elements.push_back(integer(9));
  Reply zero_token = two;
  zero_token.elements[2] = integer(0);
  Reply text_token = two;
  text_token.elements[1] = text("7");
  const std::pair<Reply, Group> cases[] = {
      {two, Group::granted},          {pair(0, 1), Group::held},
      {pair(0, 2), Group::held},      {pair(1, 7), Group::malformed},  // one token for two
      {zero_token, Group::malformed}, {text_token, Group::malformed},
      {integer(1), Group::held},      {Reply{}, Group::held},
  };
  for (const auto& [reply, want] : cases) EXPECT_EQ(read_group(reply, 2), want);
}

TEST(Replies, ReadsAReleaseOrExtendReply) {
  const std::pair<Reply, Compare> cases[] = {
      {integer(1), Compare::done},     {integer(0), Compare::not_ours},
      {integer(2), Compare::not_ours}, {integer(-1), Compare::not_ours},
      {text("1"), Compare::malformed}, {pair(1, 1), Compare::malformed},
      {Reply{}, Compare::malformed},   {error_reply("ERR"), Compare::malformed},
  };
  for (const auto& [reply, want] : cases) EXPECT_EQ(read_compare(reply), want);
}

TEST(Replies, ReadsAWaitReply) {
  struct Case {
    Reply reply;
    int wanted;
    error_code want;
  };
  const Case cases[] = {
      {integer(1), 1, {}},
      {integer(2), 1, {}},
      {integer(0), 1, error::not_replicated},
      {integer(1), 2, error::not_replicated},
      {integer(0), 0, {}},
      {text("1"), 1, error::unexpected_reply},
      {Reply{}, 1, error::unexpected_reply},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(replication_outcome(c.reply, c.wanted), c.want) << c.reply.integer << "/" << c.wanted;
  }
}

TEST(Replies, KnowsWhichFailuresMayHaveRunAndWhichAreOutages) {
  struct Case {
    error_code ec;
    bool may_have_run;  // the link failed after the command was written
    bool outage;        // a waiting acquire waits it out
  };
  const Case cases[] = {
      {error::connection_lost, true, true},
      {error::protocol_error, true, false},
      {error::read_only, true, true},  // a demoted master: the write may have run before
      {error::connect_failed, false, true},
      {error::connect_timeout, false, true},
      {error::timeout, false, false},  // the late reply decides
      {error::not_authenticated, false, false},
      {error::no_permission, false, false},
      {error::server_error, false, false},
      {error::unexpected_reply, false, false},
      {error::cluster_down, false, false},
      {boost::asio::error::operation_aborted, false, false},
      {{}, false, false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(may_have_run(c.ec), c.may_have_run) << c.ec.message();
    EXPECT_EQ(is_outage(c.ec), c.outage) << c.ec.message();
  }
}
