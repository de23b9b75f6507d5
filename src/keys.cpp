// SPDX-License-Identifier: MIT
// CRC16 slots, and the 16384-entry table of tags that lets one fencing counter per slot serve
// every resource in that slot: Redis memory stays bounded however many resources exist.
#include "keys.hpp"

#include <array>
#include <string>

namespace redis_lock::detail {
namespace {

constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    std::uint16_t crc = static_cast<std::uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr auto crc_table = make_crc_table();

struct TagTable {
  std::array<std::string, slot_count> tags;
  TagTable() {
    // Decimal numbers cover every slot after roughly 10^5 candidates; each tag stays short.
    std::size_t filled = 0;
    for (std::uint32_t n = 0; filled < slot_count; ++n) {
      std::string candidate = std::to_string(n);
      auto& entry = tags[key_slot(candidate)];
      if (entry.empty()) {
        entry = std::move(candidate);
        ++filled;
      }
    }
  }
};

}  // namespace

std::uint16_t crc16(std::string_view data) noexcept {
  std::uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<std::uint16_t>((crc << 8) ^ crc_table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

std::uint16_t key_slot(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(crc16(key) & (slot_count - 1));
}

std::string_view slot_tag(std::uint16_t slot) noexcept {
  static const TagTable table;
  return table.tags[slot & (slot_count - 1)];
}

ResourceKeys make_keys(std::string_view prefix, std::string_view resource, bool lease_set) {
  // Every other key carries the tag of the lease's slot explicitly: appending to the lease
  // key would not do, since a resource starting with '}' gives the lease an empty tag (then
  // the whole key is hashed). Each kind of key has its own prefix, so no two collide.
  const std::string_view queue = lease_set ? "sq:{" : "q:{";
  const std::string_view queue_expiry = lease_set ? "sqx:{" : "qx:{";
  ResourceKeys keys;
  std::string& t = keys.text_;
  t.reserve(5 * prefix.size() + 4 * resource.size() + 50);  // tags: 6 characters at most
  t.append(prefix).append("{").append(resource).append("}");
  keys.ends_[0] = t.size();
  const auto tag = slot_tag(key_slot(t));
  t.append(prefix).append("fence:{").append(tag).append("}");
  keys.ends_[1] = t.size();
  t.append(prefix).append(queue).append(tag).append("}").append(resource);
  keys.ends_[2] = t.size();
  t.append(prefix).append(queue_expiry).append(tag).append("}").append(resource);
  keys.ends_[3] = t.size();
  t.append(prefix).append("h:{").append(tag).append("}").append(resource);
  keys.ends_[4] = t.size();
  return keys;
}

}  // namespace redis_lock::detail
