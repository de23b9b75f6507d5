// SPDX-License-Identifier: MIT
// When this process's sockets were written and read: the benchmarks' per-stage account.
//
// io_trace.cpp interposes the C library's send, sendmsg, write, recv, recvmsg and read
// (Asio's sockets use the first two of each kind, hiredis write and read) and, while
// recording, notes every call that moved bytes: the time it returned, the descriptor, the
// thread (a number the caller gives each of its threads) and the first bytes. Recording
// costs one clock read and a few stores per call. Sanitizer builds bring their own
// interceptors for these calls: nothing is recorded there (available() is false).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace bench::io_trace {

struct Event {
  std::chrono::steady_clock::time_point at;  // when the call returned
  int fd = -1;
  int thread = 0;          // set_thread()'s number of the calling thread
  bool write = false;      // send/sendmsg/write; else a read
  std::int32_t bytes = 0;  // > 0: calls that moved nothing are not recorded
  char head[12] = {};      // the first bytes moved (fewer when `bytes` is smaller)
};

/// Whether calls are interposed in this build.
bool available() noexcept;

/// Numbers the calling thread's events (0 unless set).
void set_thread(int number) noexcept;

/// Starts recording into a buffer of `capacity` events (calls past it are not recorded and
/// counted in dropped()); stop() ends it and returns the events in the order they returned.
void start(std::size_t capacity);
std::vector<Event> stop();
std::size_t dropped() noexcept;

}  // namespace bench::io_trace
