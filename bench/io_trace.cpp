// SPDX-License-Identifier: MIT
#include "io_trace.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define IO_TRACE_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define IO_TRACE_OFF 1
#endif
#endif

namespace bench::io_trace {
namespace {

std::atomic<bool> recording{false};
std::atomic<std::size_t> next{0};
std::atomic<std::size_t> lost{0};
std::vector<Event> buffer;
thread_local int thread_number = 0;

/// Records a call that moved `bytes` (nothing when it moved none); `readable` of them are at
/// `data`.
void note(int fd, bool write, const void* data, long bytes, std::size_t readable) {
  if (bytes <= 0 || !recording.load(std::memory_order_acquire)) return;
  const auto at = std::chrono::steady_clock::now();
  const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
  if (i >= buffer.size()) {
    lost.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Event& e = buffer[i];
  e.at = at;
  e.fd = fd;
  e.thread = thread_number;
  e.write = write;
  e.bytes = static_cast<std::int32_t>(bytes);
  if (data != nullptr) std::memcpy(e.head, data, std::min(sizeof e.head, readable));
}

}  // namespace

#ifdef IO_TRACE_OFF
bool available() noexcept { return false; }
#else
bool available() noexcept { return true; }
#endif

void set_thread(int number) noexcept { thread_number = number; }

void start(std::size_t capacity) {
  recording.store(false);
  buffer.assign(capacity, Event{});
  next.store(0);
  lost.store(0);
  recording.store(true, std::memory_order_release);
}

std::vector<Event> stop() {
  recording.store(false, std::memory_order_release);
  const std::size_t n = std::min(next.load(), buffer.size());
  std::vector<Event> out(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n));
  std::stable_sort(out.begin(), out.end(),
                   [](const Event& a, const Event& b) { return a.at < b.at; });
  return out;
}

std::size_t dropped() noexcept { return lost.load(); }

}  // namespace bench::io_trace

#ifndef IO_TRACE_OFF
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

// Each call forwards to the C library's own function, found once with dlsym(RTLD_NEXT).
namespace {
template <typename Fn>
Fn next_definition(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
#define IO_TRACE_NEXT(name) static const auto real = next_definition<decltype(&::name)>(#name)

// A message's first buffer, and how many of the bytes moved it holds.
const void* first_buffer(const msghdr* m) {
  return m != nullptr && m->msg_iovlen > 0 ? m->msg_iov[0].iov_base : nullptr;
}
std::size_t first_length(const msghdr* m, ssize_t moved) {
  if (m == nullptr || m->msg_iovlen == 0 || moved <= 0) return 0;
  return std::min(static_cast<std::size_t>(moved), m->msg_iov[0].iov_len);
}
}  // namespace

extern "C" ssize_t send(int fd, const void* data, size_t n, int flags) {
  IO_TRACE_NEXT(send);
  const ssize_t r = real(fd, data, n, flags);
  bench::io_trace::note(fd, true, data, r, r);
  return r;
}
extern "C" ssize_t recv(int fd, void* data, size_t n, int flags) {
  IO_TRACE_NEXT(recv);
  const ssize_t r = real(fd, data, n, flags);
  bench::io_trace::note(fd, false, data, r, r);
  return r;
}
extern "C" ssize_t sendmsg(int fd, const struct msghdr* m, int flags) {
  IO_TRACE_NEXT(sendmsg);
  const ssize_t r = real(fd, m, flags);
  bench::io_trace::note(fd, true, first_buffer(m), r, first_length(m, r));
  return r;
}
extern "C" ssize_t recvmsg(int fd, struct msghdr* m, int flags) {
  IO_TRACE_NEXT(recvmsg);
  const ssize_t r = real(fd, m, flags);
  bench::io_trace::note(fd, false, first_buffer(m), r, first_length(m, r));
  return r;
}
extern "C" ssize_t write(int fd, const void* data, size_t n) {
  IO_TRACE_NEXT(write);
  const ssize_t r = real(fd, data, n);
  bench::io_trace::note(fd, true, data, r, r);
  return r;
}
extern "C" ssize_t read(int fd, void* data, size_t n) {
  IO_TRACE_NEXT(read);
  const ssize_t r = real(fd, data, n);
  bench::io_trace::note(fd, false, data, r, r);
  return r;
}
#endif
