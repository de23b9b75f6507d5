// SPDX-License-Identifier: MIT
// The pipelined connection: commands, reads and writes, deadlines (connecting, TLS and the
// handshake are connection_connect.cpp's). Every handler checks which Link it belongs to: a
// closed link's late completions must never touch the queues of its successor.
#include "connection.hpp"

#include "connection_link.hpp"
#include "script_call.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <vector>

#include <sys/socket.h>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

/// A write buffer keeps at most this much capacity between writes: a batch of about 50
/// lock commands, so that a busy pipeline reuses it and a rare large write gives it back.
constexpr std::size_t kKeptWriteCapacity = 16 * 1024;

}  // namespace

Connection::Connection(Strand strand, ConnectionConfig config, std::string client_name,
                       std::shared_ptr<asio::ssl::context> tls)
    : strand_(std::move(strand)),
      config_(std::move(config)),
      client_name_(std::move(client_name)),
      tls_(std::move(tls)),
      fsm_(config_.command_timeout),
      timer_(std::make_unique<asio::steady_timer>(strand_.get_inner_executor())),
      connect_timer_(std::make_unique<asio::steady_timer>(strand_.get_inner_executor())) {}

Connection::~Connection() = default;

bool Connection::write_now(std::span<const std::string_view> command) noexcept {
  // A write under way may have sent part of a command: ours would land in its middle. TLS
  // needs its stream's state, which only Asio's operations may touch.
  // (A write whose bytes all went out, its handler still queued, is no longer under way:
  // Link::write counts them.)
  const bool mid_write = link_ && link_->writing && link_->written < link_->write_buf.size();
  if (shut_down_ || !fsm_.ready() || !link_ || link_->tls || mid_write || link_->torn ||
      !link_->socket.is_open()) {
    return false;
  }
  try {
    std::string bytes;
    append_script_call(bytes, command, library_use_.functions());
    // All or nothing: with the socket's buffer full, or the link gone, the place lapses.
    // Part of it sent: the link is torn, and no later last word may follow those bytes.
    const auto sent = send_now(link_->socket.native_handle(), bytes);
    if (sent > 0 && sent < bytes.size()) link_->torn = true;
    return sent == bytes.size();
  } catch (const std::exception&) {
    return false;
  }
}

void Connection::shutdown() noexcept {
  shut_down_ = true;
  close_link();
  for (auto& link : draining_) link->close();
  draining_.clear();
  timer_.reset();
  connect_timer_.reset();
  pipeline_.clear();
}

void Connection::set_subscriber(PushHandler on_push, LinkDownHandler on_link_down) {
  on_push_ = std::move(on_push);
  on_link_down_ = std::move(on_link_down);
}

void Connection::keep_reading(bool on) {
  keep_reading_ = on;
  if (!link_ || !fsm_.ready()) return;
  if (on) {
    start_read(link_);
  } else if (link_->reading && !pipeline_.busy(link_->id)) {
    // Nothing more to receive: stop the read so that an idle manager holds no work.
    error_code ignored;
    link_->socket.cancel(ignored);
  }
}

bool Connection::close_if_idle() {
  // (A connect whose commands timed out meanwhile is needed by nobody either: its
  // handshake's own commands go with the link.)
  const auto act = fsm_.idle(has_work(), pipeline_.waiting() || pipeline_.draining());
  if (act.link != ConnectFsm::Action::Link::close) return false;
  apply(act);
  return true;
}

std::optional<Endpoint> Connection::located() const {
  if (!locator_ || !fsm_.ready()) return std::nullopt;
  return Endpoint{config_.host, config_.port};
}

void Connection::leave_server() { apply(fsm_.leave(Clock::now(), queue())); }

ConnectFsm::Queue Connection::queue() const noexcept {
  return {.waiting = pipeline_.waiting(), .oldest_deadline = pipeline_.oldest_deadline()};
}

void Connection::apply(const ConnectFsm::Action& act) {
  using Do = ConnectFsm::Action::Link;
  // The common case (a command queued on a ready link: write it) fails nothing: no lists for
  // it (an empty std::deque allocates, and every command comes through here).
  if (act.link == Do::keep) return take_next(act);
  Pipeline::Commands failed;
  std::vector<Callback> timed_out;
  switch (act.link) {
    case Do::keep:
      break;
    case Do::drop:
      failed = pipeline_.close_current();
      close_link();
      break;
    case Do::fail:
      close_link();  // (only the handshake's commands can be in flight: they go with it)
      failed = pipeline_.take_queued();
      break;
    case Do::drain:
      draining_.push_back(std::move(link_));
      link_.reset();
      timed_out = pipeline_.drain_current(Clock::now() + drain_grace(config_.command_timeout));
      break;
    case Do::close:
      close_link();
      break;
  }
  if (act.link != Do::drain) {
    handshake_left_ = 0;
    if (connect_timer_) connect_timer_->cancel();  // a connect's deadline, or its backoff
  }
  take_next(act);
  if (act.link == Do::drain) {
    arm_timer();
  } else {
    cancel_timer_if_idle();
  }
  notify_link_down();
  Pipeline::fail_all(failed, act.error);
  for (auto& callback : timed_out) std::move(callback)(error::timeout, Reply{});
}

void Connection::take_next(const ConnectFsm::Action& act) {
  using Next = ConnectFsm::Action::Next;
  switch (act.next) {
    case Next::none:
      break;
    case Next::connect:
      connect_now();
      break;
    case Next::wait:
      wait_backoff(act.until);
      break;
    case Next::handshake:
      start_handshake(link_);
      break;
    case Next::write:
      flush();
      break;
    case Next::stop_wait:
      if (connect_timer_) connect_timer_->cancel();
      break;
  }
}

void Connection::notify_link_down() {
  if (on_link_down_) on_link_down_();
}

void Connection::close_link() noexcept {
  if (link_) {
    link_->close();
    link_.reset();
  }
  // What it still awaited goes with it, unanswered (drop_link took what it fails first).
  pipeline_.discard_current();
}

bool Connection::is_current_or_draining(const std::shared_ptr<Link>& link) const noexcept {
  return pipeline_.live(link->id);
}

void Connection::execute(std::span<const std::string_view> command, Callback callback,
                         std::shared_ptr<LateReplies> late, std::chrono::milliseconds extra_time) {
  if (shut_down_) return;  // the handler is destroyed, as Asio does with pending work
  const auto now = Clock::now();
  pipeline_.push(command, library_use_.functions(), std::move(callback), std::move(late),
                 now + config_.command_timeout + extra_time);
  arm_timer();
  apply(fsm_.queued(now, queue()));  // (in backoff or a handshake: written after it)
}

// ---------------------------------------------------------------------------------------
// Writing and reading

bool Connection::idle_link_is_dead() {
  // The server may have closed an idle connection (restart, timeout, CLIENT KILL). Peeking
  // costs one syscall and lets us reconnect before writing, instead of losing the commands.
  // A link that was busy a moment ago is very likely alive: skip the syscall on hot paths.
  constexpr auto recently = std::chrono::milliseconds(1);
  if (Clock::now() - pipeline_.idle_since() < recently) return false;
  char byte;
  const auto n = ::recv(link_->socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  // Unsolicited bytes while idle: a RESP2 server never sends any, except pushes to a
  // subscriber, which are read later.
  return !on_push_;
}

void Connection::flush() {
  if (!fsm_.ready() || !pipeline_.queued() || link_->writing) return;
  if (!pipeline_.busy(link_->id) && idle_link_is_dead()) {
    return apply(fsm_.link_failed(Clock::now(), error::connection_lost, queue()));
  }
  auto link = link_;
  link->write_buf.clear();
  // The two buffers take turns, so each keeps the largest capacity it ever had: the
  // handshake's (every script loaded again after a reconnect, about 100 KB) stayed for the
  // connection's life. One beyond a busy batch's size is given back.
  if (link->write_buf.capacity() > kKeptWriteCapacity) std::string().swap(link->write_buf);
  pipeline_.take_batch(link->write_buf);
  write_link(link);
}

void Connection::on_write(const std::shared_ptr<Link>& link, error_code ec) {
  link->writing = false;
  if (link_ != link) {
    if (ec && is_current_or_draining(link)) close_drained(link, error::connection_lost);
    return;
  }
  if (ec) return drop_link(link_error(*link, ec));
  flush();
}

error_code Connection::link_error(const Link& link, error_code ec) const {
  // A TLS alert, or the connection closed, on a TLS link: during the handshake's commands,
  // the server refused us (ConnectFsm::link_failed tells). (TLS 1.3 servers check a client
  // certificate after the client thinks the handshake is done; our AUTH/PING may then meet
  // a reset instead of the alert.)
  const bool refused =
      link.tls && (ec.category() == asio::error::get_ssl_category() ||
                   ec == asio::ssl::error::stream_truncated || ec == asio::error::eof ||
                   ec == asio::error::connection_reset || ec == asio::error::broken_pipe);
  return refused ? error_code(error::tls_handshake_failed) : error_code(error::connection_lost);
}

void Connection::start_read(const std::shared_ptr<Link>& link) {
  const bool wanted = pipeline_.busy(link->id) || (keep_reading_ && link == link_ && fsm_.ready());
  if (link->reading || !wanted) return;
  link->reading = true;
  link->read_some(on_strand([self = shared_from_this(), link](error_code ec, std::size_t n) {
    self->on_read(link, ec, n);
  }));
}

void Connection::on_read(const std::shared_ptr<Link>& link, error_code ec, std::size_t n) {
  link->reading = false;
  if (!is_current_or_draining(link)) return;
  const bool current = link == link_;
  if (ec == asio::error::operation_aborted && current) {
    return start_read(link);  // keep_reading(false) stopped it; read again if still wanted
  }
  const auto fail = [&](error_code why) {
    if (current) {
      drop_link(why);
    } else {
      close_drained(link, why);
    }
  };
  if (ec) return fail(current ? link_error(*link, ec) : error_code(error::connection_lost));
  if (!link->reader.feed(link->read_buf.data(), n)) return fail(error::protocol_error);
  for (;;) {
    bool failed = false;
    auto reply = link->reader.next(failed);
    if (failed) return fail(error::protocol_error);
    if (!reply) break;
    const auto effects = effects_of(*reply, {.subscriber = static_cast<bool>(on_push_),
                                             .located = static_cast<bool>(locator_),
                                             .current_ready = current && fsm_.ready(),
                                             .functions = library_use_.functions()});
    if (effects.push) {
      on_push_(*reply);
      if (!is_current_or_draining(link)) return;
      continue;
    }
    auto pending = pipeline_.pop(link->id, Clock::now());
    if (!pending) return fail(error::protocol_error);  // nobody asked for it
    if (effects.check_functions) lost_functions(reply->str);
    if (pending->callback) {
      std::move(pending->callback)(error_code{}, std::move(*reply));
    } else if (pending->late) {
      pending->late->on_late_reply(error_code{}, *reply);
    }
    if (effects.demoted && link_ == link) return drop_link(error::read_only);
    if (!is_current_or_draining(link)) return;  // the callback's work closed the link
  }
  if (link != link_ && !pipeline_.busy(link->id)) {
    close_drained(link, error::connection_lost);  // fully drained
  } else {
    start_read(link);
  }
  cancel_timer_if_idle();
}

void Connection::drop_link(error_code ec) {
  // Lost during the handshake: a connect failure (with backoff), not a lost command. Queued
  // commands were never written: they may go out on a fresh connection.
  apply(fsm_.link_failed(Clock::now(), ec, queue()));
}

void Connection::close_drained(const std::shared_ptr<Link>& link, error_code ec) {
  std::erase(draining_, link);
  link->close();
  auto rest = pipeline_.close_draining(link->id);
  cancel_timer_if_idle();
  Pipeline::fail_all(rest, ec);
}

// ---------------------------------------------------------------------------------------
// Deadlines

void Connection::arm_timer() {
  const auto earliest = pipeline_.next_deadline();
  if (earliest == never) return;
  if (timer_armed_ && timer_at_ <= earliest) return;
  timer_armed_ = true;
  timer_at_ = earliest;
  timer_->expires_at(earliest);
  timer_->async_wait(on_strand([self = shared_from_this()](error_code ec) {
    if (ec == asio::error::operation_aborted || self->shut_down_) return;
    self->timer_armed_ = false;
    self->on_timer();
  }));
}

void Connection::on_timer() {
  const auto now = Clock::now();
  // Draining links past their grace: their late replies are not coming.
  for (const auto id : pipeline_.drained(now)) {
    const auto it = std::find_if(draining_.begin(), draining_.end(),
                                 [id](const auto& link) { return link->id == id; });
    // (An earlier one's late handlers may have closed it.)
    if (it == draining_.end()) continue;
    const auto link = *it;  // (a copy: close_drained erases the element)
    close_drained(link, error::connection_lost);
  }
  // A written command without a reply in time: everything behind it on its link is stuck.
  if (link_ && pipeline_.current_late(now)) apply(fsm_.late(now, queue()));
  // Commands that never left the queue in time (connecting, backoff) fail alone. Never
  // written, they fail as a connect that did not finish in time would (connect_timeout: an
  // outage an acquire that waits rides out), not as a command the server may have run.
  auto expired = pipeline_.take_expired(now);
  // (Also on a ready link, behind a write still under way: it never left the queue.)
  const auto why = error::connect_timeout;
  // Nothing left to connect for: a backoff stops, idle. A connect or a handshake under way
  // goes on (its own deadline bounds it): given up, the server's share of it (a handshake
  // during a storm of them) would be done again by the next command's connect.
  if (!pipeline_.waiting()) apply(fsm_.nothing_waiting());
  arm_timer();
  for (auto& p : expired) std::move(p.callback)(why, Reply{});
}

bool Connection::has_work() const noexcept { return pipeline_.has_work(); }

void Connection::cancel_timer_if_idle() {
  // Idle means idle, but a completion handler usually issues the next command at once
  // (release after acquire, a loop): look again after it ran, so a chain of commands keeps
  // one armed timer instead of paying a timerfd syscall to cancel and re-arm it each time.
  if (!timer_armed_ || !timer_ || has_work() || idle_check_posted_) return;
  idle_check_posted_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    self->idle_check_posted_ = false;
    if (self->timer_armed_ && self->timer_ && !self->has_work()) {
      self->timer_armed_ = false;
      self->timer_->cancel();
    }
  });
}

}  // namespace redis_lock::detail
