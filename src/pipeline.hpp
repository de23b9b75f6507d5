// SPDX-License-Identifier: MIT
// Layer 2 (connection), no I/O: a connection's pipeline, apart from its sockets. Commands
// queued and not written yet (their bytes, in order), the commands each link has written
// and awaits replies for (oldest first), links that drain after a timeout, and every
// deadline among them. Connection is the driver: it writes what a batch holds, feeds each
// reply and each timer back, and completes what comes out. tests/unit/pipeline_test.cpp runs
// it through tables with a fake clock.
#pragma once

#include "resp.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail {

/// Receives the reply of a command that was already completed with `error::timeout`, or
/// `connection_lost` when that reply can no longer come.
class LateReplies {
 public:
  virtual void on_late_reply(boost::system::error_code ec, const Reply& reply) = 0;

 protected:
  ~LateReplies() = default;
};

/// | event                          | effect                                                  |
/// |--------------------------------|---------------------------------------------------------|
/// | `push` (a command)             | its bytes appended to the queue's, its deadline kept    |
/// | `push_front` (loads)           | ahead of everything queued, in order, no deadline       |
/// | `restate` (FCALL <-> EVALSHA)  | the queue's script calls re-encoded, sizes kept in step |
/// | `open` (a new link)            | it becomes the current link, nothing in flight          |
/// | `expect` (a handshake step)    | awaited on the current link, no deadline of its own     |
/// | `take_batch`                   | the queue moves to the current link's in-flight         |
/// | `pop` (a reply on a link)      | its oldest in-flight command; none: nobody asked        |
/// | `drain_current` (a timeout)    | the link drains; its commands' callbacks out, late kept |
/// | `close_current` / `_draining`  | the link's in-flight commands out, to fail              |
/// | `take_queued` (connect failed) | every queued command out, to fail                       |
/// | `take_expired` (timer)         | queued commands past their deadline out, in order       |
/// | `current_late` / `drained`     | the current link is stuck / drains past its grace       |
///
/// Invariants: the queue's bytes are the RESP of its commands, in order, none written (safe
/// to send on any link); a link's next reply belongs to the front of its in-flight; a
/// command's callback runs at most once (empty once completed with a timeout), its `late`
/// handler only after that.
class Pipeline {
 public:
  using Clock = std::chrono::steady_clock;
  using Callback = boost::asio::any_completion_handler<void(boost::system::error_code, Reply)>;
  /// A link of the connection, from open(): never 0, never reused.
  using LinkId = std::uint64_t;
  static constexpr Clock::time_point never = Clock::time_point::max();

  struct Command {
    Callback callback;  ///< empty once completed with a timeout
    std::shared_ptr<LateReplies> late;
    Clock::time_point deadline = never;  ///< `never`: a handshake's own step
    std::size_t bytes = 0;               ///< the size of its RESP while queued
  };
  using Commands = std::deque<Command>;

  // -- The queue: commands not written yet.

  /// Appends `command`, encoded for FCALL (`functions`) or EVALSHA (script_call.hpp).
  void push(std::span<const std::string_view> command, bool functions, Callback callback,
            std::shared_ptr<LateReplies> late, Clock::time_point deadline);
  /// Puts encoded loads (SCRIPT LOAD, FUNCTION LOAD: no deadline) ahead of the queue, and
  /// ahead of loads put there before: `bytes` holds them in order, each command's `bytes`
  /// its own size. They go with the next batch; none of the queue's deadlines waits for them.
  void push_front(std::string_view bytes, std::vector<Command> commands);
  /// Re-encodes the queue's script calls for FCALL (`functions`) or EVALSHA.
  void restate(bool functions);
  /// Anything to write: commands or loads.
  bool queued() const noexcept { return !queue_.empty() || !loads_.empty(); }
  /// Commands wait to be written (loads alone are worth no connect: they go with the next
  /// command's).
  bool waiting() const noexcept { return !queue_.empty(); }
  /// The oldest queued command's deadline (`never` with none).
  Clock::time_point oldest_deadline() const noexcept;
  /// Everything queued, loads first (a connect failed): to complete with its error.
  Commands take_queued();
  /// The queued commands whose deadline is at or before `now`, oldest first (the loads
  /// ahead stay).
  Commands take_expired(Clock::time_point now);

  // -- Links.

  /// A new current link (the previous one must have been closed or put to drain).
  LinkId open();
  /// The current link, or 0.
  LinkId current() const noexcept { return current_.id; }
  /// The current link or one that drains.
  bool live(LinkId link) const noexcept;
  /// Commands await replies on `link`.
  bool busy(LinkId link) const noexcept;
  /// When the current link's last awaited reply came (the clock's epoch before any).
  Clock::time_point idle_since() const noexcept { return current_.idle_since; }
  /// The current link awaits the reply of what it wrote itself (a handshake step).
  void expect(Command command);
  /// The queue goes to the current link: its bytes are swapped into `out` (which must be
  /// empty; it gives its capacity to the next queue). False with nothing queued.
  bool take_batch(std::string& out);
  /// A reply came on `link` at `now`: the command it answers; none when nobody asked.
  std::optional<Command> pop(LinkId link, Clock::time_point now);
  /// The current link is gone: its in-flight commands, to fail.
  Commands close_current();
  /// The current link is gone with what it awaited, unanswered (a connect given up).
  void discard_current() noexcept;
  /// The current link's oldest command timed out: the link drains until `until`, with no
  /// current link. The callbacks of its commands, to complete with `timeout`; their late
  /// handlers stay, for the replies that may still come.
  std::vector<Callback> drain_current(Clock::time_point until);
  /// A draining link is closed: its rest, to fail (their late handlers hear it).
  Commands close_draining(LinkId link);
  /// The oldest written command on the current link is past its deadline.
  bool current_late(Clock::time_point now) const noexcept;
  /// The draining links past their grace at `now`.
  std::vector<LinkId> drained(Clock::time_point now) const;
  bool draining() const noexcept { return !draining_.empty(); }

  /// The earliest time something is due: a written command's deadline on the current link,
  /// the oldest queued one's, a drain's end (`never` with none).
  Clock::time_point next_deadline() const noexcept;
  /// Anything queued, in flight or draining.
  bool has_work() const noexcept;
  /// Forgets everything without completing it (the context is shutting down).
  void clear() noexcept;

  /// Completes each command with `ec`: its callback, or (one that timed out) its late
  /// handler.
  static void fail_all(Commands& commands, boost::system::error_code ec);

 private:
  struct Link {
    LinkId id = 0;
    Commands in_flight;
    Clock::time_point drain_until = never;
    Clock::time_point idle_since{};
  };
  static void reset(Link& link) noexcept;
  /// The deadline of the oldest written command on the current link that has one.
  Clock::time_point current_deadline() const noexcept;
  Link* find(LinkId link) noexcept;
  const Link* find(LinkId link) const noexcept;

  std::string load_bytes_;  // the loads' RESP, ahead of the queue's
  Commands loads_;
  std::string bytes_;  // the queue's RESP
  Commands queue_;
  Link current_;               // id 0: none
  std::deque<Link> draining_;  // (a deque: a Link is not moved when it grows)
  LinkId next_id_ = 1;
};

/// What a reply on a link means besides its command's answer.
struct ReplyEffects {
  /// A message on a (shard) channel, or a Cluster node saying the channel's slot moved:
  /// no command's answer (only a subscriber gets these).
  bool push = false;
  /// READONLY from a located master on its current, ready link: a failover demoted it;
  /// after this reply, leave it (the commands behind it fail with read_only) and locate
  /// again.
  bool demoted = false;
  /// An error on a link that calls the library: it may say the library is gone.
  bool check_functions = false;
};
struct ReplyContext {
  bool subscriber = false;     ///< the connection takes pushes
  bool located = false;        ///< it finds its server with a locator (Sentinel)
  bool current_ready = false;  ///< the reply came on the current link, which is ready
  bool functions = false;      ///< that link calls our scripts with FCALL
};
ReplyEffects effects_of(const Reply& reply, ReplyContext context) noexcept;

}  // namespace redis_lock::detail
