// SPDX-License-Identifier: MIT
#include "library_use.hpp"

#include "script_call.hpp"

namespace redis_lock::detail {

namespace {

bool may_not_load(const Reply& reply) noexcept {
  return reply.is_error() &&
         (reply.str.starts_with("NOPERM") || reply.str.starts_with("ERR unknown command"));
}

}  // namespace

bool LibraryUse::start_handshake() noexcept {
  // (A user refused FCALL is not asked again.)
  probed_ = library_ && !fcall_refused_;
  found_ = false;
  loaded_in_handshake_ = false;
  return probed_;
}

void LibraryUse::on_handshake_reply(Handshake::Step step, const Reply& reply) noexcept {
  if (step == Handshake::Step::function_probe) {
    found_ = Handshake::functions_ready(step, reply);
    if (reply.is_error() && reply.str.starts_with("NOPERM")) fcall_refused_ = true;
  } else if (step == Handshake::Step::function_load) {
    found_ = Handshake::functions_ready(step, reply);
    if (may_not_load(reply)) function_load_refused_ = true;  // not asked again
  }
}

LibraryUse::Plan LibraryUse::handshake_answered(bool can_write) noexcept {
  if (!probed_) {
    // Its user was refused FCALL before (or there is no library): the handshake loaded the
    // scripts.
    functions_ = false;
    return {};
  }
  if (!found_ && !loaded_in_handshake_ && !function_load_refused_ && !fcall_refused_ && can_write) {
    loaded_in_handshake_ = true;
    return {.load_first = true};
  }
  Plan plan;
  if (found_) {
    functions_ = true;
  } else {
    plan = evalsha();
  }
  // A library flushed later, on this link, is loaded again (on_error).
  loaded_in_handshake_ = false;
  return plan;
}

LibraryUse::Plan LibraryUse::evalsha() noexcept {
  functions_ = false;
  // (Not again where this handshake loaded it, and failed.) What the SCRIPT LOADs answer
  // changes nothing: a user who may not load scripts sends each body once.
  return {.load_library = !function_load_refused_ && !fcall_refused_ && !loaded_in_handshake_,
          .load_scripts = true};
}

bool LibraryUse::on_queued_load(const Reply& reply, bool current) noexcept {
  if (Handshake::functions_ready(Handshake::Step::function_load, reply)) {
    // Only for this link: the next handshake asks again.
    if (!current || fcall_refused_) return false;
    functions_ = true;
    return true;
  }
  if (may_not_load(reply)) function_load_refused_ = true;  // not asked again
  return false;
}

std::optional<LibraryUse::Plan> LibraryUse::on_error(std::string_view error) noexcept {
  bool refused = false;
  if (!library_lost(error, &refused)) return std::nullopt;
  if (refused) fcall_refused_ = true;
  return evalsha();
}

}  // namespace redis_lock::detail
