// SPDX-License-Identifier: MIT
// A completion token that launches nothing: its async_result records which initiation an
// asynchronous operation handed over and the executor that initiation reports, as a token
// that needs an executor of its own (asio::cancel_after and friends) would read it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <optional>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <utility>

namespace redis_lock::test {

/// What record_initiation saw.
struct RecordedInitiation {
  std::optional<std::type_index> type;
  std::optional<boost::asio::any_io_executor> executor;
};

/// `op(record_initiation{&seen})` fills `seen` and starts nothing: the arguments (a guard
/// given to async_release, too) are left as they were.
struct record_initiation {
  RecordedInitiation* seen;
};

}  // namespace redis_lock::test

template <class Signature>
struct boost::asio::async_result<redis_lock::test::record_initiation, Signature> {
  template <class Initiation, class... Args>
  static void initiate(Initiation&& initiation, redis_lock::test::record_initiation token,
                       Args&&...) {
    using I = std::decay_t<Initiation>;
    // A lambda initiation has no executor_type: this fails to compile.
    static_assert(std::is_same_v<typename I::executor_type, boost::asio::any_io_executor>,
                  "the initiation names its executor type");
    static_assert(std::is_same_v<decltype(std::as_const(initiation).get_executor()),
                                 typename I::executor_type>);
    static_assert(noexcept(std::as_const(initiation).get_executor()));
    token.seen->type = std::type_index(typeid(I));
    token.seen->executor = std::as_const(initiation).get_executor();
  }
};
