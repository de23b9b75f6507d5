// SPDX-License-Identifier: MIT
#include "idempotency_record.hpp"

#include "decimal.hpp"

#include <charconv>

namespace redis_lock::detail::idempotency {

std::string downstream_key_of(const std::string& key, std::uint32_t attempt) {
  return key + "/" + to_decimal(attempt);
}

namespace {

/// The guard of the transitions that choose which downstream key is live: the holder that
/// began or resumed this very attempt (the same fencing token, the same key), while it runs.
bool ours(const Record& r, const std::string& downstream_key, std::uint64_t fence) {
  return r.state == State::running && r.downstream_key == downstream_key && r.fence == fence;
}

void start_attempt(Record& r, const std::string& key, std::uint32_t attempt, std::uint64_t fence,
                   std::int64_t now_ms) {
  r.state = State::running;
  r.attempt = attempt;
  r.downstream_key = downstream_key_of(key, attempt);
  r.fence = fence;
  r.began_ms = now_ms;
}

template <class T>
bool number(std::string_view text, T& out) {
  if (text.empty()) {
    out = 0;
    return true;
  }
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size();
}

std::optional<State> state_of(std::string_view word) {
  if (word.empty()) return State::none;
  if (word == "running") return State::running;
  if (word == "void") return State::void_;
  if (word == "decided") return State::decided;
  if (word == "escalated") return State::escalated;
  return std::nullopt;
}

}  // namespace

BeginReply apply(Record& r, const Begin& e) {
  // A mismatch is told before anything else: a request with other parameters never gets
  // another request's response, and never takes its key over (not even a void one: its
  // downstream key may still carry the first request's late effect).
  if (r.state != State::none && r.fingerprint != e.fingerprint) return BeginReply::mismatch;
  // Decided and escalated records answer whoever asks, before any fencing check: a replay
  // needs no lock, and a superseded holder asking again is told the truth.
  if (r.state == State::decided) return BeginReply::replay;
  if (r.state == State::escalated) return BeginReply::escalated;
  if (r.state != State::none && e.fence < r.fence) return BeginReply::stale;
  switch (r.state) {
    case State::none:
      r = Record{};
      r.fingerprint = e.fingerprint;
      start_attempt(r, e.key, 1, e.fence, e.now_ms);
      return BeginReply::created;
    case State::void_:
      // The same attempt and key (nothing happened under it), a new holder and a new start.
      r.state = State::running;
      r.fence = e.fence;
      r.began_ms = e.now_ms;
      return BeginReply::restarted;
    case State::running:
      // Another holder takes over an attempt whose outcome nobody knows: only the fencing
      // token moves (the attempt's age and its place in the reconciler's schedule stay).
      r.fence = e.fence;
      return BeginReply::resumed;
    case State::decided:
    case State::escalated:
      break;
  }
  return BeginReply::stale;  // (not reached)
}

ResumeReply apply(Record& r, const Resume& e) {
  switch (r.state) {
    case State::none:
      return ResumeReply::none;
    case State::void_:
      return ResumeReply::void_;
    case State::decided:
      return ResumeReply::replay;
    case State::escalated:
      return ResumeReply::escalated;
    case State::running:
      break;
  }
  if (e.fence < r.fence) return ResumeReply::stale;
  r.fence = e.fence;
  return ResumeReply::resumed;
}

GuardedReply apply(Record& r, const Void& e) {
  if (!ours(r, e.downstream_key, e.fence)) return GuardedReply::refused;
  r.state = State::void_;
  return GuardedReply::done;
}

GuardedReply apply(Record& r, const Next& e) {
  if (!ours(r, e.downstream_key, e.fence)) return GuardedReply::refused;
  start_attempt(r, e.key, r.attempt + 1, e.fence, e.now_ms);
  return GuardedReply::done;
}

GuardedReply apply(Record& r, const Escalate& e) {
  if (!ours(r, e.downstream_key, e.fence)) return GuardedReply::refused;
  if (e.now_ms - r.began_ms < e.min_age_ms) return GuardedReply::too_young;
  r.state = State::escalated;
  return GuardedReply::done;
}

DecideReply apply(Record& r, const Decide& e) {
  if (r.state == State::decided) return DecideReply::already;
  if (r.state == State::none) {
    // The store lost the record (a failover, a restore): the answer rebuilds it.
    r.fingerprint = e.fingerprint;
    r.attempt = e.attempt;
    r.downstream_key = e.downstream_key;
  } else if (r.downstream_key != e.downstream_key) {
    return DecideReply::refused;  // a superseded attempt's late answer
  }
  r.state = State::decided;
  r.status = e.status;
  r.body = e.body;
  r.external_id = e.external_id;
  return DecideReply::recorded;
}

OperatorReply apply(Record& r, const Settle& e) {
  if (r.state != State::escalated) return OperatorReply::refused;
  r.state = State::decided;
  r.status = e.status;
  r.body = e.body;
  r.external_id = e.external_id;
  return OperatorReply::done;
}

OperatorReply apply(Record& r, const Reopen& e) {
  if (r.state != State::escalated) return OperatorReply::refused;
  // Void: nothing is out under the new attempt; the next request's begin restarts it.
  r.state = State::void_;
  r.attempt += 1;
  r.downstream_key = downstream_key_of(e.key, r.attempt);
  return OperatorReply::done;
}

std::optional<StoreReply> read_store_reply(const Reply& reply) {
  if (reply.type != Reply::Type::array || reply.elements.size() != 14) return std::nullopt;
  for (const auto& e : reply.elements) {
    if (e.type != Reply::Type::string) return std::nullopt;
  }
  const auto& e = reply.elements;
  StoreReply out;
  out.word = e[0].str;
  auto& r = out.record;
  const auto state = state_of(e[1].str);
  int status = 0;
  if (out.word.empty() || !state || !number(e[3].str, r.attempt) || !number(e[5].str, r.fence) ||
      !number(e[6].str, r.began_ms) || !number(e[7].str, status) ||
      !number(e[10].str, out.now_ms) || !number(e[12].str, r.looks) ||
      (!e[13].str.empty() && e[13].str.front() != '+')) {
    return std::nullopt;
  }
  r.state = *state;
  r.fingerprint = e[2].str;
  r.downstream_key = e[4].str;
  r.status = status;
  r.body = e[8].str;
  r.external_id = e[9].str;
  out.extra = e[11].str;
  if (!e[13].str.empty()) r.payload = e[13].str.substr(1);
  return out;
}

std::optional<DueKeys> read_due(const Reply& reply) {
  if (reply.type != Reply::Type::array || reply.elements.empty()) return std::nullopt;
  DueKeys out;
  for (const auto& e : reply.elements) {
    if (e.type != Reply::Type::string) return std::nullopt;
  }
  if (!number(reply.elements[0].str, out.now_ms)) return std::nullopt;
  for (std::size_t i = 1; i < reply.elements.size(); ++i) {
    out.keys.push_back(reply.elements[i].str);
  }
  return out;
}

}  // namespace redis_lock::detail::idempotency
