// SPDX-License-Identifier: MIT
// One HTTP request on a connection of its own, bounded by a deadline: how the checkout service
// calls the payment provider, and how the load generator and the fault tests call both.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace checkout {

struct HttpAnswer {
  int status = 0;  // 0: no HTTP answer before the deadline (refused, cut, timed out)
  std::string body;
  bool replayed = false;  // Idempotent-Replayed: true
  int retry_after = -1;   // seconds, -1 when absent
};

inline boost::asio::awaitable<HttpAnswer> http_call(
    boost::asio::ip::tcp::endpoint target, boost::beast::http::verb method, std::string path,
    std::string body, std::chrono::steady_clock::time_point deadline,
    std::vector<std::pair<std::string, std::string>> headers = {}) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  boost::beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_at(deadline);
  auto [ec] = co_await stream.async_connect(target, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return HttpAnswer{};
  http::request<http::string_body> req{method, path, 11};
  req.set(http::field::host, "checkout");
  req.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.keep_alive(false);
  req.body() = std::move(body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
  if (wec) co_return HttpAnswer{};
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  auto [rec, rn] =
      co_await http::async_read(stream, buffer, res, asio::as_tuple(asio::use_awaitable));
  if (rec) co_return HttpAnswer{};
  HttpAnswer answer{static_cast<int>(res.result_int()), std::move(res.body())};
  if (const auto it = res.find("Idempotent-Replayed"); it != res.end()) {
    answer.replayed = it->value() == "true";
  }
  if (const auto it = res.find(http::field::retry_after); it != res.end()) {
    try {
      answer.retry_after = std::stoi(std::string(it->value()));
    } catch (const std::exception&) {
    }
  }
  co_return answer;
}

}  // namespace checkout
