// SPDX-License-Identifier: MIT
// Diagnostics per operation (<redis_lock/diagnostics.hpp>): the server's text, or the rule an
// argument broke, reachable from the operation that failed, with any completion token and
// through Asio's own binders; the error code unchanged; cleared by an operation that succeeds.
#include "keys.hpp"
#include "live.hpp"

#include "background.hpp"

#include <redis_lock/diagnostics.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>

#include <future>
#include <optional>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

/// A new resource whose lease key holds a list: an acquire's script fails with WRONGTYPE.
std::string held_as_a_list(const ConnectionConfig& cfg) {
  auto resource = unique_resource();
  EXPECT_EQ(redis_command(cfg.port, {"RPUSH", lease_key(resource), "x"}), "1");
  return resource;
}

}  // namespace

TEST(Diagnostics, ARefusedAcquireSaysTheRuleItBroke) {
  asio::io_context io;
  LockManager locks(io.get_executor(), shared_server_config());
  Diagnostics diag;
  std::optional<error_code> got;
  locks.async_acquire("r", {.ttl = 0ms},
                      bind_diagnostics(diag, [&](error_code ec, LockGuard) { got = ec; }));
  io.run_for(5s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, error::invalid_argument);  // comparisons keep working
  EXPECT_EQ(diag.message(), "LockOptions::ttl must be > 0");
}

TEST(Diagnostics, AServerErrorIsTheServersOwnTextWithAFuture) {
  Background bg;
  auto cfg = shared_server_config();
  LockManager locks(bg.io.get_executor(), cfg);
  const auto resource = held_as_a_list(cfg);
  Diagnostics diag;
  diag.assign("stale");
  auto future =
      locks.async_acquire(resource, {.ttl = 5s}, bind_diagnostics(diag, asio::use_future));
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  // The io thread drops its share of the future's state (and of the exception in it) just
  // after making it ready: wait until it has (a handler posted now runs after that one
  // returned), or the exception's last release could fall on either thread during the catch
  // below, which TSan reports (it cannot see libstdc++'s own atomic count of an exception).
  bg.run([] {});
  try {
    future.get();
    ADD_FAILURE() << "acquired a key that holds a list";
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), error::wrong_type);
  }
  EXPECT_EQ(diag.message().rfind("WRONGTYPE", 0), 0u) << diag.message();
}

TEST(Diagnostics, ASuccessClearsThemAndTheGuardsOperationsTellTheirOwn) {
  Background bg;
  LockManager locks(bg.io.get_executor(), shared_server_config());
  Diagnostics diag;
  diag.assign("stale");
  auto guard =
      locks.async_acquire(unique_resource(), {.ttl = 5s}, bind_diagnostics(diag, asio::use_future))
          .get();
  ASSERT_TRUE(guard);
  EXPECT_TRUE(diag.empty()) << diag.message();
  auto extended = guard.async_extend(0ms, bind_diagnostics(diag, asio::use_future));
  EXPECT_THROW(extended.get(), boost::system::system_error);
  EXPECT_EQ(diag.message(), "the extension's ttl must be > 0");
  auto touched = guard.async_touch(std::string(200, 'x'), bind_diagnostics(diag, asio::use_future));
  EXPECT_THROW(touched.get(), boost::system::system_error);
  EXPECT_NE(diag.message().find("holder_label"), std::string_view::npos) << diag.message();
  EXPECT_TRUE(guard.async_extend(5s, bind_diagnostics(diag, asio::use_future)).get());
  EXPECT_TRUE(diag.empty()) << diag.message();
  auto inspected = locks.async_inspect("", bind_diagnostics(diag, asio::use_future));
  EXPECT_THROW(inspected.get(), boost::system::system_error);
  EXPECT_EQ(diag.message(), "the resource name must not be empty");
}

TEST(Diagnostics, AreFoundThroughAsiosBindersAndKeepTheirAssociations) {
  // Inside a cancellation slot's binder, outside an executor's: the operation finds the
  // Diagnostics, the cancellation still reaches it, and the handler runs on its strand.
  Background bg;
  auto cfg = shared_server_config();
  LockManager locks(bg.io.get_executor(), cfg);
  LockManager holder(bg.io.get_executor(), cfg);
  const auto resource = unique_resource();
  auto held = holder.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(held);
  auto strand = asio::make_strand(bg.io);
  asio::cancellation_signal signal;
  Diagnostics diag;
  std::promise<std::pair<error_code, bool>> done;
  asio::post(strand, [&] {
    locks.async_acquire(
        resource, {.ttl = 5s, .wait = 10s},
        asio::bind_cancellation_slot(
            signal.slot(),
            bind_diagnostics(diag, asio::bind_executor(strand, [&](error_code ec, LockGuard) {
                               done.set_value({ec, strand.running_in_this_thread()});
                             }))));
    asio::post(strand, [&] { signal.emit(asio::cancellation_type::terminal); });
  });
  auto result = done.get_future();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready) << "the cancellation never came";
  const auto [ec, on_strand] = result.get();
  EXPECT_EQ(ec, asio::error::operation_aborted);
  EXPECT_TRUE(on_strand);
  EXPECT_TRUE(diag.empty()) << diag.message();  // a cancellation has nothing to add

  // And a refusal through the same binders is told.
  std::promise<error_code> refused;
  locks.async_acquire("", {.ttl = 1s},
                      asio::bind_cancellation_slot(
                          signal.slot(), bind_diagnostics(diag, [&](error_code e, LockGuard) {
                            refused.set_value(e);
                          })));
  auto r = refused.get_future();
  ASSERT_EQ(r.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(r.get(), error::invalid_argument);
  EXPECT_EQ(diag.message(), "the resource name must not be empty");
}

TEST(Diagnostics, WorkWithTheDefaultTokenAndTellAGroupAcquiresServerError) {
  // asio::deferred (the operations' default token), and async_acquire_all's group script
  // refused by the server: its text reaches the caller.
  Background bg;
  auto cfg = shared_server_config();
  LockManager locks(bg.io.get_executor(), cfg);
  const auto resource = held_as_a_list(cfg);
  Diagnostics diag;
  auto op = locks.async_acquire_all({unique_resource(), resource}, {.ttl = 5s},
                                    bind_diagnostics(diag, asio::deferred));
  std::promise<error_code> done;
  std::move(op)([&](error_code ec, std::vector<LockGuard>) { done.set_value(ec); });
  auto result = done.get_future();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(result.get(), error::wrong_type);
  EXPECT_EQ(diag.message().rfind("WRONGTYPE", 0), 0u) << diag.message();
}

TEST(Diagnostics, AReleaseTellsTheServersText) {
  Background bg;
  auto cfg = shared_server_config();
  LockManager locks(bg.io.get_executor(), cfg);
  const auto resource = unique_resource();
  auto guard = locks.async_acquire(resource, {.ttl = 10s}, asio::use_future).get();
  ASSERT_TRUE(guard);
  // The lease is someone else's now, and its queue key holds a string: the release, no
  // longer the holder's, leaves the queue (ZREM), which the server refuses.
  ASSERT_EQ(redis_command(cfg.port, {"SET", lease_key(resource), "someone-else"}), "OK");
  ASSERT_EQ(redis_command(cfg.port, {"SET", detail::make_keys("lock:", resource).queue(), "x"}),
            "OK");
  Diagnostics diag;
  auto released = guard.async_release(bind_diagnostics(diag, asio::use_future));
  ASSERT_EQ(released.wait_for(5s), std::future_status::ready);
  EXPECT_THROW(released.get(), boost::system::system_error);
  EXPECT_EQ(diag.message().rfind("WRONGTYPE", 0), 0u) << diag.message();
}
