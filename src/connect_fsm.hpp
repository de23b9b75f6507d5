// SPDX-License-Identifier: MIT
// Layer 2 (connection), no I/O: a connection's decisions, apart from its sockets. When to
// connect and how long to back off after a failure (ConnectFsm), what a handshake says and
// what each of its replies means (Handshake), and how long a stuck link drains. Connection
// is the driver: it does the I/O and feeds the outcomes back. tests/unit/connect_fsm_test.cpp
// runs them through tables with a fake clock.
#pragma once

#include "backoff.hpp"
#include "resp.hpp"

#include <redis_lock/observer.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail {

/// The life of a connection's link: closed, waiting out a backoff, connecting (locating,
/// resolving, TCP, TLS), in its handshake, ready for commands. Every event returns what the
/// driver does (Action): first with the current link, then next; the driver keeps no state
/// of its own about the link's life. `q` is the queue at the event: whether commands wait
/// for a link (written on none yet) and the oldest one's deadline.
///
// clang-format off
/// | event                                   | from                   | to         | link                 | next                 |
/// |-----------------------------------------|------------------------|------------|----------------------|----------------------|
/// | `queued` (a command is queued)          | closed, no backoff     | connecting |                      | connect              |
/// |                                         | closed, in backoff     | backoff    |                      | wait (1)             |
/// |                                         | ready                  | ready      |                      | write                |
/// |                                         | backoff, connecting, handshake | as it was |               |                      |
/// | `backoff_over` (its timer fired)        | backoff, q waiting     | connecting |                      | connect              |
/// |                                         | backoff, nothing       | closed     |                      |                      |
/// | `transport_up` (TCP/TLS up)             | connecting             | handshake  |                      | handshake            |
/// | `handshake_done` (all answered)         | handshake              | ready      |                      | write (3)            |
/// | `connect_failed(e)` (locate, resolve, TCP, TLS, a refused step) | connecting, handshake | closed (2) | fail e |            |
/// | `connect_deadline`                      | connecting, handshake  | closed (2) | fail connect_timeout |                      |
/// | `link_failed(e)` (I/O, protocol, READONLY) | ready               | closed     | drop e (4)           | connect if q waiting |
/// |                                         | connecting, handshake  | closed (2) | fail (5)             |                      |
/// | `late` (a written command is late)      | ready                  | closed     | drain                | connect if q waiting |
/// | `idle(has_work, busy)`                  | ready, no work         | closed     | close                |                      |
/// |                                         | connecting, handshake, not busy | closed | close             |                      |
/// | `nothing_waiting` (the queue timed out) | backoff                | closed     |                      | stop_wait            |
/// | `leave` (the address moved on)          | ready                  | closed     | drop connection_lost | connect if q waiting |
// clang-format on
///
/// Anything else leaves the state as it was and does nothing (a late timer, a stale link's
/// completion). `drop`: the link is closed and what it had in flight fails with the error;
/// the next connect may go at once (a restarted server, an idle close). `fail`: the link is
/// closed and every queued command fails with the error. `drain`: the link stays open apart,
/// for late replies, for drain_grace(). `close`: closed, nothing fails.
///
/// (1) The backoff's end, but never past half the oldest queued command's time: a server that
/// is back (a restarted Redlock master) is tried before that command times out, instead of
/// the backoff counting as "no answer". One attempt per command timeout at most still keeps
/// a dead server from being hammered.
/// (2) The backoff doubles. Each wait is drawn in (cap/2, cap] (equal jitter): 25 ms doubling
/// up to 1 s.
/// (3) And the backoff starts again at its first step.
/// (4) `e` as the link saw it, but a TLS-shaped failure (tls_handshake_failed) of a link past
/// its handshake is connection_lost: the server's alert came late, not at our handshake.
/// (5) tls_handshake_failed where `e` is (a TLS server that refused our certificate drops us
/// during the handshake's commands), else connect_failed.
class ConnectFsm {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { closed, backoff, connecting, handshake, ready };

  /// The queue as an event finds it.
  struct Queue {
    bool waiting = false;                                          ///< commands wait for a link
    Clock::time_point oldest_deadline = Clock::time_point::max();  ///< the oldest one's
  };

  /// What the driver does after an event: first `link`, then `next`.
  struct Action {
    enum class Link {
      keep,   ///< as it is
      drop,   ///< close it; what it had in flight fails with `error`
      fail,   ///< close it; every queued command fails with `error`
      drain,  ///< keep it apart for late replies; its late commands fail with timeout
      close,  ///< close it; nothing fails
    };
    enum class Next {
      none,
      connect,    ///< open a new link
      wait,       ///< arm the backoff's timer for `until`, then backoff_over
      handshake,  ///< send the handshake on the new link
      write,      ///< write what is queued
      stop_wait,  ///< cancel the backoff's timer
    };
    Link link = Link::keep;
    Next next = Next::none;
    boost::system::error_code error{};  ///< with drop and fail
    Clock::time_point until{};          ///< with wait
    /// The current link went (its users hear of it: subscriptions, the router).
    bool link_down() const noexcept { return link != Link::keep; }
  };
  /// The first wait after a failure, doubling up to the last.
  static constexpr std::chrono::milliseconds backoff_first{25};
  static constexpr std::chrono::milliseconds backoff_max{1000};

  /// `draw`: the jitter of each backoff below its cap (equal_jitter: the waits after a
  /// fleet's common failure spread out instead of coming back in waves).
  explicit ConnectFsm(std::chrono::milliseconds command_timeout,
                      JitterDraw draw = equal_jitter) noexcept
      : command_timeout_(command_timeout), draw_(draw) {}

  State state() const noexcept { return state_; }
  /// Commands may be written on the current link.
  bool ready() const noexcept { return state_ == State::ready; }
  /// The current link's handshake is out: its replies are awaited.
  bool in_handshake() const noexcept { return state_ == State::handshake; }
  /// The earliest time of the next connect (before it: back off).
  Clock::time_point next_connect_at() const noexcept { return next_connect_at_; }

  Action queued(Clock::time_point now, Queue q) noexcept;
  Action backoff_over(Queue q) noexcept;
  Action transport_up() noexcept;
  Action handshake_done() noexcept;
  Action connect_failed(Clock::time_point now, boost::system::error_code e) noexcept;
  Action connect_deadline(Clock::time_point now) noexcept;
  Action link_failed(Clock::time_point now, boost::system::error_code e, Queue q) noexcept;
  Action late(Clock::time_point now, Queue q) noexcept;
  /// `has_work`: commands queued, in flight or draining; `busy`: commands wait for a link
  /// or a link drains.
  Action idle(bool has_work, bool busy) noexcept;
  Action nothing_waiting() noexcept;
  Action leave(Clock::time_point now, Queue q) noexcept;

 private:
  /// Closed now: the next connect (at once, or after the backoff), if commands wait.
  Action reconnect(Clock::time_point now, Queue q, Action act) noexcept;

  std::chrono::milliseconds command_timeout_;
  JitterDraw draw_;
  State state_ = State::closed;
  Backoff backoff_{backoff_first, backoff_max};
  Clock::time_point next_connect_at_{};
};

/// How long a link whose command timed out stays open for late replies: ten command
/// timeouts, at least 2 s.
std::chrono::milliseconds drain_grace(std::chrono::milliseconds command_timeout) noexcept;

/// The oldest lock server the library runs on: 7.0, for sharded pub/sub (a Cluster's
/// waiters) and because nothing older is tested (Redis 7.0.15, Valkey 8.0.1 are).
inline constexpr int min_server_major = 7;
inline constexpr int min_server_minor = 0;

/// What a connection says before any user command: AUTH, HELLO, INFO memory, SELECT, CLIENT
/// SETNAME, ROLE, an FCALL of the scripts' library's probe or SCRIPT LOAD (or PING when there
/// is nothing to say), and what each answer means.
class Handshake {
 public:
  enum class Step {
    auth,
    hello,
    select,
    setname,
    ping,
    role,
    script_load,
    info_memory,
    function_load,
    function_probe
  };
  struct Settings {
    std::string_view username = {};
    std::string_view password = {};
    int database = 0;
    std::string_view client_name = {};
    bool confirm_master = false;  ///< the address came from a sentinel: ask ROLE
    std::span<const std::string_view> preload = {};
    /// A function of the scripts' Functions library that only answers 1: called in the
    /// handshake (`FCALL <probe> 0`) instead of loading `preload`. Where it answers, the
    /// link calls the scripts with `FCALL`; where it does not, the connection loads the
    /// library and the scripts ahead of its first commands (Connection::set_functions).
    std::string_view function_probe = {};
    /// A lock server (not a sentinel): `HELLO 2` learns its name and version, and one older
    /// than min_server_major.min_server_minor is refused (error::server_unsupported);
    /// `INFO memory` learns whether it evicts keys, and one that does is refused
    /// (error::server_evicts) unless `accept_evicting`.
    bool check_version = false;
  };

  /// What a lock server's handshake found that the connect goes on with, but that its
  /// user should hear of (the connection reports it as a ServerNotice once it is ready).
  struct Notice {
    ServerNoticeKind kind;
    std::string text;
  };

  /// Appends the handshake's commands (RESP) to `out`, one step per command, in order.
  static std::vector<Step> plan(const Settings& settings, std::string& out);
  /// The `SCRIPT LOAD`s of `preload`, for EVALSHA (also after a handshake whose probe found
  /// no library).
  static std::vector<Step> plan_scripts(std::span<const std::string_view> preload,
                                        std::string& out);
  /// Whether the reply to `function_probe` (1) or to a `FUNCTION LOAD` of the library (its
  /// name, or "already exists") says the library is there. Any other answer is no failure
  /// (check lets it through): the link calls the scripts with EVALSHA.
  static bool functions_ready(Step step, const Reply& reply);
  /// One step's reply: the error to fail the connect with, or none to go on. A refused
  /// CLIENT SETNAME, SCRIPT LOAD, FUNCTION LOAD or probe is no failure: a user without those rights
  /// may still take locks. `accept_evicting` (ManagerOptions::accept_evicting_server): an `INFO
  /// memory` that says the server evicts keys is no failure either (notice() reports it).
  static std::optional<boost::system::error_code> check(Step step, const Reply& reply,
                                                        bool accept_evicting = false);
  /// Why `check` refused a reply, in words for LockManager::last_server_error(): the
  /// server's own error text, for HELLO the version found and the version needed, for
  /// INFO memory the policy and maxmemory found and what would accept them.
  static std::string refusal_text(Step step, const Reply& reply);
  /// What a reply `check` let through says that is worth a notice: for INFO memory, a
  /// server that evicts keys (accepted), or one that did not say whether it does. None for
  /// every other step and reply.
  static std::optional<Notice> notice(Step step, const Reply& reply);
};

/// What a lock server's `INFO memory` says of evicting keys. It evicts when `maxmemory` is
/// above 0 and `maxmemory_policy` is not `noeviction`: every `volatile-*` policy evicts keys
/// with a ttl first (leases and queue places all have one), every `allkeys-*` policy any
/// key. With maxmemory 0 nothing is evicted, whatever the policy (a 32-bit server, which
/// sets a limit of its own, shows it in `maxmemory`).
struct Eviction {
  enum class Verdict { never, evicts, unknown };
  Verdict verdict = Verdict::unknown;
  std::string policy;  ///< maxmemory_policy as the server names it
  unsigned long long maxmemory = 0;
  std::string missing;  ///< unknown: what the reply lacks
};
Eviction read_eviction(const Reply& reply);

}  // namespace redis_lock::detail
