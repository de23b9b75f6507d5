// SPDX-License-Identifier: MIT
#include "connect_fsm.hpp"

#include "info_text.hpp"

#include <redis_lock/error.hpp>

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

namespace redis_lock::detail {

using boost::system::error_code;

using Act = ConnectFsm::Action;

ConnectFsm::Action ConnectFsm::queued(Clock::time_point now, Queue q) noexcept {
  switch (state_) {
    case State::closed:
      return reconnect(now, q, {});
    case State::ready:
      return {.next = Act::Next::write};
    case State::backoff:
    case State::connecting:
    case State::handshake:
      break;  // the backoff's end or the handshake's writes the queue
  }
  return {};
}

ConnectFsm::Action ConnectFsm::reconnect(Clock::time_point now, Queue q, Action act) noexcept {
  if (!q.waiting) return act;
  if (now < next_connect_at_) {
    const auto wake = std::min(next_connect_at_, q.oldest_deadline - command_timeout_ / 2);
    if (wake > now) {
      state_ = State::backoff;
      act.next = Act::Next::wait;
      act.until = wake;
      return act;
    }
  }
  state_ = State::connecting;
  act.next = Act::Next::connect;
  return act;
}

ConnectFsm::Action ConnectFsm::backoff_over(Queue q) noexcept {
  if (state_ != State::backoff) return {};
  if (!q.waiting) {
    state_ = State::closed;
    return {};
  }
  // The timer was armed for this moment: the backoff's end, or half the oldest command's
  // time, whichever came first.
  state_ = State::connecting;
  return {.next = Act::Next::connect};
}

ConnectFsm::Action ConnectFsm::transport_up() noexcept {
  if (state_ != State::connecting) return {};
  state_ = State::handshake;
  return {.next = Act::Next::handshake};
}

ConnectFsm::Action ConnectFsm::handshake_done() noexcept {
  if (state_ != State::handshake) return {};
  state_ = State::ready;
  backoff_.reset();
  next_connect_at_ = {};
  return {.next = Act::Next::write};
}

ConnectFsm::Action ConnectFsm::connect_failed(Clock::time_point now, error_code e) noexcept {
  if (state_ != State::connecting && state_ != State::handshake) return {};
  state_ = State::closed;
  next_connect_at_ = now + backoff_.next(draw_);
  return {.link = Act::Link::fail, .error = e};
}

ConnectFsm::Action ConnectFsm::connect_deadline(Clock::time_point now) noexcept {
  return connect_failed(now, error::connect_timeout);
}

ConnectFsm::Action ConnectFsm::link_failed(Clock::time_point now, error_code e, Queue q) noexcept {
  if (state_ == State::connecting || state_ == State::handshake) {
    return connect_failed(now,
                          e == error::tls_handshake_failed ? e : error_code(error::connect_failed));
  }
  if (state_ != State::ready) return {};
  state_ = State::closed;
  next_connect_at_ = {};
  const error_code why = e == error::tls_handshake_failed ? error::connection_lost : e;
  return reconnect(now, q, {.link = Act::Link::drop, .error = why});
}

ConnectFsm::Action ConnectFsm::late(Clock::time_point now, Queue q) noexcept {
  if (state_ != State::ready) return {};
  state_ = State::closed;
  return reconnect(now, q, {.link = Act::Link::drain});
}

ConnectFsm::Action ConnectFsm::idle(bool has_work, bool busy) noexcept {
  const bool unneeded = state_ == State::ready                                      ? !has_work
                        : state_ == State::connecting || state_ == State::handshake ? !busy
                                                                                    : false;
  if (!unneeded) return {};
  // (A connect given up keeps its backoff: a server that is down is not tried sooner.)
  state_ = State::closed;
  return {.link = Act::Link::close};
}

ConnectFsm::Action ConnectFsm::nothing_waiting() noexcept {
  if (state_ != State::backoff) return {};
  state_ = State::closed;
  return {.next = Act::Next::stop_wait};
}

ConnectFsm::Action ConnectFsm::leave(Clock::time_point now, Queue q) noexcept {
  if (state_ != State::ready) return {};
  return link_failed(now, error::connection_lost, q);
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
  if (s.check_version) {
    // After AUTH: an unauthenticated HELLO with a protocol version is refused (NOAUTH).
    // Protocol 2 is what the connection speaks anyway.
    append_command(out, {"HELLO", "2"});
    steps.push_back(Step::hello);
    // Whether the server may evict our keys (leases, queue places: all with a ttl). INFO
    // needs no CONFIG right, only +info, which an ACL may leave out (then: a notice).
    append_command(out, {"INFO", "memory"});
    steps.push_back(Step::info_memory);
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
  if (!s.function_probe.empty()) {
    // The library is loaded once per server (and kept across its restarts and failovers,
    // as its data is): a few bytes ask whether it is there, where loading every script in
    // every handshake sent about 55 KB.
    // FCALL_RO (the probe writes nothing): counted apart from the lock calls' FCALL.
    append_command(out, {"FCALL_RO", s.function_probe, "0"});
    steps.push_back(Step::function_probe);
  } else {
    auto more = plan_scripts(s.preload, out);
    steps.insert(steps.end(), more.begin(), more.end());
  }
  if (steps.empty()) {
    // Nothing to say first: ask for nothing, but still learn that the server answers.
    append_command(out, {"PING"});
    steps.push_back(Step::ping);
  }
  return steps;
}

std::vector<Handshake::Step> Handshake::plan_scripts(std::span<const std::string_view> preload,
                                                     std::string& out) {
  std::vector<Step> steps;
  for (const auto body : preload) {
    append_command(out, {"SCRIPT", "LOAD", body});
    steps.push_back(Step::script_load);
  }
  return steps;
}

bool Handshake::functions_ready(Step step, const Reply& reply) {
  if (step == Step::function_probe) {
    return reply.type == Reply::Type::integer && reply.integer == 1;
  }
  if (step != Step::function_load) return false;
  // "ERR Library 'redis_lock_...' already exists": this build's library, the same text (its
  // name carries the text's hash).
  return !reply.is_error() || reply.str.find("already exists") != std::string::npos;
}

namespace {

/// The server's name and version from a HELLO reply in RESP2 (a flat array of names and
/// values: "server", "redis", "version", "7.0.15", ...); empty where it does not say.
struct ServerVersion {
  std::string_view name;
  std::string_view version;
};

ServerVersion server_version(const Reply& reply) {
  ServerVersion found;
  if (reply.type != Reply::Type::array) return found;
  for (std::size_t i = 0; i + 1 < reply.elements.size(); i += 2) {
    const auto& key = reply.elements[i];
    const auto& value = reply.elements[i + 1];
    if (key.type != Reply::Type::string || value.type != Reply::Type::string) continue;
    if (key.str == "server") found.name = value.str;
    if (key.str == "version") found.version = value.str;
  }
  return found;
}

/// "major.minor..." as two numbers; nullopt when the text does not start so.
std::optional<std::pair<int, int>> major_minor(std::string_view version) {
  int parts[2] = {0, 0};
  std::size_t at = 0;
  for (int& part : parts) {
    const auto begin = at;
    while (at < version.size() && version[at] >= '0' && version[at] <= '9' && at - begin < 6) {
      part = part * 10 + (version[at] - '0');
      ++at;
    }
    if (at == begin) return std::nullopt;
    if (&part == &parts[0]) {
      if (at >= version.size() || version[at] != '.') return std::nullopt;
      ++at;
    }
  }
  return std::pair{parts[0], parts[1]};
}

bool too_old(std::string_view version) {
  const auto found = major_minor(version);
  // A version we cannot read is not held against the server.
  return found && *found < std::pair{min_server_major, min_server_minor};
}

bool unknown_command(std::string_view text) { return text.starts_with("ERR unknown command"); }

/// A server loading its data after a restart, running a long script, or a replica cut off
/// from its master is down for now, not refusing us.
bool transient(std::string_view text) {
  for (const std::string_view word : {"LOADING", "BUSY", "MASTERDOWN"}) {
    if (text.starts_with(word)) return true;
  }
  return false;
}

std::optional<unsigned long long> parse_bytes(std::string_view text) {
  unsigned long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string eviction_words(const Eviction& e) {
  return "the lock server evicts keys (maxmemory-policy " + e.policy + ", maxmemory " +
         std::to_string(e.maxmemory) + "): a lease could vanish while held";
}

/// Whether the server evicts is unknown: what it said instead, and what would tell.
std::string unknown_words(std::string_view why) {
  return "whether the lock server evicts keys is unknown (" + std::string(why) +
         "): a lease could vanish while held on a server that does; give the lock user +info, "
         "or make sure the server's maxmemory-policy is noeviction";
}

}  // namespace

Eviction read_eviction(const Reply& reply) {
  Eviction found;
  if (reply.type != Reply::Type::string && reply.type != Reply::Type::status) {
    found.missing = "INFO memory answered no text";
    return found;
  }
  const auto maxmemory = info_field(reply.str, "maxmemory");
  const auto policy = info_field(reply.str, "maxmemory_policy");
  const auto bytes = maxmemory ? parse_bytes(*maxmemory) : std::nullopt;
  if (!bytes) {
    found.missing =
        maxmemory ? "INFO memory's maxmemory is not a number" : "INFO memory has no maxmemory";
    return found;
  }
  found.maxmemory = *bytes;
  if (!policy || policy->empty()) {
    found.missing = "INFO memory has no maxmemory_policy";
    return found;
  }
  found.policy = *policy;
  // With maxmemory 0 the server never evicts (64-bit; a 32-bit server reports the limit it
  // sets itself): any policy is fine then.
  found.verdict = found.maxmemory > 0 && found.policy != "noeviction" ? Eviction::Verdict::evicts
                                                                      : Eviction::Verdict::never;
  return found;
}

std::optional<error_code> Handshake::check(Step step, const Reply& reply, bool accept_evicting) {
  if (step == Step::info_memory) {
    if (!reply.is_error()) {
      // A reply without the two fields (a proxy's, a fork's) leaves the policy unknown, as
      // a refused INFO does: a notice, not a refusal, which could shut out a server that
      // never evicts for want of a field.
      const bool evicts = read_eviction(reply).verdict == Eviction::Verdict::evicts;
      if (evicts && !accept_evicting) return error_code(error::server_evicts);
      return std::nullopt;
    }
    // INFO is in @dangerous, and an ACL may leave it out (NOPERM); a server may have renamed
    // it away, a proxy refuse it. The connect cannot know, and goes on (a notice says so).
    // Only what would fail any step fails this one: a server down for now, or one that
    // wants authentication.
    if (transient(reply.str)) return error_code(error::connect_failed);
    if (error_from_reply(reply.str) == error::not_authenticated) {
      return error_code(error::not_authenticated);
    }
    return std::nullopt;
  }
  if (step == Step::hello) {
    // Redis < 6.0 does not know HELLO (nor does a server that renamed it away). HELLO needs
    // no ACL right on Redis >= 6.2 and Valkey; a NOPERM (Redis 6.0, or a proxy) leaves the
    // version unknown, which is not held against the server. Any other refusal is judged
    // as for the other steps.
    if (reply.is_error() && unknown_command(reply.str)) {
      return error_code(error::server_unsupported);
    }
    if (!reply.is_error()) {
      if (too_old(server_version(reply).version)) return error_code(error::server_unsupported);
      return std::nullopt;
    }
    if (reply.str.starts_with("NOPERM")) return std::nullopt;
  }
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
  // while it loads, Redis refuses SCRIPT LOAD and FCALL (one of which a lock connection always
  // sends) and
  // lets AUTH, SELECT, CLIENT SETNAME and ROLE through.
  const std::string_view text = reply.str;
  if (transient(text)) return error_code(error::connect_failed);
  // A user without the right to name its connection, or to load scripts ahead, may still
  // take locks (a script not loaded goes with its first command).
  if (step == Step::setname || step == Step::script_load) return std::nullopt;
  // No library (Functions refused by the ACL, a replica's READONLY, a server out of memory):
  // the scripts go with EVALSHA. Only a missing authentication fails the step, as any.
  if (step == Step::function_load || step == Step::function_probe) {
    if (error_from_reply(text) == error::not_authenticated) {
      return error_code(error::not_authenticated);
    }
    return std::nullopt;
  }
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

std::string Handshake::refusal_text(Step step, const Reply& reply) {
  if (step == Step::info_memory && !reply.is_error()) {
    return eviction_words(read_eviction(reply)) +
           "; set maxmemory-policy noeviction, or ManagerOptions::accept_evicting_server";
  }
  if (step == Step::role && !reply.is_error()) {
    const bool named = reply.type == Reply::Type::array && !reply.elements.empty() &&
                       reply.elements[0].type == Reply::Type::string;
    return "ROLE says " + (named ? reply.elements[0].str : std::string("nothing")) +
           ", not master: the sentinels' master is not (or no longer) one";
  }
  if (step != Step::hello || (reply.is_error() && !unknown_command(reply.str))) return reply.str;
  std::string text = "redis_lock needs a lock server at version " +
                     std::to_string(min_server_major) + "." + std::to_string(min_server_minor) +
                     " or later (Redis >= 7.0, Valkey): ";
  if (reply.is_error()) {
    return text + "this one does not know HELLO, so it is older than 6.0 (" + reply.str + ")";
  }
  const auto found = server_version(reply);
  return text + "this one is " + std::string(found.name.empty() ? "a server" : found.name) + " " +
         std::string(found.version);
}

std::optional<Handshake::Notice> Handshake::notice(Step step, const Reply& reply) {
  if (step != Step::info_memory) return std::nullopt;
  if (reply.is_error()) {
    return Notice{ServerNoticeKind::policy_unknown, unknown_words("INFO refused: " + reply.str)};
  }
  const auto found = read_eviction(reply);
  switch (found.verdict) {
    case Eviction::Verdict::never:
      return std::nullopt;
    case Eviction::Verdict::evicts:
      return Notice{ServerNoticeKind::evicting_policy,
                    eviction_words(found) + " (accepted: ManagerOptions::accept_evicting_server)"};
    case Eviction::Verdict::unknown:
      break;
  }
  return Notice{ServerNoticeKind::policy_unknown, unknown_words(found.missing)};
}

}  // namespace redis_lock::detail
