// SPDX-License-Identifier: MIT
// The pipelined connection. Every handler checks which Link it belongs to: a closed link's
// late completions must never touch the queues of its successor.
#include "connection.hpp"

#include "script_call.hpp"

#include "connect_fsm.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

/// Sends what the socket takes now, without blocking and without SIGPIPE: the bytes sent
/// (0 when its buffer is full or the link is gone; what failed, the next write reports).
std::size_t send_now(int fd, std::string_view bytes) noexcept {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

}  // namespace

struct Connection::Link {
  using Socket = asio::generic::stream_protocol::socket;
  Link(const asio::any_io_executor& ex, ReplyLimits limits)
      : socket(ex), resolver(ex), reader(limits) {}
  Socket socket;
  asio::ip::tcp::resolver resolver;
  std::unique_ptr<asio::ssl::stream<Socket&>> tls;  // rediss://: every byte goes through it
  std::vector<asio::generic::stream_protocol::endpoint> endpoints;
  ReplyReader reader;
  std::deque<Pending> in_flight;
  std::string write_buf;
  std::array<char, 16 * 1024> read_buf;
  Clock::time_point drain_until = Clock::time_point::max();
  Clock::time_point idle_since{};  // when in_flight last became empty
  bool writing = false;
  // Bytes of write_buf on the socket so far. Connection::write_now needs the true count
  // also for a write whose handler never runs (the io_context stopped): see write().
  std::size_t written = 0;
  // write_now left part of a command on the socket: nothing may be written after it.
  bool torn = false;
  bool reading = false;
  bool is_tcp = true;

  // One read and one write may be outstanding at once, on the strand, also through TLS.
  template <class Handler>
  void write(Handler&& handler) {
    written = 0;
    if (tls) {
      asio::async_write(*tls, asio::buffer(write_buf), std::forward<Handler>(handler));
    } else {
      // Our own first try, counted at once. Asio's speculative send counts only when its
      // handler runs, and a stop in between left bytes on the socket that we took for
      // unsent: a last word written after them landed in a command's middle (one run in 30
      // under TSan and a CPU hog). The rest, when the socket's buffer was full, goes
      // through async_write, whose parts are counted only as its intermediate handlers
      // run (the last one not at all): a stop then finds the write under way, and the last
      // words are not written (the places lapse, as after a crash).
      written = send_now(socket.native_handle(), write_buf);
      const auto first = written;
      asio::async_write(
          socket, asio::buffer(write_buf) + first,
          [this, first](const error_code& ec, std::size_t sent) -> std::size_t {
            written = first + sent;
            return ec || written >= write_buf.size() ? 0 : write_buf.size() - written;
          },
          std::forward<Handler>(handler));
    }
  }
  template <class Handler>
  void read_some(Handler&& handler) {
    if (tls) {
      tls->async_read_some(asio::buffer(read_buf), std::forward<Handler>(handler));
    } else {
      socket.async_read_some(asio::buffer(read_buf), std::forward<Handler>(handler));
    }
  }

  void close() noexcept {
    error_code ignored;
    resolver.cancel();
    socket.close(ignored);
  }
};

namespace {

constexpr auto never = std::chrono::steady_clock::time_point::max();
/// A write buffer keeps at most this much capacity between writes: a batch of about 50
/// lock commands, so that a busy pipeline reuses it and a rare large write gives it back.
constexpr std::size_t kKeptWriteCapacity = 16 * 1024;

// A message on a (shard) channel, or a Cluster node telling a shard subscriber that the
// channel's slot moved away (we never send SUNSUBSCRIBE ourselves, so it is always a push).
bool is_push(const Reply& r) {
  if (r.type != Reply::Type::array || r.elements.size() != 3 ||
      r.elements[0].type != Reply::Type::string) {
    return false;
  }
  const auto& kind = r.elements[0].str;
  return kind == "message" || kind == "smessage" || kind == "sunsubscribe";
}

// (A template, not `std::deque<auto>&`: that spelling is a GCC extension clang rejects.)
template <class Pendings>
void fail_all(Pendings& pendings, error_code ec) {
  auto failed = std::move(pendings);
  pendings.clear();
  for (auto& p : failed) {
    if (p.callback) {
      std::move(p.callback)(ec, Reply{});
    } else if (p.late) {
      p.late->on_late_reply(ec, Reply{});
    }
  }
}

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
  if (shut_down_ || fsm_.state() != State::ready || !link_ || link_->tls || mid_write ||
      link_->torn || !link_->socket.is_open()) {
    return false;
  }
  try {
    std::string bytes;
    append_script_call(bytes, command, functions_);
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
  queued_.clear();
  queued_bytes_.clear();
}

void Connection::set_subscriber(PushHandler on_push, LinkDownHandler on_link_down) {
  on_push_ = std::move(on_push);
  on_link_down_ = std::move(on_link_down);
}

void Connection::keep_reading(bool on) {
  keep_reading_ = on;
  if (!link_ || fsm_.state() != State::ready) return;
  if (on) {
    start_read(link_);
  } else if (link_->reading && link_->in_flight.empty()) {
    // Nothing more to receive: stop the read so that an idle manager holds no work.
    error_code ignored;
    link_->socket.cancel(ignored);
  }
}

bool Connection::close_if_idle() {
  const auto state = fsm_.state();
  if (state == State::ready) {
    if (has_work()) return false;
  } else if (state == State::connecting || state == State::handshake) {
    // A connect whose commands timed out meanwhile: nobody needs it any more either. (Its
    // handshake's own commands go with the link.)
    if (!queued_.empty() || !draining_.empty()) return false;
    handshake_left_ = 0;
    if (connect_timer_) connect_timer_->cancel();
  } else {
    return false;
  }
  close_link();
  fsm_.left();
  cancel_timer_if_idle();
  notify_link_down();
  return true;
}

std::optional<Endpoint> Connection::located() const {
  if (!locator_ || fsm_.state() != State::ready) return std::nullopt;
  return Endpoint{config_.host, config_.port};
}

void Connection::leave_server() {
  if (fsm_.state() == State::ready) drop_link(error::connection_lost);
}

void Connection::notify_link_down() {
  if (on_link_down_) on_link_down_();
}

void Connection::close_link() noexcept {
  if (link_) {
    link_->close();
    link_.reset();
  }
}

bool Connection::is_current_or_draining(const std::shared_ptr<Link>& link) const noexcept {
  return link == link_ || std::find(draining_.begin(), draining_.end(), link) != draining_.end();
}

void Connection::execute(std::span<const std::string_view> command, Callback callback,
                         std::shared_ptr<LateReplies> late, std::chrono::milliseconds extra_time) {
  if (shut_down_) return;  // the handler is destroyed, as Asio does with pending work
  const auto before = queued_bytes_.size();
  append_script_call(queued_bytes_, command, functions_);
  queued_.push_back(Pending{std::move(callback), std::move(late),
                            Clock::now() + config_.command_timeout + extra_time,
                            queued_bytes_.size() - before});
  arm_timer();
  switch (fsm_.state()) {
    case State::closed:
      start_connect();
      break;
    case State::ready:
      flush();
      break;
    default:
      break;  // the handshake or the backoff flushes when it ends
  }
}

// ---------------------------------------------------------------------------------------
// Connecting

void Connection::start_connect() {
  const auto act = fsm_.need_link(
      Clock::now(), queued_.empty() ? Clock::time_point::max() : queued_.front().deadline);
  if (act.kind == ConnectFsm::Action::Kind::connect) return connect_now();
  // A recent attempt failed: wait a little instead of hammering a server that is down.
  connect_timer_->expires_at(act.until);
  connect_timer_->async_wait(on_strand([self = shared_from_this()](error_code ec) {
    if (ec || self->shut_down_) return;
    if (self->fsm_.backoff_over(!self->queued_.empty()).kind == ConnectFsm::Action::Kind::connect) {
      self->connect_now();
    }
  }));
}

void Connection::connect_now() {
  link_ = std::make_shared<Link>(strand_.get_inner_executor(), reply_limits_);
  auto link = link_;
  if (locator_) {
    // Ask where the master is first; the connect deadline starts once we know (locating
    // has deadlines of its own: each sentinel's connect and command timeouts).
    return locator_([weak = weak_from_this(), link](error_code ec, Endpoint at) {
      const auto self = weak.lock();
      if (!self || self->shut_down_ || self->link_ != link) return;
      if (ec) return self->connect_failed(ec);
      self->config_.host = std::move(at.host);
      self->config_.port = at.port;
      self->resolve_and_connect(link);
    });
  }
  resolve_and_connect(link);
}

void Connection::resolve_and_connect(const std::shared_ptr<Link>& link) {
  connect_timer_->expires_after(config_.connect_timeout);
  connect_timer_->async_wait(on_strand([self = shared_from_this(), link](error_code ec) {
    if (ec || self->link_ != link) return;
    if (self->fsm_.state() == State::connecting || self->fsm_.state() == State::handshake) {
      self->on_connect_deadline();
    }
  }));

  if (!config_.unix_socket.empty()) {
    link->is_tcp = false;
    link->endpoints.emplace_back(asio::local::stream_protocol::endpoint(config_.unix_socket));
    return try_endpoint(link, 0);
  }
  error_code parse_ec;
  const auto address = asio::ip::make_address(config_.host, parse_ec);
  if (!parse_ec) {
    link->endpoints.emplace_back(asio::ip::tcp::endpoint(address, config_.port));
    return try_endpoint(link, 0);
  }
  link->resolver.async_resolve(
      config_.host, std::to_string(config_.port),
      on_strand([self = shared_from_this(), link](error_code ec,
                                                  asio::ip::tcp::resolver::results_type results) {
        if (self->link_ != link) return;
        if (ec || results.empty()) return self->connect_failed(error::connect_failed);
        for (const auto& entry : results) link->endpoints.emplace_back(entry.endpoint());
        self->try_endpoint(link, 0);
      }));
}

void Connection::try_endpoint(const std::shared_ptr<Link>& link, std::size_t index) {
  if (index >= link->endpoints.size()) return connect_failed(error::connect_failed);
  error_code ignored;
  link->socket.close(ignored);
  // The socket is made close-on-exec from its birth (Asio's own open() does not ask): a
  // program that runs other programs must not hand them its Redis connections, and setting
  // the flag after socket() would leave a window for another thread's fork and exec.
  const auto& endpoint = link->endpoints[index];
  const int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC,
                          endpoint.protocol().protocol());
  if (fd < 0) return try_endpoint(link, index + 1);
  error_code assign_ec;
  link->socket.assign(endpoint.protocol(), fd, assign_ec);
  if (assign_ec) {
    ::close(fd);
    return try_endpoint(link, index + 1);
  }
  link->socket.async_connect(
      link->endpoints[index], on_strand([self = shared_from_this(), link, index](error_code ec) {
        if (self->link_ != link) return;
        if (ec) return self->try_endpoint(link, index + 1);
        if (link->is_tcp) {
          error_code opt_ec;
          link->socket.set_option(asio::ip::tcp::no_delay(true), opt_ec);
          link->socket.set_option(asio::socket_base::keep_alive(true), opt_ec);
        }
        if (self->tls_) return self->start_tls(link);
        self->start_handshake(link);
      }));
}

void Connection::start_tls(const std::shared_ptr<Link>& link) {
  // The connect deadline covers the TLS handshake too.
  link->tls = std::make_unique<asio::ssl::stream<Link::Socket&>>(link->socket, *tls_);
  const std::string& name =
      config_.tls_server_name.empty() ? config_.host : config_.tls_server_name;
  error_code not_an_ip;
  asio::ip::make_address(name, not_an_ip);
  // SNI carries host names only (RFC 6066); the name is verified either way.
  // (SSL_set_tlsext_host_name spelled out: the macro uses a C cast.)
  if (not_an_ip && SSL_ctrl(link->tls->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME,
                            TLSEXT_NAMETYPE_host_name, const_cast<char*>(name.c_str())) != 1) {
    return connect_failed(error::tls_handshake_failed);
  }
  if (config_.tls_verify) {
    error_code ec;
    link->tls->set_verify_callback(asio::ssl::host_name_verification(name), ec);
    if (ec) return connect_failed(error::tls_handshake_failed);
  }
  link->tls->async_handshake(asio::ssl::stream_base::client,
                             on_strand([self = shared_from_this(), link](error_code ec) {
                               if (self->link_ != link) return;
                               if (ec) return self->connect_failed(error::tls_handshake_failed);
                               self->start_handshake(link);
                             }));
}

void Connection::start_handshake(const std::shared_ptr<Link>& link) {
  std::string resp;
  probed_ = !function_library_.empty() && !fcall_refused_;
  const auto steps =
      Handshake::plan({.username = config_.username,
                       .password = config_.password,
                       .database = config_.database,
                       .client_name = client_name_,
                       .confirm_master = static_cast<bool>(locator_),
                       .preload = preload_,
                       // (A user refused FCALL is not asked again.)
                       .function_probe = probed_ ? function_probe_ : std::string_view{},
                       .check_version = check_version_},
                      resp);
  finding_.reset();
  functions_found_ = false;
  loaded_in_handshake_ = false;
  fsm_.connected();
  handshake_left_ = steps.size();
  for (const auto step : steps) expect_handshake_reply(link, step);
  link->write_buf = std::move(resp);
  write_link(link);
}

void Connection::expect_handshake_reply(const std::shared_ptr<Link>& link, Handshake::Step step) {
  // These callbacks live in the link's own queue, which the connection owns: they hold both
  // weakly, or a link stuck in its handshake when the io_context is destroyed would keep
  // itself and the connection alive forever (seen by LSan, FaultMatrix.Partition...).
  link->in_flight.push_back(
      Pending{Callback([weak_self = weak_from_this(), weak_link = std::weak_ptr<Link>(link), step](
                           error_code ec, Reply reply) {
                const auto self = weak_self.lock();
                const auto alive_link = weak_link.lock();
                if (self && alive_link) self->on_handshake_reply(alive_link, step, ec, reply);
              }),
              nullptr, never, 0});
}

bool Connection::load_library_first(const std::shared_ptr<Link>& link) {
  // The probe found no library: it is loaded before anything else goes, one round trip
  // more, and the commands then go with FCALL. Only where the load is refused do the scripts
  // go ahead of them (SCRIPT LOAD, EVALSHA). Sending both at once, as before, had every
  // connection of a fleet that met a server without the library (a fresh or restarted one)
  // send the library and every script: about 100 KB each, for the server to read and hash
  // while the fleet waits for its first locks.
  if (!probed_ || functions_found_ || loaded_in_handshake_ || function_load_refused_ ||
      fcall_refused_ || link->writing) {
    return false;
  }
  loaded_in_handshake_ = true;
  handshake_left_ = 1;
  expect_handshake_reply(link, Handshake::Step::function_load);
  link->write_buf.clear();
  append_command(link->write_buf, {"FUNCTION", "LOAD", function_library_});
  write_link(link);
  return true;
}

void Connection::write_link(const std::shared_ptr<Link>& link) {
  link->writing = true;
  link->write(on_strand(
      [self = shared_from_this(), link](error_code ec, std::size_t) { self->on_write(link, ec); }));
  start_read(link);
}

void Connection::on_handshake_reply(const std::shared_ptr<Link>& link, Handshake::Step step,
                                    error_code ec, const Reply& reply) {
  if (link_ != link || fsm_.state() != State::handshake) return;
  if (ec) return;  // drop_link is failing the handshake already
  if (const auto refused = Handshake::check(step, reply, accept_evicting_)) {
    try {
      if (on_refused_) on_refused_(Handshake::refusal_text(step, reply));
    } catch (const std::exception&) {
      // Only the words are lost (no memory for them): the connect fails all the same.
    }
    return connect_failed(*refused);
  }
  try {
    // Kept until the handshake is done: a link that fails later in it is not worth a word.
    if (auto found = Handshake::notice(step, reply)) finding_ = std::move(found);
  } catch (const std::exception&) {
    // Only the words are lost (no memory for them): the connect goes on all the same.
  }
  if (step == Handshake::Step::function_probe) {
    functions_found_ = Handshake::functions_ready(step, reply);
    if (reply.is_error() && reply.str.starts_with("NOPERM")) fcall_refused_ = true;
  }
  if (step == Handshake::Step::function_load) {
    functions_found_ = Handshake::functions_ready(step, reply);
    if (reply.is_error() &&
        (reply.str.starts_with("NOPERM") || reply.str.starts_with("ERR unknown command"))) {
      function_load_refused_ = true;  // not asked again on this connection
    }
  }
  if (--handshake_left_ == 0) {
    if (load_library_first(link)) return;
    // (A handshake without the probe, its user refused FCALL before, loaded the scripts.)
    if (probed_) {
      use_functions(functions_found_);
      // A library flushed later, on this link, is loaded again (use_functions).
      loaded_in_handshake_ = false;
    } else if (!function_library_.empty()) {
      restate_queued(false);
    }
    fsm_.ready();
    connect_timer_->cancel();
    report_finding();
    flush();
    if (link_ == link) start_read(link);
  }
}

void Connection::use_functions(bool found) {
  restate_queued(found);
  if (found) return;
  // No library on this server (or none this user may call): every queued command goes with
  // EVALSHA, the scripts loaded ahead of them in the same write, so that none meets NOSCRIPT
  // (whose resend would put it behind commands sent after it). Ahead of those, the library
  // is loaded, unless this user was refused that before: once it is in, the commands that
  // follow go with FCALL. What the SCRIPT LOADs answer changes nothing: a user who may not
  // load scripts sends each body once.
  std::string bytes;
  std::vector<std::size_t> sizes;
  const auto add = [&](std::initializer_list<std::string_view> command) {
    const auto before = bytes.size();
    append_command(bytes, command);
    sizes.push_back(bytes.size() - before);
  };
  // (Not again where this handshake loaded it, and failed.)
  const bool load = !function_load_refused_ && !fcall_refused_ && !loaded_in_handshake_;
  if (load) add({"FUNCTION", "LOAD", function_library_});
  for (const auto body : preload_) add({"SCRIPT", "LOAD", body});
  // No deadline of their own, as the handshake's steps: a timed-out command behind them
  // fails the link all the same, and the queue's deadlines stay in order.
  const auto deadline = never;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    if (i == 0 && load) {
      queued_.push_front(
          Pending{Callback([weak_self = weak_from_this(), weak_link = std::weak_ptr<Link>(link_)](
                               error_code ec, Reply reply) {
                    if (const auto self = weak_self.lock(); self && !ec) {
                      self->on_function_load(weak_link.lock(), reply);
                    }
                  }),
                  nullptr, deadline, sizes[i]});
    } else {
      queued_.push_front(Pending{Callback([](error_code, Reply) {}), nullptr, deadline, sizes[i]});
    }
  }
  queued_bytes_.insert(0, bytes);
  arm_timer();
}

void Connection::on_function_load(const std::shared_ptr<Link>& link, const Reply& reply) {
  if (Handshake::functions_ready(Handshake::Step::function_load, reply)) {
    // Only for this link: the next handshake asks again.
    if (link && link_ == link && !fcall_refused_) restate_queued(true);
  } else if (reply.is_error() &&
             (reply.str.starts_with("NOPERM") || reply.str.starts_with("ERR unknown command"))) {
    function_load_refused_ = true;  // not asked again on this connection
  }
}

void Connection::lost_functions(std::string_view error) {
  bool refused = false;
  if (!library_lost(error, &refused)) return;
  // The library went away under this link (FUNCTION FLUSH or DELETE), or its user may no
  // longer call it: this command is resent with its body (redirect.cpp), and from here on,
  // as after a handshake that found no library, the scripts go with EVALSHA, loaded ahead of
  // what is still queued (and the library too, where this user may load it).
  if (refused) fcall_refused_ = true;
  use_functions(false);
}

void Connection::restate_queued(bool functions) {
  // Commands queued while connecting were encoded for what the last link had (or, before
  // the first, for the library): restated for this one.
  if (functions != functions_ && !queued_.empty()) {
    std::vector<std::size_t> sizes;
    sizes.reserve(queued_.size());
    for (const auto& p : queued_) sizes.push_back(p.bytes);
    if (restate_script_calls(queued_bytes_, sizes, functions)) {
      for (std::size_t i = 0; i < sizes.size(); ++i) queued_[i].bytes = sizes[i];
    }
  }
  functions_ = functions;
}

void Connection::report_finding() noexcept {
  auto finding = std::move(finding_);
  finding_.reset();
  if (!finding || !on_notice_) return;
  try {
    const auto where = address();
    on_notice_(ServerNotice{where, finding->kind, finding->text});
  } catch (const std::exception&) {
    // Only the words are lost (no memory for them).
  }
}

std::string Connection::address() const {
  if (!config_.unix_socket.empty()) return config_.unix_socket;
  const bool v6 = config_.host.find(':') != std::string::npos;
  return (v6 ? "[" + config_.host + "]" : config_.host) + ":" + std::to_string(config_.port);
}

void Connection::on_connect_deadline() { connect_failed(error::connect_timeout); }

void Connection::connect_failed(error_code ec) {
  // Only handshake commands can be in flight before `ready`; they die with the link.
  if (link_) link_->in_flight.clear();
  close_link();
  handshake_left_ = 0;
  fsm_.failed(Clock::now());
  if (connect_timer_) connect_timer_->cancel();
  auto failed = std::move(queued_);
  queued_.clear();
  queued_bytes_.clear();
  cancel_timer_if_idle();
  notify_link_down();
  for (auto& p : failed) std::move(p.callback)(ec, Reply{});
}

// ---------------------------------------------------------------------------------------
// Writing and reading

bool Connection::idle_link_is_dead() {
  // The server may have closed an idle connection (restart, timeout, CLIENT KILL). Peeking
  // costs one syscall and lets us reconnect before writing, instead of losing the commands.
  // A link that was busy a moment ago is very likely alive: skip the syscall on hot paths.
  constexpr auto recently = std::chrono::milliseconds(1);
  if (Clock::now() - link_->idle_since < recently) return false;
  char byte;
  const auto n = ::recv(link_->socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  // Unsolicited bytes while idle: a RESP2 server never sends any, except pushes to a
  // subscriber, which are read later.
  return !on_push_;
}

void Connection::flush() {
  if (fsm_.state() != State::ready || queued_.empty() || link_->writing) return;
  if (link_->in_flight.empty() && idle_link_is_dead()) {
    close_link();
    fsm_.lost();
    start_connect();
    return notify_link_down();
  }
  auto link = link_;
  link->write_buf.clear();
  // The two buffers take turns, so each keeps the largest capacity it ever had: the
  // handshake's (every script loaded again after a reconnect, about 100 KB) stayed for the
  // connection's life. One beyond a busy batch's size is given back.
  if (link->write_buf.capacity() > kKeptWriteCapacity) std::string().swap(link->write_buf);
  link->write_buf.swap(queued_bytes_);
  for (auto& p : queued_) link->in_flight.push_back(std::move(p));
  queued_.clear();
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
  // A TLS alert, or the connection closed, while the handshake's commands are out: the
  // server refused us. (TLS 1.3 servers check a client certificate after the client thinks
  // the handshake is done; our AUTH/PING may then meet a reset instead of the alert.)
  const bool refused = link.tls && fsm_.state() == State::handshake &&
                       (ec.category() == asio::error::get_ssl_category() ||
                        ec == asio::ssl::error::stream_truncated || ec == asio::error::eof ||
                        ec == asio::error::connection_reset || ec == asio::error::broken_pipe);
  return refused ? error_code(error::tls_handshake_failed) : error_code(error::connection_lost);
}

void Connection::start_read(const std::shared_ptr<Link>& link) {
  const bool wanted =
      !link->in_flight.empty() || (keep_reading_ && link == link_ && fsm_.state() == State::ready);
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
    if (on_push_ && is_push(*reply)) {
      on_push_(*reply);
      if (!is_current_or_draining(link)) return;
      continue;
    }
    if (link->in_flight.empty()) return fail(error::protocol_error);  // nobody asked for it
    auto pending = std::move(link->in_flight.front());
    link->in_flight.pop_front();
    if (link->in_flight.empty()) link->idle_since = Clock::now();
    // A located master that answers READONLY was demoted by a failover: after this reply,
    // leave it (the commands behind it fail with read_only too) and locate again.
    const bool demoted = locator_ && current && fsm_.state() == State::ready && reply->is_error() &&
                         reply->str.starts_with("READONLY");
    if (current && functions_ && reply->is_error() && fsm_.state() == State::ready) {
      lost_functions(reply->str);
    }
    if (pending.callback) {
      std::move(pending.callback)(error_code{}, std::move(*reply));
    } else if (pending.late) {
      pending.late->on_late_reply(error_code{}, *reply);
    }
    if (demoted && link_ == link) return drop_link(error::read_only);
    if (!is_current_or_draining(link)) return;  // the callback's work closed the link
  }
  if (link != link_ && link->in_flight.empty()) {
    close_drained(link, error::connection_lost);  // fully drained
  } else {
    start_read(link);
  }
  cancel_timer_if_idle();
}

void Connection::drop_link(error_code ec) {
  if (fsm_.state() != State::ready) {
    // Lost during the handshake: a connect failure (with backoff), not a lost command.
    return connect_failed(ec == error::tls_handshake_failed ? ec : error::connect_failed);
  }
  std::deque<Pending> failed;
  if (link_) failed = std::move(link_->in_flight);
  close_link();
  fsm_.lost();
  handshake_left_ = 0;
  if (connect_timer_) connect_timer_->cancel();
  // Queued commands were never written: they may go out on a fresh connection.
  if (!queued_.empty()) start_connect();
  cancel_timer_if_idle();
  notify_link_down();
  fail_all(failed, ec);
}

void Connection::start_draining() {
  auto link = std::move(link_);
  link_.reset();
  fsm_.left();
  link->drain_until = Clock::now() + drain_grace(config_.command_timeout);
  draining_.push_back(link);
  std::vector<Callback> timed_out;
  for (auto& p : link->in_flight) {
    // Moving out leaves p.callback empty, so its late handler takes the reply. (No
    // assignment: it would recurse in Boost 1.81.)
    if (p.callback) timed_out.push_back(std::move(p.callback));
  }
  if (!queued_.empty()) start_connect();
  arm_timer();
  notify_link_down();
  for (auto& cb : timed_out) std::move(cb)(error::timeout, Reply{});
}

void Connection::close_drained(const std::shared_ptr<Link>& link, error_code ec) {
  std::erase(draining_, link);
  link->close();
  auto rest = std::move(link->in_flight);
  link->in_flight.clear();
  cancel_timer_if_idle();
  fail_all(rest, ec);
}

// ---------------------------------------------------------------------------------------
// Deadlines

void Connection::arm_timer() {
  Clock::time_point earliest = never;
  if (link_) {
    for (const auto& p : link_->in_flight) {
      if (p.deadline != never) {
        earliest = std::min(earliest, p.deadline);
        break;  // deadlines grow along the queue (a WAIT's longer one holds up those behind it,
                // which cannot be answered before it anyway)
      }
    }
  }
  if (!queued_.empty()) earliest = std::min(earliest, queued_.front().deadline);
  for (const auto& link : draining_) earliest = std::min(earliest, link->drain_until);
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
  auto expired_links = draining_;
  for (auto& link : expired_links) {
    if (link->drain_until <= now) close_drained(link, error::connection_lost);
  }
  // A written command without a reply in time: everything behind it on its link is stuck.
  if (fsm_.state() == State::ready && link_) {
    for (const auto& p : link_->in_flight) {
      if (p.deadline == never) continue;
      if (p.deadline <= now) start_draining();
      break;
    }
  }
  // Commands that never left the queue in time (connecting, backoff) fail alone. Never
  // written, they fail as a connect that did not finish in time would (connect_timeout: an
  // outage an acquire that waits rides out), not as a command the server may have run.
  std::vector<Pending> expired;
  while (!queued_.empty() && queued_.front().deadline <= now) {
    queued_bytes_.erase(0, queued_.front().bytes);
    expired.push_back(std::move(queued_.front()));
    queued_.pop_front();
  }
  // (Also on a ready link, behind a write still under way: it never left the queue.)
  const auto why = error::connect_timeout;
  if (queued_.empty() && fsm_.state() == State::backoff) {
    // Nothing left to connect for: stop trying, stay idle. A connect or a handshake under
    // way goes on (its own deadline bounds it): given up, the server's share of it (a
    // handshake during a storm of them) would be done again by the next command's connect.
    fsm_.left();
    if (connect_timer_) connect_timer_->cancel();
  }
  arm_timer();
  for (auto& p : expired) std::move(p.callback)(why, Reply{});
}

bool Connection::has_work() const noexcept {
  return !queued_.empty() || !draining_.empty() || (link_ && !link_->in_flight.empty());
}

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
