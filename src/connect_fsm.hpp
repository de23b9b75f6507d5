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
/// resolving, TCP, TLS), in its handshake, ready for commands.
///
/// | event                         | from                 | to         | action            |
/// |-------------------------------|----------------------|------------|-------------------|
/// | `need_link` (commands queued) | closed, no backoff   | connecting | connect           |
/// |                               | closed, in backoff   | backoff    | wait until (1)    |
/// | `backoff_over`                | backoff, queued      | connecting | connect           |
/// |                               | backoff, nothing     | closed     | none              |
/// | `connected` (TCP/TLS up)      | connecting           | handshake  | (send handshake)  |
/// | `ready` (handshake answered)  | handshake            | ready      | backoff reset     |
/// | `failed` (connect, handshake) | any                  | closed     | backoff doubles (2)|
/// | `lost` (a ready link dropped) | ready                | closed     | next connect now  |
/// | `left` (drain, idle, gone)    | any                  | closed     | none              |
///
/// (1) The backoff's end, but never past half the oldest queued command's time: a server that
/// is back (a restarted Redlock master) is tried before that command times out, instead of
/// the backoff counting as "no answer". One attempt per command timeout at most still keeps
/// a dead server from being hammered.
/// (2) Each wait is drawn in (cap/2, cap] (equal jitter): 25 ms doubling up to 1 s.
class ConnectFsm {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { closed, backoff, connecting, handshake, ready };
  struct Action {
    enum class Kind { none, connect, wait };
    Kind kind = Kind::none;
    Clock::time_point until{};  ///< with `wait`
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
  /// The earliest time of the next connect (before it: back off).
  Clock::time_point next_connect_at() const noexcept { return next_connect_at_; }

  /// Commands are queued and no link is up (state closed). `oldest_deadline`: the deadline
  /// of the oldest queued command.
  Action need_link(Clock::time_point now, Clock::time_point oldest_deadline) noexcept;
  /// The backoff's timer fired; `queued`: commands still wait for a link.
  Action backoff_over(bool queued) noexcept;
  /// The link's transport is up (TCP, then TLS): the handshake goes out.
  void connected() noexcept { state_ = State::handshake; }
  /// Every handshake reply was good: commands may go.
  void ready() noexcept;
  /// Connecting or the handshake failed: back off before the next try.
  void failed(Clock::time_point now) noexcept;
  /// A ready link dropped (or was found dead while idle): the next connect goes at once.
  void lost() noexcept;
  /// The link was given up without a failure of its own (it drains a timeout, nothing is
  /// left to connect for): closed, the backoff as it was.
  void left() noexcept { state_ = State::closed; }

 private:
  Action connect() noexcept;

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
