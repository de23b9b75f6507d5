// SPDX-License-Identifier: MIT
#include "connect_fsm.hpp"

#include <redis_lock/error.hpp>

#include <algorithm>

namespace redis_lock::detail {

using boost::system::error_code;

ConnectFsm::Action ConnectFsm::need_link(Clock::time_point now,
                                         Clock::time_point oldest_deadline) noexcept {
  if (now >= next_connect_at_) return connect();
  const auto wake = std::min(next_connect_at_, oldest_deadline - command_timeout_ / 2);
  if (wake <= now) return connect();
  state_ = State::backoff;
  return {Action::Kind::wait, wake};
}

ConnectFsm::Action ConnectFsm::backoff_over(bool queued) noexcept {
  if (state_ != State::backoff) return {};
  if (!queued) {
    state_ = State::closed;
    return {};
  }
  return connect();
}

ConnectFsm::Action ConnectFsm::connect() noexcept {
  state_ = State::connecting;
  return {Action::Kind::connect, {}};
}

void ConnectFsm::ready() noexcept {
  state_ = State::ready;
  backoff_.reset();
  next_connect_at_ = {};
}

void ConnectFsm::failed(Clock::time_point now) noexcept {
  state_ = State::closed;
  next_connect_at_ = now + backoff_.next();
}

void ConnectFsm::lost() noexcept {
  state_ = State::closed;
  next_connect_at_ = {};
}

std::chrono::milliseconds drain_grace(std::chrono::milliseconds command_timeout) noexcept {
  return std::max(command_timeout * 10, std::chrono::milliseconds(2000));
}

std::vector<Handshake::Step> Handshake::plan(const Settings& s, std::string& out) {
  // AUTH / SELECT / CLIENT SETNAME go out alone, and user commands wait until every reply
  // is in: pipelining them together could run a lock command on a connection whose AUTH
  // failed.
  std::vector<Step> steps;
  if (!s.password.empty()) {
    if (s.username.empty()) {
      append_command(out, {"AUTH", s.password});
    } else {
      append_command(out, {"AUTH", s.username, s.password});
    }
    steps.push_back(Step::auth);
  }
  if (s.database != 0) {
    const auto db = std::to_string(s.database);
    append_command(out, {"SELECT", db});
    steps.push_back(Step::select);
  }
  if (!s.client_name.empty()) {
    append_command(out, {"CLIENT", "SETNAME", s.client_name});
    steps.push_back(Step::setname);
  }
  if (s.confirm_master) {
    // The address came from a sentinel, which may not have noticed a failover yet: only a
    // master will do.
    append_command(out, {"ROLE"});
    steps.push_back(Step::role);
  }
  for (const auto body : s.preload) {
    append_command(out, {"SCRIPT", "LOAD", body});
    steps.push_back(Step::script_load);
  }
  if (steps.empty()) {
    // Nothing to say first: ask for nothing, but still learn that the server answers.
    append_command(out, {"PING"});
    steps.push_back(Step::ping);
  }
  return steps;
}

std::optional<error_code> Handshake::check(Step step, const Reply& reply) {
  if (!reply.is_error()) {
    if (step == Step::role &&
        !(reply.type == Reply::Type::array && !reply.elements.empty() &&
          reply.elements[0].type == Reply::Type::string && reply.elements[0].str == "master")) {
      return error_code(error::master_not_found);
    }
    return std::nullopt;
  }
  // A server loading its data after a restart, running a long script, or a replica cut off
  // from its master is down for now, not refusing us: a failed connect, retried with backoff
  // (and ridden out by an acquire that waits), never "wrong password". Whatever the step:
  // while it loads, Redis refuses SCRIPT LOAD (which a lock connection always sends) and
  // lets AUTH, SELECT, CLIENT SETNAME and ROLE through.
  const std::string_view text = reply.str;
  for (const std::string_view transient : {"LOADING", "BUSY", "MASTERDOWN"}) {
    if (text.starts_with(transient)) return error_code(error::connect_failed);
  }
  // A user without the right to name its connection, or to load scripts ahead, may still
  // take locks (a script not loaded goes with its first command).
  if (step == Step::setname || step == Step::script_load) return std::nullopt;
  const auto code = error_from_reply(text);
  if (code != error::server_error) return code;
  switch (step) {
    case Step::select:
      // "ERR DB index is out of range", "ERR SELECT is not allowed in cluster mode": the
      // configuration asks for what is not there.
      return error_code(error::invalid_argument);
    case Step::role:
      return error_code(error::master_not_found);  // not confirmed as a master
    case Step::auth:
      return error_code(error::auth_failed);
    default:
      // A PING refused otherwise (renamed, say): the server answers, and says no.
      return error_code(error::server_error);
  }
}

}  // namespace redis_lock::detail
