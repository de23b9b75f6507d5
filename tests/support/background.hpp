// SPDX-License-Identifier: MIT
// An io_context running on a thread of its own, so that a test's thread can watch Redis
// (and block on futures) meanwhile.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <future>
#include <thread>

namespace redis_lock::test {

class Background {
 public:
  Background()
      : work_(boost::asio::make_work_guard(io)),
        thread_([this] { io.run_for(std::chrono::seconds(120)); }) {}
  ~Background() {
    work_.reset();
    thread_.join();
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  /// Runs `fn` on the io thread and waits for it.
  template <class Fn>
  void run(Fn fn) {
    std::promise<void> done;
    boost::asio::post(io, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
  boost::asio::io_context io;

 private:
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace redis_lock::test
