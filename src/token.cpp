// SPDX-License-Identifier: MIT
// Tokens from the kernel CSPRNG (getrandom), read 4 KiB at a time into a per-thread page.
// The page is marked MADV_WIPEONFORK: a forked child sees it zeroed and refills it from the
// kernel, so two processes can never hand out the same bytes. Where the kernel lacks that
// flag, every token is read with its own getrandom call instead.
#include "token.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

#include <openssl/evp.h>

#include <sys/mman.h>
#include <sys/random.h>

namespace redis_lock::detail {
namespace {

constexpr std::size_t token_bytes = 16;
/// `size` bytes as lowercase hex digits.
std::string hex_of(const unsigned char* bytes, std::size_t size) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(2 * size, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  return out;
}

/// SHA-1 of `text` as 40 lowercase hex digits (what redis.sha1hex returns).
std::string sha1_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha1(), nullptr) != 1) return {};
  return hex_of(digest, size);
}

void fill_from_kernel(std::uint8_t* out, std::size_t size) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::getrandom(out + got, size - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
}

class RandomPage {
 public:
  RandomPage() {
    void* mem =
        ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return;
    if (::madvise(mem, sizeof(Page), MADV_WIPEONFORK) != 0) {
      ::munmap(mem, sizeof(Page));
      return;
    }
    page_ = static_cast<Page*>(mem);
  }
  ~RandomPage() {
    if (page_ != nullptr) {
      std::memset(page_, 0, sizeof(Page));
      ::munmap(page_, sizeof(Page));
    }
  }
  RandomPage(const RandomPage&) = delete;
  RandomPage& operator=(const RandomPage&) = delete;

  void take(std::uint8_t* out) {
    if (page_ == nullptr) return fill_from_kernel(out, token_bytes);
    // `filled` is zero on a new page and in a forked child (wiped): refill from the kernel.
    if (page_->filled == 0 || page_->next + token_bytes > sizeof page_->bytes) {
      fill_from_kernel(page_->bytes, sizeof page_->bytes);
      page_->next = 0;
      page_->filled = 1;
    }
    std::memcpy(out, page_->bytes + page_->next, token_bytes);
    std::memset(page_->bytes + page_->next, 0, token_bytes);  // handed out once, then gone
    page_->next += token_bytes;
  }

 private:
  struct Page {
    std::uint32_t filled;
    std::uint32_t next;
    std::uint8_t bytes[4096 - 8];
  };
  Page* page_ = nullptr;
};

}  // namespace

std::string random_token() {
  thread_local RandomPage page;
  std::uint8_t bytes[token_bytes];
  page.take(bytes);
  return hex_of(bytes, token_bytes);
}

std::string hand_off_mac(std::string_view secret, std::string_view text) {
  std::string inner;
  inner.reserve(secret.size() + 1 + text.size());
  inner.append(secret).append("\n").append(text);
  std::string outer(secret);
  outer.append(sha1_hex(inner));
  return sha1_hex(outer);
}

bool equal_in_constant_time(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return differ == 0;
}

}  // namespace redis_lock::detail
