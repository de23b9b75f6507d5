// SPDX-License-Identifier: MIT
// Layer 1 (protocol), sans-io: the record of one idempotent request (issue 50,
// docs/design/idempotency.md) and its transitions, as the specification its store scripts
// must follow. Each transition is one atomic script on the store; this is the same table in
// C++, with no server and no clock (the store's `now` comes in with the event), so that every
// state x event is tested here (tests/unit/idempotency_record_test.cpp) and the scripts are
// tested against the same rows on a live server.
#pragma once

#include "resp.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace redis_lock::detail::idempotency {

enum class State {
  none,       ///< no record: the key was never begun (or the store lost it)
  running,    ///< an attempt may have reached downstream: look it up before sending again
  void_,      ///< the last attempt did not reach downstream: the next begins it again
  decided,    ///< the downstream's answer, kept: replayed to every later request
  escalated,  ///< the outcome could not be learnt in time: an operator decides
};

/// One request key's record (a hash on the store).
struct Record {
  State state = State::none;
  std::string fingerprint;     ///< what identifies the request (another one: a mismatch)
  std::uint32_t attempt = 0;   ///< 1, 2, ...: the current attempt
  std::string downstream_key;  ///< that attempt's downstream key, derived (downstream_key_of)
  std::uint64_t fence = 0;     ///< the highest fencing token that began or resumed it
  std::int64_t began_ms = 0;   ///< the store's clock when the current attempt began
  int status = 0;              ///< decided: the response's status
  std::string body;            ///< decided: the response's bytes
  std::string external_id;     ///< decided: the downstream's id of the effect (a charge id)
  std::uint32_t looks = 0;     ///< the looks that found the attempt's outcome unknown
  /// The request's payload, kept while it is undecided (only a reconciler's begin reads it).
  std::optional<std::string> payload;

  friend bool operator==(const Record&, const Record&) = default;
};

/// The downstream key of attempt `attempt` of request `key`: `<key>/<attempt>`. A key must
/// not contain '/' (the component refuses it), so that the keys of `A-1` and `A-10` are told
/// apart by their prefix `<key>/` when a lookup covers every attempt.
std::string downstream_key_of(const std::string& key, std::uint32_t attempt);

// ---- the events: one per script ------------------------------------------------------------

/// A request under the key's lock, with that lock's fencing token.
struct Begin {
  std::string key;
  std::string fingerprint;
  std::uint64_t fence = 0;
  std::int64_t now_ms = 0;
};
enum class BeginReply {
  created,    ///< none -> running, attempt 1: send it
  restarted,  ///< void -> running, the same attempt and downstream key: send it
  resumed,    ///< running, fence raised: the outcome is unknown, resolve before sending
  replay,     ///< decided: answer its response; nothing runs
  escalated,  ///< an operator decides; nothing runs
  mismatch,   ///< another fingerprint for this key; nothing changes
  stale,      ///< a lower fencing token than the record's: a superseded holder
};

/// The reconciler, under the key's lock, takes a running attempt over to look at it: as a
/// Begin that never creates a record and takes any fingerprint (it knows none).
struct Resume {
  std::uint64_t fence = 0;
};
enum class ResumeReply {
  resumed,    ///< running, fence raised: resolve it
  none,       ///< no record (the store lost it, or it expired): nothing to look at
  void_,      ///< nothing to look at: the next request begins it again
  replay,     ///< decided meanwhile
  escalated,  ///< an operator decides
  stale,      ///< a lower fencing token than the record's
};

/// The attempt did not happen (work said "not executed", or resolve "never happened").
struct Void {
  std::string downstream_key;
  std::uint64_t fence = 0;
};
/// The attempt's downstream key is spent and nothing happened under any attempt: the next
/// attempt, with a new downstream key.
struct Next {
  std::string key;
  std::string downstream_key;
  std::uint64_t fence = 0;
  std::int64_t now_ms = 0;
};
/// The outcome stayed unknown past the bound: an operator decides.
struct Escalate {
  std::string downstream_key;
  std::uint64_t fence = 0;
  std::int64_t now_ms = 0;
  std::int64_t min_age_ms = 0;  ///< only an attempt at least this old (the store's clock)
};
enum class GuardedReply {
  done,       ///< the transition was made
  refused,    ///< not running, another attempt's key, or another fencing token: nothing changes
  too_young,  ///< Escalate only: the attempt is younger than the bound
};

/// The downstream's answer for an attempt. Keyed, not fenced: a holder whose lease lapsed
/// mid-call still records the answer for its own attempt's key (the same answer whoever hears
/// it), never for a later attempt's (another key) and never over a decision.
struct Decide {
  std::string fingerprint;  ///< rebuilds a record the store lost
  std::uint32_t attempt = 0;
  std::string downstream_key;
  int status = 0;
  std::string body;
  std::string external_id;
};
enum class DecideReply {
  recorded,  ///< now decided
  already,   ///< decided before (the stored response stands; it is what the caller answers)
  refused,   ///< another attempt's key (a late answer of a superseded attempt)
};

/// An operator's word on an escalated request (nothing else moves it): it was decided (they
/// found the effect downstream), or nothing happened under any attempt (it is reopened: the
/// next request sends a new attempt, under a new downstream key).
struct Settle {
  int status = 0;
  std::string body;
  std::string external_id;
};
struct Reopen {
  std::string key;
};
enum class OperatorReply {
  done,     ///< the transition was made
  refused,  ///< the request is not escalated: nothing changes
};

BeginReply apply(Record& r, const Begin& e);
ResumeReply apply(Record& r, const Resume& e);
GuardedReply apply(Record& r, const Void& e);
GuardedReply apply(Record& r, const Next& e);
GuardedReply apply(Record& r, const Escalate& e);
DecideReply apply(Record& r, const Decide& e);
OperatorReply apply(Record& r, const Settle& e);
OperatorReply apply(Record& r, const Reopen& e);

/// A script's reply: its word and the record after it, the store's clock, and a word more
/// (idem_defer: when the next look is due).
struct StoreReply {
  std::string word;
  Record record;
  std::int64_t now_ms = 0;
  std::string extra;
};
/// nullopt: not the shape the scripts answer.
std::optional<StoreReply> read_store_reply(const Reply& reply);
/// idem_due.lua's reply: the store's clock and the due keys; nullopt when malformed.
struct DueKeys {
  std::int64_t now_ms = 0;
  std::vector<std::string> keys;
};
std::optional<DueKeys> read_due(const Reply& reply);

}  // namespace redis_lock::detail::idempotency
