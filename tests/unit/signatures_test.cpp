// SPDX-License-Identifier: MIT
// The call forms the docs show compile and resolve to one overload: options may be left out
// before a completion token (or a with_lock work), and `{}` / `{.ttl = ...}` in the options
// place stay unambiguous. Most checks here are compile-time: this file failing to compile is
// the failure. The runtime checks need no server (empty resources are refused before
// anything is sent).
#include <redis_lock/redis_lock.hpp>
#include <redis_lock/with_lock.hpp>

#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include <future>
#include <type_traits>
#include <utility>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using redis_lock::LockGuard;
using redis_lock::LockManager;
using redis_lock::LockOptions;
using boost::system::error_code;

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
                             decltype(std::declval<LockManager&>().async_acquire(
                                 "r", LockOptions{}, asio::deferred))>);

// Braced options: `{}` and designated initialisers pick the options overload, alone or
// before a token (a call that resolved to no overload, or to two, fails to compile here).
static_assert(requires(LockManager& m) {
  m.async_acquire("r", {});
  m.async_acquire("r", {.ttl = 5s});
  m.async_acquire("r", {}, asio::use_awaitable);
  m.async_acquire("r", {.ttl = 5s, .wait = 1s}, asio::deferred);
  { m.async_acquire("r", {}, asio::use_future) } -> std::same_as<std::future<LockGuard>>;
  {
    m.async_acquire("r", {.ttl = 5s}, asio::use_awaitable)
  } -> std::same_as<asio::awaitable<LockGuard>>;
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
static_assert(requires(LockManager& m) {
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
