// SPDX-License-Identifier: MIT
// Read-write locks (async_acquire_shared, async_acquire_exclusive): readers share, a writer
// excludes everyone, a queued writer is not overtaken by later readers, readers queued
// together go in together, every grant has a larger fencing token; and a holder killed with
// SIGKILL (a reader, a semaphore's permit) blocks others for its ttl at most, not less.
#include "live.hpp"

#include "background.hpp"
#include "child_process.hpp"
#include "lease_sets.hpp"

#include <boost/asio/use_future.hpp>

#include <set>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::test;

TEST(ReadWriteLock, ReadersShareAndAWriterExcludesEveryone) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto r1 = locks.async_acquire_shared(resource, {.ttl = 10s}, asio::use_future).get();
  auto r2 = locks.async_acquire_shared(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(r1 && r2);
  EXPECT_GT(r2.fencing_token(), r1.fencing_token());
  EXPECT_FALSE(locks.async_acquire_exclusive(resource, {.ttl = 10s}, asio::use_future).get())
      << "a writer beside two readers";
  r1.async_release(asio::use_future).get();
  EXPECT_FALSE(locks.async_acquire_exclusive(resource, {.ttl = 10s}, asio::use_future).get())
      << "a writer beside a reader";
  r2.async_release(asio::use_future).get();
  auto w = locks.async_acquire_exclusive(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(w);
  EXPECT_GT(w.fencing_token(), r2.fencing_token());
  EXPECT_FALSE(locks.async_acquire_shared(resource, {.ttl = 10s}, asio::use_future).get())
      << "a reader beside the writer";
  EXPECT_FALSE(locks.async_acquire_exclusive(resource, {.ttl = 10s}, asio::use_future).get())
      << "two writers";
  EXPECT_TRUE(w.async_release(asio::use_future).get());
  EXPECT_EQ(redis_command(cfg.port, {"EXISTS", lease_key(resource)}), "0");
}

TEST(ReadWriteLock, AQueuedWriterIsNotOvertakenByReadersThatCameLater) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager writer_mgr(bg.io.get_executor(), cfg);
  LockManager late_mgr(bg.io.get_executor(), cfg);
  auto reader = locks.async_acquire_shared(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(reader);
  auto writer =
      writer_mgr.async_acquire_exclusive(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  wait_until([&] { return queued(cfg.port, resource) == 1; }, 10s, "the writer to queue");
  EXPECT_FALSE(late_mgr.async_acquire_shared(resource, {.ttl = 30s}, asio::use_future).get())
      << "a reader that came after the queued writer went in before it";
  auto late = late_mgr.async_acquire_shared(resource, {.ttl = 30s, .wait = 20s}, asio::use_future);
  wait_until([&] { return queued(cfg.port, resource) == 2; }, 10s, "the late reader to queue");

  ASSERT_TRUE(reader.async_release(asio::use_future).get());
  ASSERT_EQ(writer.wait_for(10s), std::future_status::ready);
  auto w = writer.get();
  ASSERT_TRUE(w);
  EXPECT_EQ(late.wait_for(0s), std::future_status::timeout) << "a reader beside the writer";
  ASSERT_TRUE(w.async_release(asio::use_future).get());
  ASSERT_EQ(late.wait_for(10s), std::future_status::ready);
  auto r = late.get();
  ASSERT_TRUE(r);
  EXPECT_GT(r.fencing_token(), w.fencing_token());
}

TEST(ReadWriteLock, ReadersQueuedTogetherGoInTogether) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  Background bg;
  LockManager writer_mgr(bg.io.get_executor(), cfg);
  auto w = writer_mgr.async_acquire_exclusive(resource, {.ttl = 30s}, asio::use_future).get();
  ASSERT_TRUE(w);
  // Queue: three readers, a writer, a reader.
  std::vector<std::unique_ptr<LockManager>> managers;
  std::vector<Pending> waiting;
  const char* kinds = "sssxs";
  for (int i = 0; i < 5; ++i) {
    managers.push_back(std::make_unique<LockManager>(bg.io.get_executor(), cfg));
    const LockOptions options{.ttl = 30s, .wait = 20s};
    waiting.push_back(
        kinds[i] == 'x'
            ? managers.back()->async_acquire_exclusive(resource, options, asio::use_future)
            : managers.back()->async_acquire_shared(resource, options, asio::use_future));
    wait_until([&] { return queued(cfg.port, resource) == i + 1; }, 10s, "the waiter to queue");
  }
  ASSERT_TRUE(w.async_release(asio::use_future).get());
  std::vector<LockGuard> readers;
  std::set<std::uint64_t> tokens;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(waiting[i].wait_for(10s), std::future_status::ready) << i;
    readers.push_back(waiting[i].get());
    ASSERT_TRUE(readers.back()) << i;
    // Each reader's token is the one its claim got from the server (in the order the
    // claims ran, not the queue's): above the writer's, and its own.
    EXPECT_GT(readers.back().fencing_token(), w.fencing_token());
    tokens.insert(readers.back().fencing_token());
  }
  EXPECT_EQ(tokens.size(), 3u);
  EXPECT_EQ(holders(cfg.port, resource), 3) << "the three readers hold together";
  EXPECT_EQ(queued(cfg.port, resource), 2);
  EXPECT_EQ(waiting[3].wait_for(0s), std::future_status::timeout) << "the writer beside readers";
  EXPECT_EQ(waiting[4].wait_for(0s), std::future_status::timeout) << "a reader past the writer";
  for (auto& r : readers) r.async_release(asio::use_future).get();
  ASSERT_EQ(waiting[3].wait_for(10s), std::future_status::ready);
  auto w2 = waiting[3].get();
  ASSERT_TRUE(w2);
  EXPECT_EQ(waiting[4].wait_for(0s), std::future_status::timeout);
  w2.async_release(asio::use_future).get();
  ASSERT_EQ(waiting[4].wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(waiting[4].get());
}

TEST(ReadWriteLock, AReaderKilledWithSigkillBlocksTheWriterForItsTtlAndNoLonger) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  ChildProcess reader(
      {REDIS_LOCK_HOLDER_PATH, std::to_string(cfg.port), resource, "1000", "shared"});
  const auto reader_fence = std::stoull("0" + reader.read_line());
  ASSERT_GT(reader_fence, 0u);
  const auto taken_at = std::chrono::steady_clock::now();
  reader.kill9();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  auto w =
      locks.async_acquire_exclusive(resource, {.ttl = 5s, .wait = 10s}, asio::use_future).get();
  const auto waited = std::chrono::steady_clock::now() - taken_at;
  ASSERT_TRUE(w);
  EXPECT_GT(w.fencing_token(), reader_fence);
  // Not before the reader's lease ended (1 s after it was taken, less this test's own
  // round trips), and soon after: the writer sleeps until then.
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 3s);
}

TEST(Semaphore, APermitOfAHolderKilledWithSigkillReturnsAfterItsTtlAndNotBefore) {
  auto cfg = shared_server_config();
  const auto resource = unique_resource();
  ChildProcess a({REDIS_LOCK_HOLDER_PATH, std::to_string(cfg.port), resource, "1000", "permit:2"});
  ChildProcess b({REDIS_LOCK_HOLDER_PATH, std::to_string(cfg.port), resource, "20000", "permit:2"});
  ASSERT_GT(std::stoull("0" + a.read_line()), 0u);
  ASSERT_GT(std::stoull("0" + b.read_line()), 0u);
  const auto taken_at = std::chrono::steady_clock::now();
  a.kill9();
  Background bg;
  LockManager locks(bg.io.get_executor(), cfg);
  EXPECT_FALSE(locks.async_acquire_permit(resource, 2, {.ttl = 5s}, asio::use_future).get())
      << "the dead holder's permit came back before its ttl";
  auto p =
      locks.async_acquire_permit(resource, 2, {.ttl = 5s, .wait = 10s}, asio::use_future).get();
  const auto waited = std::chrono::steady_clock::now() - taken_at;
  ASSERT_TRUE(p);
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 3s);
  EXPECT_EQ(holders(cfg.port, resource), 2) << "the live holder and us";
  b.kill9();
}
