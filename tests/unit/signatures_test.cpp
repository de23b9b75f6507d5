// SPDX-License-Identifier: MIT
// The call forms the docs show compile and resolve to one overload: options may be left out
// before a completion token (or a with_lock work), and `{}` / `{.ttl = ...}` in the options
// place stay unambiguous. Each operation hands Asio a named initiation that reports its
// executor (the manager's), as tokens such as asio::cancel_after need. Most checks here are
// compile-time: this file failing to compile is the failure. The runtime checks need no
// server (empty resources are refused before anything is sent; record_initiation starts
// nothing).
#include "record_initiation.hpp"

#include <redis_lock/election.hpp>
#include <redis_lock/redis_lock.hpp>
#include <redis_lock/with_lock.hpp>

#include <gtest/gtest.h>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <future>
#include <type_traits>
#include <typeindex>
#include <utility>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redis_lock::Election;
using redis_lock::LockGuard;
using redis_lock::LockManager;
using redis_lock::LockOptions;
using redis_lock::test::record_initiation;
using redis_lock::test::RecordedInitiation;

namespace {

template <class... Args>
concept acquire_accepts = requires(LockManager& m, Args&&... args) {
  m.async_acquire(std::forward<Args>(args)...);
};

template <class Token>
using acquire_result_t =
    decltype(std::declval<LockManager&>().async_acquire("r", std::declval<Token>()));

auto work = [](const LockGuard&) -> asio::awaitable<void> { co_return; };
using Work = decltype(work);

template <class... Args>
concept with_lock_accepts = requires(LockManager& m, Args&&... args) {
  redis_lock::with_lock(m, std::forward<Args>(args)...);
};
template <class... Args>
concept async_with_lock_accepts = requires(LockManager& m, Args&&... args) {
  redis_lock::async_with_lock(m, std::forward<Args>(args)...);
};

// Without options: a resource alone, or a resource and a token.
static_assert(acquire_accepts<const char*>);
static_assert(acquire_accepts<std::string>);
static_assert(acquire_accepts<const char*, asio::use_awaitable_t<>>);
static_assert(acquire_accepts<const char*, const asio::use_future_t<>&>);
static_assert(acquire_accepts<const char*, void (*)(error_code, LockGuard)>);
// With options, given as values (lvalue, const, rvalue), with or without a token.
static_assert(acquire_accepts<const char*, LockOptions&>);
static_assert(acquire_accepts<const char*, const LockOptions&>);
static_assert(acquire_accepts<const char*, LockOptions, asio::deferred_t>);
static_assert(acquire_accepts<const char*, LockOptions&, void (*)(error_code, LockGuard)>);
// Neither options nor a token: refused by overload resolution, not deep inside Asio.
static_assert(!acquire_accepts<>);
static_assert(!acquire_accepts<const char*, int>);
static_assert(!acquire_accepts<const char*, void (*)(error_code)>);
static_assert(!acquire_accepts<const char*, std::chrono::milliseconds>);

// What each form returns: the token decides, as with the options.
static_assert(
    std::is_same_v<acquire_result_t<asio::use_awaitable_t<>>, asio::awaitable<LockGuard>>);
static_assert(std::is_same_v<acquire_result_t<asio::use_future_t<>>, std::future<LockGuard>>);
static_assert(std::is_same_v<decltype(std::declval<LockManager&>().async_acquire("r")),
                             decltype(std::declval<LockManager&>().async_acquire("r", LockOptions{},
                                                                                 asio::deferred))>);

// Braced options: `{}` and designated initialisers pick the options overload, alone or
// before a token (a call that resolved to no overload, or to two, fails to compile here).
static_assert(requires(LockManager & m) {
  m.async_acquire("r", {});
  m.async_acquire("r", {.ttl = 5s});
  m.async_acquire("r", {}, asio::use_awaitable);
  m.async_acquire("r", {.ttl = 5s, .wait = 1s}, asio::deferred);
  { m.async_acquire("r", {}, asio::use_future) } -> std::same_as<std::future<LockGuard>>;
  {
    m.async_acquire("r", {.ttl = 5s}, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<LockGuard>>;
});

// Every acquire form, like async_acquire, takes a token where the options would go (the
// defaults), and still takes braced options before a token.
static_assert(requires(LockManager & m, LockOptions& opts, Election& e) {
  { m.async_acquire_shared("r", asio::use_awaitable) } -> std::same_as<asio::awaitable<LockGuard>>;
  {
    m.async_acquire_exclusive("r", asio::use_awaitable)
    } -> std::same_as<asio::awaitable<LockGuard>>;
  {
    m.async_acquire_permit("r", 3, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<LockGuard>>;
  {
    m.async_acquire_all(std::vector<std::string>{"a", "b"}, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<std::vector<LockGuard>>>;
  { e.async_campaign("v", asio::use_awaitable) } -> std::same_as<asio::awaitable<LockGuard>>;
  { m.async_acquire_shared("r", asio::use_future) } -> std::same_as<std::future<LockGuard>>;
  m.async_acquire_shared("r", {.ttl = 5s}, asio::use_awaitable);
  m.async_acquire_exclusive("r", opts, asio::use_awaitable);
  m.async_acquire_permit("r", 3, {}, asio::deferred);
  m.async_acquire_all(std::vector<std::string>{"a"}, {.wait = 1s}, asio::use_awaitable);
  e.async_campaign("v", {.ttl = 5s}, asio::use_awaitable);
  m.async_acquire_shared("r");
  m.async_acquire_permit("r", 3);
  m.async_acquire_all(std::vector<std::string>{"a"});
});

// with_lock and async_with_lock: the options may be left out before the work.
static_assert(with_lock_accepts<const char*, Work>);
static_assert(with_lock_accepts<const char*, LockOptions, Work>);
static_assert(with_lock_accepts<const char*, LockOptions&, Work&>);
static_assert(!with_lock_accepts<const char*, LockOptions>);  // options but no work
static_assert(async_with_lock_accepts<const char*, Work>);
static_assert(async_with_lock_accepts<const char*, Work, asio::use_future_t<>>);
static_assert(async_with_lock_accepts<const char*, LockOptions&, Work>);
static_assert(async_with_lock_accepts<const char*, LockOptions, Work, asio::deferred_t>);
static_assert(!async_with_lock_accepts<const char*, LockOptions&>);
// ... and every kind: a permit, a shared or exclusive hold, several resources (whose work
// takes the guards).
auto work_all = [](const std::vector<LockGuard>&) -> asio::awaitable<void> { co_return; };
using WorkAll = decltype(work_all);
static_assert(with_lock_accepts<redis_lock::Permit, LockOptions, Work>);
static_assert(with_lock_accepts<redis_lock::SharedHold, Work>);
static_assert(with_lock_accepts<redis_lock::ExclusiveHold, LockOptions&, Work>);
static_assert(with_lock_accepts<redis_lock::AllOf, LockOptions, WorkAll>);
static_assert(with_lock_accepts<redis_lock::AllOf, WorkAll>);
static_assert(!with_lock_accepts<redis_lock::AllOf, Work>);  // the work takes all the guards
static_assert(async_with_lock_accepts<redis_lock::Permit, LockOptions, Work>);
static_assert(async_with_lock_accepts<redis_lock::AllOf, LockOptions, WorkAll, asio::deferred_t>);
static_assert(requires(LockManager & m) {
  { redis_lock::with_lock(m, "r", work) } -> std::same_as<asio::awaitable<error_code>>;
  { redis_lock::with_lock(m, "r", {}, work) } -> std::same_as<asio::awaitable<error_code>>;
  { redis_lock::with_lock(m, "r", {.ttl = 5s}, work) } -> std::same_as<asio::awaitable<error_code>>;
  redis_lock::async_with_lock(m, "r", {.ttl = 5s}, work);
  redis_lock::async_with_lock(m, "r", {}, work, asio::deferred);
});

}  // namespace

// The forms without options reach the same checks as the others: an empty resource is
// refused with invalid_argument before anything is sent (so no server is needed).
TEST(Signatures, AcquireWithoutOptionsGoesThroughTheSameChecks) {
  asio::io_context io;
  redis_lock::ConnectionConfig cfg;
  cfg.port = 1;  // never reached: the resource is refused first
  LockManager locks(io.get_executor(), cfg);
  std::optional<error_code> with_token, deferred;
  locks.async_acquire("", [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(g);
    with_token = ec;
  });
  locks.async_acquire("")([&](error_code ec, LockGuard g) {
    EXPECT_FALSE(g);
    deferred = ec;
  });
  io.run_for(5s);
  ASSERT_TRUE(with_token);
  ASSERT_TRUE(deferred);
  EXPECT_EQ(*with_token, redis_lock::error::invalid_argument);
  EXPECT_EQ(*deferred, redis_lock::error::invalid_argument);
}

// The initiations: named types (not lambdas), each with `executor_type` and a noexcept
// `get_executor()` (record_initiation checks both at compile time).
namespace init {
using initiate_acquire = redis_lock::detail::initiate<redis_lock::detail::AcquireParams>;
using initiate_extend = redis_lock::detail::initiate<redis_lock::detail::ExtendParams>;
using redis_lock::detail::initiate_release;
using initiate_wait_lost = redis_lock::detail::initiate<redis_lock::detail::WaitLostParams>;
static_assert(std::is_same_v<initiate_acquire::executor_type, asio::any_io_executor>);
static_assert(std::is_same_v<initiate_release::executor_type, asio::any_io_executor>);
static_assert(std::is_same_v<initiate_extend::executor_type, asio::any_io_executor>);
static_assert(std::is_same_v<initiate_wait_lost::executor_type, asio::any_io_executor>);
static_assert(noexcept(std::declval<const initiate_acquire&>().get_executor()));
static_assert(noexcept(std::declval<const initiate_release&>().get_executor()));
static_assert(noexcept(std::declval<const initiate_extend&>().get_executor()));
static_assert(noexcept(std::declval<const initiate_wait_lost&>().get_executor()));
// The recording token is a completion token like any other: every call form takes it.
static_assert(acquire_accepts<const char*, record_initiation>);
static_assert(acquire_accepts<const char*, LockOptions, record_initiation>);
}  // namespace init

// async_acquire's initiation reports the manager's executor, in every call form, and a
// moved-from manager's still does (it keeps the executor it was made with).
TEST(Signatures, AcquireInitiationReportsTheManagersExecutor) {
  asio::io_context io;
  asio::io_context other;
  redis_lock::ConnectionConfig cfg;
  cfg.port = 1;  // never reached: record_initiation starts nothing
  LockManager locks(io.get_executor(), cfg);
  const asio::any_io_executor expected = io.get_executor();

  RecordedInitiation with_options, without_options, braced;
  locks.async_acquire("r", LockOptions{}, record_initiation{&with_options});
  locks.async_acquire("r", record_initiation{&without_options});
  locks.async_acquire("r", {.ttl = 5s}, record_initiation{&braced});
  for (const RecordedInitiation* seen : {&with_options, &without_options, &braced}) {
    ASSERT_TRUE(seen->type && seen->executor);
    EXPECT_EQ(*seen->type, std::type_index(typeid(init::initiate_acquire)));
    EXPECT_TRUE(*seen->executor == expected);
    EXPECT_FALSE(*seen->executor == asio::any_io_executor(other.get_executor()));
  }

  LockManager moved_to(std::move(locks));
  RecordedInitiation moved_from;
  locks.async_acquire("r", record_initiation{&moved_from});
  ASSERT_TRUE(moved_from.executor);
  EXPECT_TRUE(*moved_from.executor == expected);
  EXPECT_EQ(io.poll(), 0U) << "record_initiation must not have started anything";
}

// A default-constructed guard has no manager: its completions run on the handler's own
// associated executor, Asio's system executor for a plain callback, which is what its
// initiations report.
TEST(Signatures, DefaultGuardInitiationsReportTheSystemExecutor) {
  LockGuard guard;
  RecordedInitiation release, extend, wait_lost, touch;
  guard.async_release(record_initiation{&release});
  guard.async_extend(1s, record_initiation{&extend});
  guard.async_wait_lost(record_initiation{&wait_lost});
  guard.async_touch("label", record_initiation{&touch});
  ASSERT_TRUE(release.type && extend.type && wait_lost.type && touch.type);
  EXPECT_EQ(*release.type, std::type_index(typeid(init::initiate_release)));
  EXPECT_EQ(*extend.type, std::type_index(typeid(init::initiate_extend)));
  EXPECT_EQ(*wait_lost.type, std::type_index(typeid(init::initiate_wait_lost)));
  const asio::any_io_executor system{asio::system_executor()};
  EXPECT_EQ(*touch.type,
            std::type_index(typeid(redis_lock::detail::initiate<redis_lock::detail::TouchParams>)));
  for (const RecordedInitiation* seen : {&release, &extend, &wait_lost, &touch}) {
    ASSERT_TRUE(seen->executor);
    EXPECT_TRUE(*seen->executor);
    EXPECT_TRUE(*seen->executor == system);
  }
}
