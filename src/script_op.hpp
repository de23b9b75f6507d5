// SPDX-License-Identifier: MIT
// Layer 4 (engine): one script call on one lease, the unit every engine op is made of.
#pragma once

#include "keys.hpp"
#include "quorum_call.hpp"
#include "router.hpp"

#include "redis_lock_scripts.hpp"

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

namespace redis_lock::detail {

class Engine;

/// A script call. Its argument views point into its own strings, which never move (ops live
/// in a shared_ptr). The op also takes the late reply of a command that timed out, if it
/// wants it.
struct ScriptOp : Routed, LateReplies, std::enable_shared_from_this<ScriptOp> {
  void on_late_reply(boost::system::error_code, const Reply&) override {}
  std::shared_ptr<LateReplies> late_replies() override {
    if (!wants_late) return nullptr;
    return std::static_pointer_cast<LateReplies>(shared_from_this());
  }
  /// Redlock: what the fan-out needs to decide an acquire (nothing for other scripts).
  virtual std::optional<QuorumAcquire> quorum_acquire() { return std::nullopt; }

  /// Up to 7 keys, and 16 words in all.
  void set_args(const Script& s, std::initializer_list<std::string_view> script_keys,
                std::initializer_list<std::string_view> script_args) {
    script_body = s.body;
    rearm();
    argv[0] = "EVALSHA";
    argv[1] = s.sha1;
    static constexpr std::string_view counts[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
    argv[2] = counts[script_keys.size()];
    argc = 3;
    for (auto k : script_keys) argv[argc++] = k;
    for (auto a : script_args) argv[argc++] = a;
  }

  std::shared_ptr<Engine> service;
  ResourceKeys keys;
  std::string token;
  std::string arg;       // ttl in ms (acquire, extend) or the release's member suffix
  std::string announce;  // an election's leadership: '<P|S><channel>' of its observers
  bool wants_late = false;
};

}  // namespace redis_lock::detail
