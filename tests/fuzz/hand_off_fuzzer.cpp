// SPDX-License-Identifier: MIT
// libFuzzer target: hand-off messages. Anyone who may publish on a manager's channel can send
// any bytes; read_hand_off must read them without going past the message, grant a fencing
// token only to a well-formed '<token> <fencing token> <place>[ <mac>]', and hand the
// signature check exactly the text the release signed. The book keeps only what a release
// could have sent.
#include "token.hpp"
#include "waiters.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace redis_lock::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string message(reinterpret_cast<const char*>(data), size);
  const auto h = read_hand_off(message);
  if (h.token != std::string_view(message).substr(0, 32)) std::abort();
  if (h.fence != 0) {
    if (message.size() < 32 + 4 || message[32] != ' ' || h.place <= 0) std::abort();
  } else if (h.place != 0 || !h.mac.empty()) {
    std::abort();  // a nudge carries nothing else
  }
  if (!h.mac.empty()) {
    if (h.mac.size() != 40 || h.signed_by.size() + 1 + 40 != message.size()) std::abort();
    if (message.compare(0, h.signed_by.size(), h.signed_by) != 0 ||
        message[h.signed_by.size()] != ' ') {
      std::abort();
    }
    for (const char c : h.mac) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) std::abort();
    }
    const std::string secret(32, '7');
    const auto mac = hand_off_mac(secret, h.signed_by);
    if (mac.size() != 40) std::abort();
    if (equal_in_constant_time(mac, h.mac) != (mac == h.mac)) std::abort();
  }
  HandOffBook book;
  book.keep(message);
  const auto kept = book.take_kept(std::string(h.token));
  if (kept && (*kept != message || message.size() > longest_hand_off_message)) std::abort();
  return 0;
}
