// SPDX-License-Identifier: MIT
// Implementation detail of <redis_lock/lock.hpp> and <redis_lock/election.hpp>, not API: the
// call operators of the initiations declared in <redis_lock/detail/initiations.hpp>, which
// need the complete LockGuard. Each completes an operation that has nothing to work on here,
// where the handler's type is known, and hands any other to the compiled library as a
// type-erased handler.
#pragma once

#include <redis_lock/detail/handlers.hpp>
#include <redis_lock/detail/initiations.hpp>
#include <redis_lock/diagnostics.hpp>
#include <redis_lock/error.hpp>
#include <redis_lock/lock.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace redis_lock::detail {

template <class Params>
template <class Handler>
void initiate<Params>::operator()(Handler handler, std::shared_ptr<LockService> service,
                                  Params params) const {
  // The Diagnostics bound to the handler, if any: cleared now, written by the op.
  Diagnostics* diagnostics = cleared_diagnostics_of(handler);
  if constexpr (requires { params.diagnostics; }) params.diagnostics = diagnostics;
  bool startable = service != nullptr;
  if constexpr (requires { params.startable(); }) startable = startable && params.startable();
  if (!startable) {
    boost::system::error_code ec;
    if constexpr (Params::unstarted == Unstarted::invalid_argument) ec = error::invalid_argument;
    if constexpr (Params::unstarted == Unstarted::aborted) {
      ec = boost::asio::error::operation_aborted;
    }
    if constexpr (std::is_void_v<typename Params::Result>) {
      return complete_without_lock(io_, alive_, std::move(handler), ec);
    } else {
      return complete_without_lock(io_, alive_, std::move(handler), ec, typename Params::Result{});
    }
  }
  start_op(engine_of(*service), std::move(params),
           typename Params::Handler(slot_clearing(std::move(handler))));
}

template <class Handler>
void initiate_release::operator()(Handler handler, LockGuard guard) const {
  Diagnostics* diagnostics = cleared_diagnostics_of(handler);
  if (!guard.owns_lock()) {
    return complete_without_lock(io_, alive_, std::move(handler), boost::system::error_code{},
                                 false);
  }
  LockGuard::release_impl(std::move(guard), BoolHandler(slot_clearing(std::move(handler))),
                          diagnostics);
}

}  // namespace redis_lock::detail
