// SPDX-License-Identifier: MIT
// Finding the master through the sentinels, without a server: who is asked, in which order,
// what an answer means, and which error a search that found nothing reports.
#include "reply_builders.hpp"
#include "sentinel_locator.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

#include <vector>

using namespace redis_lock::detail;
using boost::system::error_code;
using redis_lock::error;
using redis_lock::test::error_reply;
using redis_lock::test::integer;
using redis_lock::test::text;
using Kind = SentinelResolve::Action::Kind;

namespace {

Reply array(std::vector<Reply> elements) {
  Reply r;
  r.type = Reply::Type::array;
  r.elements = std::move(elements);
  return r;
}

Reply address(std::string host, std::string port) {
  return array({text(std::move(host)), text(std::move(port))});
}

Reply nil() {
  Reply r;
  r.type = Reply::Type::nil;
  return r;
}

}  // namespace

TEST(SentinelResolve, ReadsAHostAndAPort) {
  const auto at = SentinelResolve::read(address("10.0.0.5", "6380"));
  ASSERT_TRUE(at);
  EXPECT_EQ(at->host, "10.0.0.5");
  EXPECT_EQ(at->port, 6380);
  const auto v6 = SentinelResolve::read(address("::1", "6380"));
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  const Reply not_masters[] = {nil(),
                               error_reply("ERR unknown"),
                               array({text("10.0.0.5")}),
                               array({text("10.0.0.5"), integer(6380)}),
                               address("10.0.0.5", "port"),
                               address("10.0.0.5", "70000"),
                               address("", "6380"),
                               array({text("a"), text("1"), text("x")})};
  int i = 0;
  for (const auto& reply : not_masters) EXPECT_FALSE(SentinelResolve::read(reply)) << i++;
}

TEST(SentinelResolve, AsksFromThePreferredSentinelInTurnUntilOneNamesTheMaster) {
  SentinelResolve resolve(3, 2);
  auto act = resolve.start();
  ASSERT_EQ(act.kind, Kind::ask);
  EXPECT_EQ(act.sentinel, 2u) << "the one that answered last first";
  act = resolve.answered(error::connect_failed, {});
  ASSERT_EQ(act.kind, Kind::ask);
  EXPECT_EQ(act.sentinel, 0u);
  act = resolve.answered({}, nil());  // this one does not know the name
  ASSERT_EQ(act.kind, Kind::ask);
  EXPECT_EQ(act.sentinel, 1u);
  act = resolve.answered({}, address("10.0.0.7", "6379"));
  ASSERT_EQ(act.kind, Kind::found);
  EXPECT_EQ(act.sentinel, 1u) << "preferred next time";
  EXPECT_EQ(act.master.host, "10.0.0.7");
  EXPECT_EQ(act.master.port, 6379);
}

TEST(SentinelResolve, NobodyNamesTheMaster) {
  SentinelResolve resolve(2, 0);
  auto act = resolve.start();
  act = resolve.answered({}, nil());
  act = resolve.answered(error::timeout, {});
  ASSERT_EQ(act.kind, Kind::failed);
  EXPECT_EQ(act.error, error::master_not_found);
}

TEST(SentinelResolve, ARefusalOfOurCredentialsIsWhatASearchThatFoundNothingReports) {
  for (const auto refusal : {error::auth_failed, error::not_authenticated, error::no_permission}) {
    SentinelResolve resolve(3, 0);
    auto act = resolve.start();
    act = resolve.answered(refusal, {});
    act = resolve.answered({}, nil());
    act = resolve.answered(error::connect_failed, {});
    ASSERT_EQ(act.kind, Kind::failed);
    EXPECT_EQ(act.error, refusal);
  }
  // A refusal, then an answer: found all the same.
  SentinelResolve resolve(2, 0);
  resolve.start();
  resolve.answered(error::auth_failed, {});
  EXPECT_EQ(resolve.answered({}, address("h", "1")).kind, Kind::found);
}

TEST(SentinelResolve, AnErrorReplyIsNoAddress) {
  SentinelResolve resolve(1, 0);
  resolve.start();
  const auto act = resolve.answered({}, error_reply("IDONTKNOW"));
  ASSERT_EQ(act.kind, Kind::failed);
  EXPECT_EQ(act.error, error::master_not_found);
}
