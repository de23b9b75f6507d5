// SPDX-License-Identifier: MIT
// Delivering a result to a user's completion handler on the handler's associated executor.
#pragma once

#include <redis_lock/diagnostics.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <string_view>
#include <utility>

namespace redis_lock::detail {

/// Runs `handler(args...)` on the handler's associated executor (default: `io`).
/// `Defer::yes` for results known inside the initiating call, so that a handler never runs
/// before the initiating function returns; `Defer::no` after I/O, to skip a scheduler hop.
/// (Boost 1.81 cannot post onto an any_completion_executor directly, hence bind_executor.)
enum class Defer { no, yes };

/// Invokes `handler` once its operation has ended: first takes the operation's handler out
/// of the caller's cancellation slot, as Asio's own operations do, so that nothing of the
/// operation outlives it there (a signal destroyed after the io_context destroyed a handler
/// that still held its strand; a later emit reached a finished operation). Called on the
/// handler's executor, where Asio lets the caller emit: never concurrently with an emit.
template <class Handler, class... Args>
void complete(Handler& handler, Args&&... args) {
  if (auto slot = boost::asio::get_associated_cancellation_slot(handler); slot.is_connected()) {
    slot.clear();
  }
  std::move(handler)(std::forward<Args>(args)...);
}

/// Tells an operation's Diagnostics (if one is bound to its handler) what its error `ec`
/// does not say: the rule broken, the server's text. Before the handler is delivered.
inline void tell(Diagnostics* diagnostics, boost::system::error_code ec, std::string_view text) {
  if (diagnostics != nullptr && ec && !text.empty()) diagnostics->assign(text);
}

template <class Handler, class... Args>
void deliver(const boost::asio::any_io_executor& io, Defer defer, Handler handler, Args&&... args) {
  if (defer == Defer::yes) {
    // Onto `io` first, and from there (no longer inside the initiating call) to the
    // handler's executor: the handler's associated executor is made, copied and destroyed
    // on `io`'s thread only. (Made here, on the caller's thread, its shared target was freed
    // by whichever thread dropped it last: a reference count that ThreadSanitizer, which
    // does not see Asio's fence, reported as a race.)
    boost::asio::post(io, [io, h = std::move(handler), ... a = std::forward<Args>(args)]() mutable {
      deliver(io, Defer::no, std::move(h), std::move(a)...);
    });
    return;
  }
  auto ex = boost::asio::get_associated_executor(handler, io);
  // Fast path, same semantics as dispatch: the handler's executor is a plain io_context
  // executor and this thread is running that io_context, so it may run right here. (Asio's
  // generic dispatch would wrap the type-erased executor for work tracking, which allocated
  // twice per completion in the throughput benchmark.)
  using io_executor = boost::asio::io_context::executor_type;
  if (const auto* target = ex.template target<io_executor>();
      target != nullptr && target->running_in_this_thread()) {
    complete(handler, std::forward<Args>(args)...);
    return;
  }
  boost::asio::dispatch(
      io, boost::asio::bind_executor(
              std::move(ex), [h = std::move(handler), ... a = std::forward<Args>(args)]() mutable {
                complete(h, std::move(a)...);
              }));
}

}  // namespace redis_lock::detail
