// SPDX-License-Identifier: MIT
#include "tcp_proxy.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <deque>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

namespace redis_lock::test {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct TcpProxy::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
  std::uint16_t target;
  std::atomic<long long> delay_ms{0};
  std::atomic<bool> blackhole{false};
  std::atomic<bool> corrupt_reply{false};
  std::atomic<unsigned long long> client_bytes{0};
  std::string slow_after;  // set before any connection (delay_replies_after)
  std::chrono::milliseconds slow_delay{0};
  struct Rewrite {
    std::regex pattern;
    std::string replacement;
  };
  std::mutex rewrite_mutex;  // rewrite_replies runs on the test's thread, pump on ours
  std::shared_ptr<const Rewrite> rewrite;
  std::thread thread;
  std::vector<std::weak_ptr<tcp::socket>> sockets;  // both ends of each connection (io thread)

  asio::awaitable<void> pause_while_cut() {
    asio::steady_timer t(io);
    while (blackhole.load()) {
      t.expires_after(2ms);
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  // One direction: chunks are stamped when read and written no earlier than stamp + delay,
  // in order, so a delay adds latency without serialising the pipeline.
  // `slowed` (one per connection): the client has sent `slow_after`; its replies come late.
  asio::awaitable<void> pump(std::shared_ptr<tcp::socket> from, std::shared_ptr<tcp::socket> to,
                             bool from_server, std::shared_ptr<bool> slowed) {
    struct Chunk {
      Clock::time_point due;
      std::string bytes;
    };
    auto queue = std::make_shared<std::deque<Chunk>>();
    auto more = std::make_shared<asio::steady_timer>(io, Clock::time_point::max());
    auto reading_done = std::make_shared<bool>(false);
    asio::co_spawn(
        io,
        [this, queue, more, to, reading_done]() -> asio::awaitable<void> {
          asio::steady_timer wait(io);
          for (;;) {
            if (queue->empty()) {
              if (*reading_done) break;
              co_await more->async_wait(asio::as_tuple(asio::use_awaitable));
              continue;
            }
            co_await pause_while_cut();
            wait.expires_at(queue->front().due);
            co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
            auto chunk = std::move(queue->front());
            queue->pop_front();
            auto [ec, n] = co_await asio::async_write(*to, asio::buffer(chunk.bytes),
                                                      asio::as_tuple(asio::use_awaitable));
            if (ec) break;
          }
          boost::system::error_code ignored;
          to->shutdown(tcp::socket::shutdown_send, ignored);
        },
        asio::detached);
    char buf[16384];
    for (;;) {
      co_await pause_while_cut();
      auto [ec, n] =
          co_await from->async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
      if (ec) break;
      std::string bytes(buf, n);
      if (from_server && corrupt_reply.exchange(false)) bytes = "\x07not RESP\r\n";
      if (from_server) {
        std::shared_ptr<const Rewrite> r;
        {
          std::lock_guard lock(rewrite_mutex);
          r = rewrite;
        }
        if (r) bytes = std::regex_replace(bytes, r->pattern, r->replacement);
      }
      if (!from_server) {
        client_bytes += n;
        if (!slow_after.empty() && bytes.find(slow_after) != std::string::npos) *slowed = true;
      }
      auto due = Clock::now() + std::chrono::milliseconds(delay_ms.load());
      if (from_server && *slowed) due += slow_delay;
      queue->push_back({due, std::move(bytes)});
      more->cancel();
    }
    *reading_done = true;
    more->cancel();
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, client] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      auto a = std::make_shared<tcp::socket>(std::move(client));
      auto b = std::make_shared<tcp::socket>(io);
      auto [cec] = co_await b->async_connect({asio::ip::make_address("127.0.0.1"), target},
                                             asio::as_tuple(asio::use_awaitable));
      if (cec) continue;  // the server is down: the client sees its connection closed
      std::erase_if(sockets, [](const auto& s) { return s.expired(); });
      sockets.insert(sockets.end(), {a, b});
      auto slowed = std::make_shared<bool>(false);
      asio::co_spawn(io, pump(a, b, false, slowed), asio::detached);
      asio::co_spawn(io, pump(b, a, true, slowed), asio::detached);
    }
  }
};

TcpProxy::TcpProxy(std::uint16_t target_port) : impl_(std::make_unique<Impl>()) {
  impl_->target = target_port;
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

TcpProxy::~TcpProxy() {
  impl_->io.stop();
  impl_->thread.join();
}

std::uint16_t TcpProxy::port() const noexcept { return impl_->acceptor.local_endpoint().port(); }

void TcpProxy::set_delay(std::chrono::milliseconds delay) noexcept {
  impl_->delay_ms.store(delay.count());
}

void TcpProxy::set_blackhole(bool on) noexcept { impl_->blackhole.store(on); }

void TcpProxy::reset_connections() {
  asio::post(impl_->io, [impl = impl_.get()] {
    for (const auto& weak : impl->sockets) {
      if (auto s = weak.lock()) {
        boost::system::error_code ignored;
        s->set_option(tcp::socket::linger(true, 0), ignored);  // RST, not FIN
        s->close(ignored);
      }
    }
    impl->sockets.clear();
  });
}

void TcpProxy::corrupt_next_reply() noexcept { impl_->corrupt_reply.store(true); }

void TcpProxy::rewrite_replies(std::string pattern, std::string replacement) {
  auto r = std::make_shared<const Impl::Rewrite>(
      Impl::Rewrite{std::regex(pattern), std::move(replacement)});
  std::lock_guard lock(impl_->rewrite_mutex);
  impl_->rewrite = std::move(r);
}

void TcpProxy::rewrite_server_version(const std::string& version) {
  // "$7\r\nversion\r\n$6\r\n7.0.15\r\n" (or Valkey's) -> the same with `version`.
  rewrite_replies("(\\$7\r\nversion\r\n)\\$[0-9]+\r\n[0-9.]+\r\n",
                  "$1$$" + std::to_string(version.size()) + "\r\n" + version + "\r\n");
}

void TcpProxy::delay_replies_after(std::string needle, std::chrono::milliseconds delay) {
  impl_->slow_after = std::move(needle);
  impl_->slow_delay = delay;
}

unsigned long long TcpProxy::bytes_from_clients() const noexcept {
  return impl_->client_bytes.load();
}

}  // namespace redis_lock::test
