// SPDX-License-Identifier: MIT
// Server errors become distinct codes, and the server's own text is kept.
#include "keys.hpp"
#include "live.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

TEST(ServerErrors, WrongTypeOnTheLeaseKey) {
  asio::io_context io;
  auto cfg = shared_server_config();
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  ASSERT_EQ(redis_command(cfg.port, {"RPUSH", lease_key(resource), "x"}), "1");
  auto r = acquire_once(locks, io, resource);
  EXPECT_EQ(r.ec, error::wrong_type) << r.ec.message();
  EXPECT_FALSE(r.owned);
  EXPECT_NE(locks.last_server_error().find("WRONGTYPE"), std::string::npos);
  EXPECT_NE(r.ec.message().find("WRONGTYPE"), std::string::npos);
  EXPECT_EQ(redis_command(cfg.port, {"TYPE", lease_key(resource)}), "list") << "left untouched";
}

TEST(ServerErrors, WrongTypeOnTheFencingCounterTakesNoLease) {
  asio::io_context io;
  auto cfg = shared_server_config();
  ManagerOptions opts;
  opts.key_prefix = "wt" + std::to_string(std::random_device{}()) + ":";
  LockManager locks(io.get_executor(), cfg, opts);
  const auto resource = unique_resource();
  // Learn the counter's name from a first acquisition, then break it.
  {
    auto first = acquire_once(locks, io, resource);
    ASSERT_TRUE(first.owned);
    io.restart();
    io.run_for(5s);  // the guard's release
  }
  const auto fence_key = redis_command(cfg.port, {"KEYS", opts.key_prefix + "fence:*"});
  ASSERT_EQ(fence_key.find(' '), std::string::npos) << fence_key;
  redis_command(cfg.port, {"DEL", fence_key});
  redis_command(cfg.port, {"RPUSH", fence_key, "x"});
  auto r = acquire_once(locks, io, resource);
  EXPECT_EQ(r.ec, error::wrong_type) << r.ec.message();
  EXPECT_FALSE(r.owned);
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", opts.key_prefix + "{" + resource + "}"}), "0")
      << "a lease without a fencing token must not stay behind";
}

TEST(ServerErrors, OutOfMemory) {
  RedisServer server({"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"});
  server.command({"DEBUG", "POPULATE", "40000", "filler", "100"});
  asio::io_context io;
  LockManager locks(io.get_executor(), server.config());
  auto r = acquire_once(locks, io, "r");
  EXPECT_EQ(r.ec, error::out_of_memory) << r.ec.message() << " / " << locks.last_server_error();
  EXPECT_FALSE(r.owned);
}

TEST(ServerErrors, ReadOnlyReplica) {
  RedisServer master({"--repl-diskless-sync-delay", "0"});
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  asio::io_context io;
  LockManager locks(io.get_executor(), replica.config());
  auto r = acquire_once(locks, io, "r");
  EXPECT_EQ(r.ec, error::read_only) << r.ec.message() << " / " << locks.last_server_error();
  EXPECT_FALSE(r.owned);
}

namespace {

/// What an observer heard, kept under a lock (managers may share an observer).
template <class T>
class Heard {
 public:
  void add(T value) {
    std::lock_guard lock(mutex_);
    values_.push_back(std::move(value));
  }
  std::vector<T> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(values_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<T> values_;
};

/// Keeps each failed acquire's detail, as a log line would.
struct DetailRecorder final : Observer {
  void on_acquire(const AcquireEvent& e) noexcept override {
    if (e.outcome == AcquireOutcome::failed) details.add(std::string(e.detail));
  }
  std::vector<std::string> take() { return details.take(); }
  Heard<std::string> details;
};

}  // namespace

TEST(ServerErrors, EachFailedOperationCarriesItsOwnDetail) {
  // Two concurrent server refusals and a broken rule: each event carries its own text
  // (last_server_error() holds only the latest reply).
  asio::io_context io;
  auto cfg = shared_server_config();
  auto recorder = std::make_shared<DetailRecorder>();
  LockManager locks(io.get_executor(), cfg, {.observer = recorder});
  const auto listed = unique_resource(), hashed = unique_resource();
  ASSERT_EQ(redis_command(cfg.port, {"RPUSH", lease_key(listed), "x"}), "1");
  ASSERT_EQ(redis_command(cfg.port, {"HSET", lease_key(hashed), "f", "v"}), "1");
  int completed = 0;
  for (const auto& r : {listed, hashed}) {
    locks.async_acquire(r, {.ttl = 5s}, [&](error_code ec, LockGuard) {
      EXPECT_EQ(ec, error::wrong_type);
      ++completed;
    });
  }
  locks.async_acquire(unique_resource(), {.ttl = 0s}, [&](error_code ec, LockGuard) {
    EXPECT_EQ(ec, error::invalid_argument);
    ++completed;
  });
  io.run_for(10s);
  ASSERT_EQ(completed, 3);
  auto details = recorder->take();
  ASSERT_EQ(details.size(), 3u);
  std::sort(details.begin(), details.end());
  EXPECT_EQ(details[0], "LockOptions::ttl must be > 0");
  EXPECT_EQ(details[1].rfind("WRONGTYPE", 0), 0u) << details[1];
  EXPECT_EQ(details[2].rfind("WRONGTYPE", 0), 0u) << details[2];
}

namespace {

struct AdminRecorder final : Observer {
  struct Seen {
    AdminCommand command;
    std::string resource;
    error_code error;
    std::string detail;
  };
  void on_admin(const AdminEvent& e) noexcept override {
    seen.add({e.command, std::string(e.resource), e.error, std::string(e.detail)});
  }
  std::vector<Seen> take() { return seen.take(); }
  Heard<Seen> seen;
};

}  // namespace

TEST(ServerErrors, AdminOperationsReportTheirOwnOutcomeAndDetail) {
  // Inspect, force-release and an election's leader read name themselves to the observer,
  // each with its own error and the text behind it: the server's reply, or the broken rule.
  asio::io_context io;
  auto cfg = shared_server_config();
  auto recorder = std::make_shared<AdminRecorder>();
  LockManager locks(io.get_executor(), cfg, {.observer = recorder});
  const auto listed = unique_resource(), free = unique_resource();
  // The queue's expiry index holds a string: inspect.lua's ZCOUNT on it is refused.
  const auto expiry = detail::make_keys("lock:", listed).queue_expiry();
  ASSERT_EQ(redis_command(cfg.port, {"SET", expiry, "x"}), "OK");
  int completed = 0;
  const auto expect = [&](error_code want) {
    return [&completed, want](error_code ec, auto&&...) {
      EXPECT_EQ(ec, want) << ec.message();
      ++completed;
    };
  };
  locks.async_inspect(listed, expect(error::wrong_type));
  locks.async_inspect("", expect(error::invalid_argument));
  locks.async_force_release("", expect(error::invalid_argument));
  locks.async_force_release(free, expect({}));
  Election election(locks, unique_resource("election"));
  election.async_leader(expect({}));
  // Each report is made on the strand before its handler is delivered (a refusal's is
  // posted there before its handler is): all five are in once the five handlers ran.
  ASSERT_TRUE(run_until(
      io, [&] { return completed == 5; }, 10s));
  auto seen = recorder->take();
  ASSERT_EQ(seen.size(), 5u);
  const auto find = [&](AdminCommand c, const std::string& r) -> const AdminRecorder::Seen* {
    for (const auto& s : seen) {
      if (s.command == c && s.resource == r) return &s;
    }
    return nullptr;
  };
  const auto* wrong = find(AdminCommand::inspect, listed);
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->error, error::wrong_type);
  EXPECT_EQ(wrong->detail.rfind("WRONGTYPE", 0), 0u) << wrong->detail;
  const auto* empty_inspect = find(AdminCommand::inspect, "");
  ASSERT_TRUE(empty_inspect);
  EXPECT_EQ(empty_inspect->detail, "the resource name must not be empty");
  const auto* empty_release = find(AdminCommand::force_release, "");
  ASSERT_TRUE(empty_release);
  EXPECT_EQ(empty_release->error, error::invalid_argument);
  const auto* released = find(AdminCommand::force_release, free);
  ASSERT_TRUE(released);
  EXPECT_FALSE(released->error);
  EXPECT_TRUE(released->detail.empty());
  const auto leader = std::find_if(seen.begin(), seen.end(),
                                   [](const auto& s) { return s.command == AdminCommand::leader; });
  ASSERT_NE(leader, seen.end());
  EXPECT_FALSE(leader->error) << leader->error.message();
}
