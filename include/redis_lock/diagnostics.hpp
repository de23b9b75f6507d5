// SPDX-License-Identifier: MIT
// Diagnostics per operation: what an operation's error code does not say, reachable from the
// operation that failed. Bind a Diagnostics to any completion token; the operation writes it
// before its handler runs:
//
//   redis_lock::Diagnostics diag;
//   auto [ec, guard] = co_await locks.async_acquire(
//       "order:42", {.ttl = 5s},
//       redis_lock::bind_diagnostics(diag, asio::as_tuple(asio::use_awaitable)));
//   if (ec == redis_lock::error::invalid_argument) log(diag.message());  // the broken rule
//
// The error code is unchanged (`ec == error::x` comparisons keep working). What the observer's
// events carry as `detail` is what the operation's Diagnostics says.
#pragma once

#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace redis_lock {

/// What a failed operation's error code does not say: the text of the server's error reply
/// (or of a refused handshake), or the rule an argument broke. Written by the operation it
/// is bound to (bind_diagnostics): cleared when the operation starts, set before its handler
/// runs when there is something to say. It must outlive the operation, and nothing else may
/// touch it while the operation runs.
class Diagnostics {
 public:
  /// Empty when the operation succeeded or its error has nothing to add.
  std::string_view message() const noexcept { return message_; }
  /// Whether there is nothing to say (message() is empty).
  bool empty() const noexcept { return message_.empty(); }
  /// Empties the text (each operation it is bound to does so when it starts).
  void clear() noexcept { message_.clear(); }
  /// Sets the text (the library's; a test's).
  void assign(std::string_view text) { message_.assign(text.data(), text.size()); }

 private:
  std::string message_;
};

/// A completion token or handler with a Diagnostics bound to it (made by bind_diagnostics).
/// Every other association of the target (executor, allocator, cancellation slot) is its.
template <class Target>
class diagnostics_binder {
 public:
  /// Binds `diagnostics` to `target` (a completion token or handler).
  template <class T>
  diagnostics_binder(Diagnostics& diagnostics, T&& target)
      : diagnostics_(&diagnostics), target_(std::forward<T>(target)) {}

  /// The target token or handler.
  Target& get() & noexcept { return target_; }
  /// The target token or handler, moved out.
  Target&& get() && noexcept { return std::move(target_); }
  /// The target token or handler.
  const Target& get() const& noexcept { return target_; }
  /// The Diagnostics bound to the target.
  Diagnostics& diagnostics() const noexcept { return *diagnostics_; }

  /// Calls the target handler.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) && {
    return std::move(target_)(std::forward<Args>(args)...);
  }
  /// Calls the target handler.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) & {
    return target_(std::forward<Args>(args)...);
  }

 private:
  Diagnostics* diagnostics_;
  Target target_;
};

/// `token`, with `diagnostics` written by the operation it completes.
template <class Token>
diagnostics_binder<std::decay_t<Token>> bind_diagnostics(Diagnostics& diagnostics, Token&& token) {
  return {diagnostics, std::forward<Token>(token)};
}

/// The Diagnostics associated with a handler (Asio's associator protocol): the one
/// bind_diagnostics bound, found through Asio's own binders (bind_executor,
/// bind_cancellation_slot, ...) around it; else none.
template <class T, class Default = Diagnostics*>
struct associated_diagnostics {
  /// A pointer to the Diagnostics, or null.
  using type = Diagnostics*;
  /// The Diagnostics associated with `t`, or none.
  static type get(const T& t) noexcept {
    if constexpr (forwarded) {
      return boost::asio::associator<associated_diagnostics, T, Default>::get(t);
    } else {
      return nullptr;
    }
  }
  /// The Diagnostics associated with `t`, or `fallback`.
  static type get(const T& t, const Default& fallback) noexcept {
    if constexpr (forwarded) {
      return boost::asio::associator<associated_diagnostics, T, Default>::get(t, fallback);
    } else {
      return fallback;
    }
  }

 private:
  static constexpr bool forwarded = requires {
    typename boost::asio::associator<associated_diagnostics, T, Default>::type;
  };
};

/// \cond INTERNAL
template <class Target, class Default>
struct associated_diagnostics<diagnostics_binder<Target>, Default> {
  using type = Diagnostics*;
  static type get(const diagnostics_binder<Target>& b) noexcept { return &b.diagnostics(); }
  static type get(const diagnostics_binder<Target>& b, const Default& /*fallback*/) noexcept {
    return &b.diagnostics();
  }
};

/// \endcond

namespace detail {

/// The Diagnostics bound to `handler`, or none.
template <class Handler>
Diagnostics* diagnostics_of(const Handler& handler) noexcept {
  return associated_diagnostics<Handler>::get(handler);
}

/// The Diagnostics bound to `handler` of an operation that starts now, emptied; or none.
template <class Handler>
Diagnostics* cleared_diagnostics_of(const Handler& handler) noexcept {
  Diagnostics* diagnostics = diagnostics_of(handler);
  if (diagnostics) diagnostics->clear();
  return diagnostics;
}

/// The target's async_result's return_type, where it has one (Asio's binders around ours
/// ask for it; `deferred`'s has none).
template <class Result, class = void>
struct diagnostics_return_type {};
template <class Result>
struct diagnostics_return_type<Result, std::void_t<typename Result::return_type>> {
  using return_type = typename Result::return_type;
};

/// Wraps an initiation: the handler it is given is bound to the same Diagnostics again.
template <class Initiation>
struct diagnostics_initiation {
  Diagnostics* diagnostics;
  Initiation initiation;

  template <class Handler, class... Args>
  void operator()(Handler&& handler, Args&&... args) && {
    std::move(initiation)(
        diagnostics_binder<std::decay_t<Handler>>(*diagnostics, std::forward<Handler>(handler)),
        std::forward<Args>(args)...);
  }
};

}  // namespace detail

}  // namespace redis_lock

/// \cond INTERNAL
namespace boost::asio {

template <template <class, class> class Associator, class Target, class DefaultCandidate>
struct associator<Associator, redis_lock::diagnostics_binder<Target>, DefaultCandidate> {
  using type = typename Associator<Target, DefaultCandidate>::type;
  static type get(const redis_lock::diagnostics_binder<Target>& b) noexcept {
    return Associator<Target, DefaultCandidate>::get(b.get());
  }
  static auto get(const redis_lock::diagnostics_binder<Target>& b,
                  const DefaultCandidate& c) noexcept {
    return Associator<Target, DefaultCandidate>::get(b.get(), c);
  }
};

template <class Token, class... Signatures>
class async_result<redis_lock::diagnostics_binder<Token>, Signatures...>
    : public redis_lock::detail::diagnostics_return_type<async_result<Token, Signatures...>> {
 public:
  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args) {
    return async_initiate<Token, Signatures...>(
        redis_lock::detail::diagnostics_initiation<std::decay_t<Initiation>>{
            &token.diagnostics(), std::forward<Initiation>(initiation)},
        token.get(), std::forward<Args>(args)...);
  }
};

}  // namespace boost::asio
/// \endcond
