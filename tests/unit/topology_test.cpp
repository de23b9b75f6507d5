// SPDX-License-Identifier: MIT
// The topology seam (src/topology.hpp): a deployment's shape is one class. A shape defined in
// this file alone, registered under a Topology value of its own, runs a LockManager without a
// server: the engine asks it how to send, what an attempt is, whether waiters queue and what
// it refuses, and never which topology it is. And the four built-in shapes answer as the
// docs say.
#include "topology.hpp"
#include "replies.hpp"
#include "router.hpp"
#include "script_table.hpp"
#include "validate.hpp"

#include <redis_lock/error.hpp>
#include <redis_lock/lock.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;

namespace {

/// A shape that answers every script call itself, on the router's strand, with the next of
/// its scripted answers: a lock "server" in a test.
class Answering final : public Shape {
 public:
  std::string_view check(const ConnectionConfig& /*config*/) const noexcept override { return {}; }
  Routing routing() const noexcept override { return {}; }
  bool queues() const noexcept override { return false; }  // waiters back off, never subscribe
  std::string_view refuses(Feature feature) const noexcept override {
    return feature == Feature::lease_sets ? "not on the answering shape" : "";
  }

  void send(const std::shared_ptr<Router>& router, const ConnectionConfig& /*config*/,
            std::shared_ptr<Routed> op) const override {
    std::string name = "?";
    for (const auto& e : scripts::table()) {
      if (e.script.body == op->script_body) name = std::string(e.script.name);
    }
    calls.push_back(name);
    Reply reply = answers.empty() ? Reply{} : answers.front();
    if (!answers.empty()) answers.pop_front();
    boost::asio::post(router->strand(),
                      [op = std::move(op), reply = std::move(reply)] { op->on_reply({}, reply); });
  }

  mutable std::vector<std::string> calls;  // the scripts sent, by name
  mutable std::deque<Reply> answers;
};

constexpr auto answering_topology = static_cast<Topology>(77);

Answering& answering() {
  static Answering shape;
  static const bool registered = (register_shape(answering_topology, shape), true);
  (void)registered;
  return shape;
}

ConnectionConfig answering_config() {
  ConnectionConfig config;
  config.topology = answering_topology;
  config.port = 1;  // nothing listens: nothing may connect
  return config;
}

}  // namespace

TEST(Topology, AManagerRunsOnAShapeDefinedInOneFile) {
  auto& shape = answering();
  shape.calls.clear();
  // Held (for 5 ms more), then granted with fencing token 9; then released.
  shape.answers = {replies::acquire_reply(0, 5), replies::acquire_reply(1, 9),
                   replies::integer_reply(1)};
  boost::asio::io_context io;
  LockManager locks(io.get_executor(), answering_config());
  std::optional<error_code> acquired;
  LockGuard guard;
  locks.async_acquire("r", {.ttl = 10s, .wait = 1s}, [&](error_code ec, LockGuard g) {
    acquired = ec;
    guard = std::move(g);
  });
  io.run_for(5s);
  ASSERT_TRUE(acquired) << "the acquire never completed";
  EXPECT_FALSE(*acquired) << acquired->message();
  ASSERT_TRUE(guard);
  EXPECT_EQ(guard.fencing_token(), 9u);
  // It did not queue (the shape said so): the held answer was retried after a backoff.
  EXPECT_EQ(shape.calls, (std::vector<std::string>{"acquire", "acquire"}));

  std::optional<bool> released;
  guard.async_release([&](error_code ec, bool done) { released = !ec && done; });
  io.restart();
  io.run_for(5s);
  ASSERT_TRUE(released) << "the release never completed";
  EXPECT_TRUE(*released);
  EXPECT_EQ(shape.calls.back(), "release");
}

TEST(Topology, WhatAShapeRefusesIsRefusedBeforeAnythingIsSent) {
  auto& shape = answering();
  shape.calls.clear();
  shape.answers.clear();
  boost::asio::io_context io;
  LockManager locks(io.get_executor(), answering_config());
  std::optional<error_code> got;
  locks.async_acquire_permit("r", 3, {.ttl = 1s}, [&](error_code ec, LockGuard) { got = ec; });
  io.run_for(5s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, error::invalid_argument);
  EXPECT_EQ(check(LockKind{AcquireKind::permit, 3}, shape).rule, "not on the answering shape");
  EXPECT_TRUE(shape.calls.empty());
}

TEST(Topology, AValueNoShapeIsRegisteredForIsRefused) {
  ConnectionConfig config;
  config.topology = static_cast<Topology>(78);
  EXPECT_EQ(find_shape(config.topology), nullptr);
  EXPECT_EQ(check(config).rule, "unknown topology");
}

TEST(Topology, TheBuiltInShapesAnswerAsDocumented) {
  struct Row {
    Topology topology;
    bool many_nodes, slot_map, located;
    Attempt attempt;
    bool queues, keeps_info, groups, per_node, refuses_admin;
  };
  // clang-format off (a table: one shape per line)
  const Row rows[] = {
      //                   many   slots  located attempt              queues info   groups per_node
      //                   refuses
      {Topology::standalone, false, false, false, Attempt::one_server, true, true, true, false,
       false},
      {Topology::cluster, true, true, false, Attempt::one_server, true, true, true, false, false},
      {Topology::sentinel, false, false, true, Attempt::one_server, true, true, true, false, false},
      {Topology::redlock, true, false, false, Attempt::vote, false, false, false, true, true},
  };
  // clang-format on
  for (const auto& row : rows) {
    const Shape* shape = find_shape(row.topology);
    ASSERT_NE(shape, nullptr);
    SCOPED_TRACE(static_cast<int>(row.topology));
    const auto routing = shape->routing();
    EXPECT_EQ(routing.many_nodes, row.many_nodes);
    EXPECT_EQ(routing.slot_map, row.slot_map);
    EXPECT_EQ(routing.located, row.located);
    EXPECT_EQ(shape->attempt(), row.attempt);
    EXPECT_EQ(shape->queues(), row.queues);
    EXPECT_EQ(shape->keeps_info(), row.keeps_info);
    EXPECT_EQ(shape->groups(), row.groups);
    EXPECT_EQ(shape->gives_back_per_node(), row.per_node);
    for (auto f : {Feature::lease_sets, Feature::admin, Feature::min_replicas, Feature::labels,
                   Feature::idempotency}) {
      EXPECT_EQ(!shape->refuses(f).empty(), row.refuses_admin);
    }
    // The slot: the key's hash slot with a slot map, else 0.
    EXPECT_EQ(shape->slot_of("{a}x"), row.slot_map ? key_slot("a") : 0);
  }
}
