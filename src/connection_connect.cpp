// SPDX-License-Identifier: MIT
// A Connection's connecting: the backoff's timer, locating (Sentinel), resolving, TCP or a
// Unix socket, TLS, the handshake and what it decides about our scripts (LibraryUse). A
// closed link's late completions must never touch its successor: every handler checks.
#include "connection.hpp"

#include "connection_link.hpp"
#include "script_call.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>

#include <vector>

#include <sys/socket.h>
#include <unistd.h>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

void Connection::wait_backoff(Clock::time_point until) {
  // A recent attempt failed: wait a little instead of hammering a server that is down.
  connect_timer_->expires_at(until);
  connect_timer_->async_wait(on_strand([self = shared_from_this()](error_code ec) {
    if (ec || self->shut_down_) return;
    self->apply(self->fsm_.backoff_over(self->queue()));
  }));
}

void Connection::connect_now() {
  link_ = std::make_shared<Link>(strand_.get_inner_executor(), reply_limits_);
  link_->id = pipeline_.open();
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
    self->apply(self->fsm_.connect_deadline(Clock::now()));
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
        self->apply(self->fsm_.transport_up());
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
                               self->apply(self->fsm_.transport_up());
                             }));
}

void Connection::start_handshake(const std::shared_ptr<Link>& link) {
  std::string resp;
  const bool probe = library_use_.start_handshake();
  const auto steps =
      Handshake::plan({.username = config_.username,
                       .password = config_.password,
                       .database = config_.database,
                       .client_name = client_name_,
                       .confirm_master = static_cast<bool>(locator_),
                       .preload = preload_,
                       .function_probe = probe ? function_probe_ : std::string_view{},
                       .check_version = check_version_},
                      resp);
  finding_.reset();
  handshake_left_ = steps.size();
  for (const auto step : steps) expect_handshake_reply(link, step);
  link->write_buf = std::move(resp);
  write_link(link);
}

void Connection::expect_handshake_reply(const std::shared_ptr<Link>& link, Handshake::Step step) {
  // These callbacks live in the link's own queue, which the connection owns: they hold both
  // weakly, or a link stuck in its handshake when the io_context is destroyed would keep
  // itself and the connection alive forever (seen by LSan, FaultMatrix.Partition...).
  if (link != link_) return;
  pipeline_.expect(Pipeline::Command{
      Callback([weak_self = weak_from_this(), weak_link = std::weak_ptr<Link>(link), step](
                   error_code ec, Reply reply) {
        const auto self = weak_self.lock();
        const auto alive_link = weak_link.lock();
        if (self && alive_link) self->on_handshake_reply(alive_link, step, ec, reply);
      }),
      nullptr, never, 0});
}

void Connection::load_library_first(const std::shared_ptr<Link>& link) {
  handshake_left_ = 1;
  expect_handshake_reply(link, Handshake::Step::function_load);
  link->write_buf.clear();
  append_command(link->write_buf, {"FUNCTION", "LOAD", function_library_});
  write_link(link);
}

void Connection::write_link(const std::shared_ptr<Link>& link) {
  link->writing = true;
  link->write(on_strand(
      [self = shared_from_this(), link](error_code ec, std::size_t) { self->on_write(link, ec); }));
  start_read(link);
}

void Connection::on_handshake_reply(const std::shared_ptr<Link>& link, Handshake::Step step,
                                    error_code ec, const Reply& reply) {
  if (link_ != link || !fsm_.in_handshake()) return;
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
  library_use_.on_handshake_reply(step, reply);
  if (--handshake_left_ == 0) {
    const bool functions = library_use_.functions();
    const auto plan = library_use_.handshake_answered(!link->writing);
    if (plan.load_first) return load_library_first(link);
    follow(functions, plan);
    const auto act = fsm_.handshake_done();
    connect_timer_->cancel();
    report_finding();
    apply(act);  // (writes what is queued)
    if (link_ == link) start_read(link);
  }
}

void Connection::follow(bool functions, const LibraryUse::Plan& plan) {
  // Commands queued while connecting were encoded for what the last link had (or, before
  // the first, for the library): restated for this one.
  if (library_use_.functions() != functions) pipeline_.restate(library_use_.functions());
  if (!plan.load_library && !plan.load_scripts) return;
  std::string bytes;
  std::vector<std::size_t> sizes;
  const auto add = [&](std::initializer_list<std::string_view> command) {
    const auto before = bytes.size();
    append_command(bytes, command);
    sizes.push_back(bytes.size() - before);
  };
  if (plan.load_library) add({"FUNCTION", "LOAD", function_library_});
  if (plan.load_scripts) {
    for (const auto body : preload_) add({"SCRIPT", "LOAD", body});
  }
  // No deadline of their own, as the handshake's steps: a timed-out command behind them
  // fails the link all the same, and the queue's deadlines stay in order.
  std::vector<Pipeline::Command> loads;
  loads.reserve(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i == 0 && plan.load_library) {
      loads.push_back(Pipeline::Command{
          Callback([weak_self = weak_from_this(), weak_link = std::weak_ptr<Link>(link_)](
                       error_code ec, Reply reply) {
            if (const auto self = weak_self.lock(); self && !ec) {
              self->on_function_load(weak_link.lock(), reply);
            }
          }),
          nullptr, never, sizes[i]});
    } else {
      loads.push_back(
          Pipeline::Command{Callback([](error_code, Reply) {}), nullptr, never, sizes[i]});
    }
  }
  pipeline_.push_front(bytes, std::move(loads));
  arm_timer();
}

void Connection::on_function_load(const std::shared_ptr<Link>& link, const Reply& reply) {
  const bool functions = library_use_.functions();
  if (library_use_.on_queued_load(reply, link && link_ == link)) follow(functions, {});
}

void Connection::lost_functions(std::string_view error) {
  // The library went away under this link (FUNCTION FLUSH or DELETE), or its user may no
  // longer call it: this command is resent with its body (redirect.cpp), and from here on
  // the scripts go with EVALSHA, loaded ahead of what is still queued.
  const bool functions = library_use_.functions();
  if (const auto plan = library_use_.on_error(error)) follow(functions, *plan);
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

void Connection::connect_failed(error_code ec) { apply(fsm_.connect_failed(Clock::now(), ec)); }

}  // namespace redis_lock::detail
