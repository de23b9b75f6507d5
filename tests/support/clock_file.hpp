// SPDX-License-Identifier: MIT
// A server's wall clock offset for the clock shim (tests/explore/clock_shim.cpp): a file of
// one 64-bit offset in milliseconds, mapped here and by every server started inside
// `with_shim()`. Writing the offset steps those servers' clocks.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

namespace redis_lock::test {

class ClockFile {
 public:
  ClockFile() {
    char name[] = "/tmp/redis-lock-clock-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) return;
    path_ = name;
    if (::ftruncate(fd, 4096) == 0) {
      void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) cell_ = new (p) std::atomic<std::int64_t>(0);
    }
    ::close(fd);
  }
  ~ClockFile() {
    if (cell_ != nullptr) ::munmap(cell_, 4096);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  ClockFile(const ClockFile&) = delete;
  ClockFile& operator=(const ClockFile&) = delete;

  /// The offset's cell (null when the file could not be made: no clock steps then).
  std::atomic<std::int64_t>* cell() const noexcept { return cell_; }

  /// Runs `start` (a server's start or restart) with the shim preloaded into what it execs.
  template <class Start>
  void with_shim(const char* shim, Start&& start) const {
    if (cell_ != nullptr) {
      ::setenv("REDIS_LOCK_CLOCK_FILE", path_.c_str(), 1);
      ::setenv("LD_PRELOAD", shim, 1);
    }
    try {
      start();
    } catch (...) {
      ::unsetenv("LD_PRELOAD");
      ::unsetenv("REDIS_LOCK_CLOCK_FILE");
      throw;
    }
    ::unsetenv("LD_PRELOAD");
    ::unsetenv("REDIS_LOCK_CLOCK_FILE");
  }

 private:
  std::string path_;
  std::atomic<std::int64_t>* cell_ = nullptr;
};

}  // namespace redis_lock::test
