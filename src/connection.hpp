// SPDX-License-Identifier: MIT
// Layer 2 (connection): one socket to one server with automatic pipelining, FIFO reply
// matching, connect and per-command deadlines, the handshake, and lazy reconnection.
#pragma once

#include "connect_fsm.hpp"
#include "library_use.hpp"
#include "pipeline.hpp"
#include "resp.hpp"

#include <redis_lock/config.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace boost::asio::ssl {
class context;
}

namespace redis_lock::detail {

/// All member functions must be called on `strand()`; callbacks are invoked there too.
///
/// Invariants (the queue's and each link's in-flight commands are `pipeline_`'s, which keeps
/// their own: pipeline.hpp):
/// - User commands are written only on `link_` in state `ready` (after the handshake).
/// - A command that misses its deadline completes with `error::timeout` at once. Its link is
///   stuck behind it, so the link stops taking commands and *drains*: it stays open for a
///   grace period so that late replies still reach the commands' `late` handlers, in order.
///   (A lock released on a fresh connection could overtake the acquire still queued on the
///   stuck one; on the same connection it cannot.)
/// - Each callback runs exactly once; `late` runs at most once, only after a timeout.
/// - Nothing is pending on the executor when no command is queued, in flight or draining.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Strand = boost::asio::strand<boost::asio::any_io_executor>;
  using Callback = Pipeline::Callback;
  using Clock = std::chrono::steady_clock;

  /// `tls`: the context of a rediss:// configuration (see make_tls_context), else null.
  Connection(Strand strand, ConnectionConfig config, std::string client_name,
             std::shared_ptr<boost::asio::ssl::context> tls = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const Strand& strand() const noexcept { return strand_; }

  using PushHandler = std::function<void(const Reply&)>;
  using LinkDownHandler = std::function<void()>;
  /// Subscriber mode (RESP2 pub/sub): replies shaped ["message", channel, payload] go to
  /// `on_push`; `on_link_down` hears that a link (and so its subscriptions) is gone.
  void set_subscriber(PushHandler on_push, LinkDownHandler on_link_down);
  /// While on, a read stays armed even with no command in flight (to receive pushes).
  void keep_reading(bool on);
  /// Closes the link if it is up, or being connected, and has nothing to do (nothing
  /// queued, in flight or draining): the server drops its subscriptions and its memory for
  /// it, the link-down handler is told, and the next command connects again. False (nothing
  /// done) otherwise.
  bool close_if_idle();

  /// Finds the server before each connect (Sentinel): calls back with its address or an
  /// error, on the strand.
  using LocateDone = std::function<void(boost::system::error_code, Endpoint)>;
  using Locator = std::function<void(LocateDone)>;
  /// Locates the server before each connect, confirms with ROLE that it is a master, and
  /// drops the link when a command finds it demoted (READONLY), so the next command
  /// locates the master again.
  void set_locator(Locator locator) { locator_ = std::move(locator); }
  /// Script bodies to `SCRIPT LOAD` in every handshake, so that no user command on a link
  /// meets `NOSCRIPT`: the fallback (resending the body) puts that command behind commands
  /// queued after it. A server that refuses (no `script|load` in the user's ACL) leaves
  /// the fallback in charge. The bodies must outlive the connection.
  void set_preload(std::vector<std::string_view> scripts) { preload_ = std::move(scripts); }
  /// The scripts as a Functions library, with a function of it that answers 1 (see
  /// redis_lock_scripts.hpp). Each handshake calls the probe instead of loading the
  /// preload: where it answers, the link calls our scripts with FCALL (an `EVALSHA` of one
  /// of them is sent as the `FCALL` of its function: script_call.hpp). Where it does not,
  /// `FUNCTION LOAD` and the preload go ahead of the queued commands, which stay EVALSHA;
  /// once the load succeeds, the commands after it go with FCALL. The views must outlive
  /// the connection.
  void set_functions(std::string_view library, std::string_view probe) {
    function_library_ = library;
    function_probe_ = probe;
    library_use_.set_library(!library.empty());
  }

  /// A lock server (not a sentinel): each handshake asks `HELLO 2` and `INFO memory`, and
  /// refuses a server older than the library needs or one that evicts keys
  /// (Handshake::Settings::check_version).
  void check_server_version(bool on) noexcept { check_version_ = on; }
  /// ManagerOptions::accept_evicting_server: a lock server that evicts keys is reported
  /// (the notice handler), not refused.
  void accept_evicting_server(bool on) noexcept { accept_evicting_ = on; }
  /// Hears why a handshake was refused, in words (the server's error text, or the version
  /// found and needed), on the strand, before the queued commands fail.
  using RefusalHandler = std::function<void(std::string_view)>;
  void set_refusal_handler(RefusalHandler on_refused) { on_refused_ = std::move(on_refused); }
  /// Hears what a handshake that went on found worth saying (Handshake::notice), on the
  /// strand, when the link is ready and before any queued command is written on it. Each
  /// handshake's finding is reported (a reconnect's too): the handler decides what was said.
  using NoticeHandler = std::function<void(const ServerNotice&)>;
  void set_notice_handler(NoticeHandler on_notice) { on_notice_ = std::move(on_notice); }
  /// How large the arrays in this connection's replies may be (from its next link on).
  /// The default suits lock commands; the connection that asks CLUSTER SLOTS needs more.
  void set_reply_limits(ReplyLimits limits) noexcept { reply_limits_ = limits; }
  /// With a locator: the server the current link goes to (empty while none is connected).
  std::optional<Endpoint> located() const;
  /// Leaves the current server: its in-flight commands fail with connection_lost; queued
  /// and later ones go to a newly located server.
  void leave_server();

  /// Queues one command (encoded straight into the write queue); `callback` gets its reply
  /// or an error.
  /// If it times out after being written, `late` (optional) later gets the reply, or
  /// `connection_lost` if the reply never comes within the drain grace period.
  /// `extra_time` lengthens this command's deadline (a WAIT that may block the server's
  /// answer for its own timeout).
  void execute(std::span<const std::string_view> command, Callback callback,
               std::shared_ptr<LateReplies> late = nullptr,
               std::chrono::milliseconds extra_time = std::chrono::milliseconds(0));

  /// Writes `command` on the current link at once, without Asio (the context is shutting
  /// down): only on a plain link that is ready and has no write under way, and only what
  /// the socket takes without blocking. Its reply is never read. True when all of it went.
  bool write_now(std::span<const std::string_view> command) noexcept;

  /// The execution context is shutting down: drop sockets and timers without invoking
  /// callbacks (Asio destroys pending handlers on shutdown; we do the same).
  void shutdown() noexcept;

 private:
  struct Link;

  /// Does what the connection's machine decided (ConnectFsm's table): with the current link
  /// first, then next; the link's users hear it went; what failed is told last.
  void apply(const ConnectFsm::Action& act);
  /// The action's `next`.
  void take_next(const ConnectFsm::Action& act);
  /// The queue as the machine's events take it.
  ConnectFsm::Queue queue() const noexcept;
  /// Arms the backoff's timer for `until`; its end is the machine's backoff_over.
  void wait_backoff(Clock::time_point until);
  void connect_now();
  void resolve_and_connect(const std::shared_ptr<Link>& link);
  void try_endpoint(const std::shared_ptr<Link>& link, std::size_t index);
  void start_tls(const std::shared_ptr<Link>& link);
  void start_handshake(const std::shared_ptr<Link>& link);
  /// The handshake waits for `step`'s reply on `link`.
  void expect_handshake_reply(const std::shared_ptr<Link>& link, Handshake::Step step);
  /// The handshake's probe found no library: FUNCTION LOAD goes as one more step.
  void load_library_first(const std::shared_ptr<Link>& link);
  /// Does what library_use_ decided: the queue restated when it changed how commands call
  /// our scripts (it did so before with `functions`), `plan`'s loads ahead of the queue.
  void follow(bool functions, const LibraryUse::Plan& plan);
  /// The answer to the FUNCTION LOAD that follow() sent on `link` (null: gone).
  void on_function_load(const std::shared_ptr<Link>& link, const Reply& reply);
  /// An error reply on a link that calls the library: one that says the library is gone
  /// or may not be called turns the link to EVALSHA (LibraryUse::on_error).
  void lost_functions(std::string_view error);
  void write_link(const std::shared_ptr<Link>& link);
  void on_handshake_reply(const std::shared_ptr<Link>& link, Handshake::Step step,
                          boost::system::error_code ec, const Reply& reply);
  void flush();
  bool idle_link_is_dead();
  void start_read(const std::shared_ptr<Link>& link);
  void on_read(const std::shared_ptr<Link>& link, boost::system::error_code ec, std::size_t n);
  void on_write(const std::shared_ptr<Link>& link, boost::system::error_code ec);
  /// What an I/O error on the current link says: connection_lost, or tls_handshake_failed
  /// for a TLS link's alert or drop (ConnectFsm::link_failed reads it by the link's state).
  boost::system::error_code link_error(const Link& link, boost::system::error_code ec) const;
  /// The current link failed (ConnectFsm::link_failed): a ready one's in-flight commands
  /// fail with `ec`, queued ones reconnect; during its connect, a connect failure.
  void drop_link(boost::system::error_code ec);
  /// Closes a draining link, telling late handlers that no reply will come.
  void close_drained(const std::shared_ptr<Link>& link, boost::system::error_code ec);
  void close_link() noexcept;
  void notify_link_down();
  bool is_current_or_draining(const std::shared_ptr<Link>& link) const noexcept;
  /// Connecting failed (ConnectFsm::connect_failed): fails every queued command with `ec`.
  void connect_failed(boost::system::error_code ec);
  /// The handshake is answered: its finding, if any, goes to the notice handler.
  void report_finding() noexcept;
  /// The server, as this connection knows it: "host:port", "[v6]:port" or the socket's path.
  std::string address() const;
  void arm_timer();
  void on_timer();
  void cancel_timer_if_idle();
  bool has_work() const noexcept;
  /// Binds an I/O completion to the strand. Sockets and timers use the plain executor (small
  /// enough to be stored in place), so per-operation work tracking copies no strand.
  template <class Fn>
  auto on_strand(Fn&& fn) const {
    return boost::asio::bind_executor(strand_, std::forward<Fn>(fn));
  }

  Strand strand_;
  ConnectionConfig config_;
  std::string client_name_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  ConnectFsm fsm_;
  std::shared_ptr<Link> link_;
  Pipeline pipeline_;                            // what is queued, in flight and draining
  std::vector<std::shared_ptr<Link>> draining_;  // their sockets
  std::size_t handshake_left_ = 0;
  std::unique_ptr<boost::asio::steady_timer> timer_;  // earliest command deadline
  bool timer_armed_ = false;
  Clock::time_point timer_at_{};
  std::unique_ptr<boost::asio::steady_timer> connect_timer_;  // connect deadline / backoff
  Locator locator_;
  std::vector<std::string_view> preload_;
  std::string_view function_library_;
  std::string_view function_probe_;
  LibraryUse library_use_;  // FCALL or EVALSHA, and what to load
  bool check_version_ = false;
  bool accept_evicting_ = false;
  RefusalHandler on_refused_;
  NoticeHandler on_notice_;
  std::optional<Handshake::Notice> finding_;  // the current handshake's, until it is ready
  ReplyLimits reply_limits_ = ReplyLimits::commands();
  PushHandler on_push_;
  LinkDownHandler on_link_down_;
  bool keep_reading_ = false;
  bool idle_check_posted_ = false;
  bool shut_down_ = false;
};

}  // namespace redis_lock::detail
