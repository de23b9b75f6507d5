// SPDX-License-Identifier: MIT
// A preload for redis-server that steps its wall clock, and nothing else: CLOCK_REALTIME
// (clock_gettime), gettimeofday and time are shifted by an offset in milliseconds that a
// test writes into a shared file (REDIS_LOCK_CLOCK_FILE: 8 bytes, mapped once). The
// monotonic clocks, sleeps and timed waits are left alone, which is why this works where
// libfaketime hangs redis-server 7.0 at start-up. Key expiry, TIME and the scripts' clock all
// read the wall clock, so a step here is a step of the server's clock.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace {

using clock_gettime_fn = int (*)(clockid_t, timespec*);
using gettimeofday_fn = int (*)(timeval*, void*);

std::atomic<const std::atomic<std::int64_t>*> offset_cell{nullptr};
std::atomic<bool> looked{false};

/// The offset in ms (0 until the file is there).
std::int64_t offset_ms() {
  if (!looked.load(std::memory_order_acquire)) {
    // Racing first calls each map the file; one mapping wins, the others stay (harmless).
    const std::atomic<std::int64_t>* cell = nullptr;
    if (const char* path = std::getenv("REDIS_LOCK_CLOCK_FILE")) {
      const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        void* p = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        if (p != MAP_FAILED) cell = static_cast<const std::atomic<std::int64_t>*>(p);
      }
    }
    offset_cell.store(cell, std::memory_order_release);
    looked.store(true, std::memory_order_release);
  }
  const auto* cell = offset_cell.load(std::memory_order_acquire);
  return cell ? cell->load(std::memory_order_relaxed) : 0;
}

template <class Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

void shift(timespec* ts, std::int64_t ms) {
  std::int64_t ns = static_cast<std::int64_t>(ts->tv_nsec) + (ms % 1000) * 1000000;
  std::int64_t s = static_cast<std::int64_t>(ts->tv_sec) + ms / 1000;
  if (ns < 0) {
    ns += 1000000000;
    --s;
  } else if (ns >= 1000000000) {
    ns -= 1000000000;
    ++s;
  }
  ts->tv_sec = static_cast<time_t>(s);
  ts->tv_nsec = static_cast<long>(ns);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int clock_gettime(clockid_t id, timespec* ts) noexcept {
  static const auto real = next<clock_gettime_fn>("clock_gettime");
  const int rc = real(id, ts);
  if (rc == 0 && ts != nullptr && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    if (const auto ms = offset_ms()) shift(ts, ms);
  }
  return rc;
}

__attribute__((visibility("default"))) int gettimeofday(timeval* tv, void* tz) noexcept {
  static const auto real = next<gettimeofday_fn>("gettimeofday");
  const int rc = real(tv, tz);
  if (rc == 0 && tv != nullptr) {
    if (const auto ms = offset_ms()) {
      timespec ts{tv->tv_sec, static_cast<long>(tv->tv_usec) * 1000};
      shift(&ts, ms);
      tv->tv_sec = ts.tv_sec;
      tv->tv_usec = static_cast<suseconds_t>(ts.tv_nsec / 1000);
    }
  }
  return rc;
}

__attribute__((visibility("default"))) time_t time(time_t* out) noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out != nullptr) *out = ts.tv_sec;
  return ts.tv_sec;
}

}  // extern "C"
