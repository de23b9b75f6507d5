// SPDX-License-Identifier: MIT
// Layer 4 (engine): one script call on one lease, the unit every engine op is made of.
#pragma once

#include "keys.hpp"
#include "quorum_call.hpp"
#include "router.hpp"

#include "script_table.hpp"

#include <memory>
#include <optional>

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

  /// The call's words (script_table.hpp), which view strings the op owns.
  template <class Call>
  void set(const Call& call) noexcept {
    static_assert(scripts::max_words<Call> <= std::tuple_size_v<decltype(argv)>);
    script_body = Call::script.body;
    rearm();
    argc = scripts::encode(call, argv);
  }

  std::shared_ptr<Engine> service;
  ResourceKeys keys;
  bool wants_late = false;
};

}  // namespace redis_lock::detail
