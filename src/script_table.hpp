// SPDX-License-Identifier: MIT
// Layer 1 (protocol): the one table of our scripts (src/scripts/*.lua). Per script: a typed
// call, its keys and arguments by name as its Lua header's `-- KEYS:` and `-- ARGV:` lines
// name them (an optional word in brackets: a call leaves it out); its reply's decoder; its
// flags (the Lua header's `-- flags:` line, which cmake/library.cmake reads); and the
// commands its text may call (what its user's ACL must allow). One encoder
// (script_words.hpp) makes the words of every call. tests/unit/script_table_test.cpp holds each
// entry to its Lua text.
#pragma once

#include "idempotency_record.hpp"
#include "keys.hpp"
#include "replies.hpp"
#include "script_words.hpp"

#include "redis_lock_scripts.hpp"

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock::detail::scripts {

// ---------------------------------------------------------------------------------------
// The locks' scripts

/// acquire.lua: a mutex's attempt (and an election's candidate's).
struct Acquire {
  static constexpr const Script& script = acquire_script;
  static constexpr Layout layout{
      "lease fence queue queue_expiry [info]",
      "token ttl_ms mode place_ms member_suffix [announce]", Flags::writes,
      "del exists get incr pexpire pexpireat pttl publish set spublish time zadd zrange "
      "zrangebyscore zrem zrevrangebyscore zscore",
      Preload::everywhere};
  static constexpr auto decode = &replies::read_acquire;
  /// '0': take it or not; '1': join the queue when held; '2': as '1', after a hand-off
  /// message (read first: the lease is likely ours); 'R': Redlock (no queue).
  enum class Mode : char { alone = '0', queue = '1', claim = '2', redlock = 'R' };

  std::string_view lease, fence, queue, queue_expiry;
  Optional info = std::nullopt;  ///< none on Redlock
  std::string_view token, ttl_ms;
  Mode mode = Mode::alone;
  std::string_view place_ms, member_suffix;
  Optional announce = std::nullopt;  ///< an election's candidate

  auto keys() const noexcept {
    return std::array<Word, 5>{lease, fence, queue, queue_expiry, info};
  }
  auto args() const noexcept {
    return std::array<Word, 6>{token, ttl_ms, mode_word(mode), place_ms, member_suffix, announce};
  }
  static constexpr std::string_view mode_word(Mode m) noexcept {
    switch (m) {
      case Mode::alone:
        return "0";
      case Mode::queue:
        return "1";
      case Mode::claim:
        return "2";
      case Mode::redlock:
        return "R";
    }
    return "0";
  }
};

/// acquire_set.lua: one hold of a semaphore or a read-write lock.
struct AcquireSet {
  static constexpr const Script& script = acquire_set_script;
  static constexpr Layout layout{
      "lease fence queue queue_expiry mutex_queue",
      "token ttl_ms mode place_ms member_suffix marker", Flags::writes,
      "del exists get incr pexpire pexpireat pttl publish set spublish time zadd zcard zrange "
      "zrangebyscore zrank zrem zremrangebyscore zrevrangebyscore zscore",
      Preload::one_master};
  static constexpr auto decode = &replies::read_acquire;

  std::string_view lease, fence, queue, queue_expiry, mutex_queue;
  std::string_view token, ttl_ms;
  bool joins = false;  ///< joins the queue when it cannot take a hold now
  std::string_view place_ms, member_suffix, marker;

  auto keys() const noexcept {
    return std::array<Word, 5>{lease, fence, queue, queue_expiry, mutex_queue};
  }
  auto args() const noexcept {
    return std::array<Word, 6>{token,    ttl_ms,        std::string_view(joins ? "1" : "0"),
                               place_ms, member_suffix, marker};
  }
};

/// release.lua: a mutex's holder gives it up (or a waiter its place).
struct Release {
  static constexpr const Script& script = release_script;
  static constexpr Layout layout{
      "lease queue queue_expiry fence [info]", "token member_suffix notify [announce]",
      Flags::allow_oom,
      "del exists get incr pexpireat pttl publish set spublish time zrange zrangebyscore zrem "
      "zrevrangebyscore zscore",
      Preload::everywhere};
  static constexpr auto decode = &replies::read_compare;

  std::string_view lease, queue, queue_expiry, fence;
  Optional info = std::nullopt;  ///< none on Redlock
  std::string_view token, member_suffix, notify;
  Optional announce = std::nullopt;  ///< an election's leader

  auto keys() const noexcept {
    return std::array<Word, 5>{lease, queue, queue_expiry, fence, info};
  }
  auto args() const noexcept { return std::array<Word, 4>{token, member_suffix, notify, announce}; }
};

/// release_set.lua: one hold of a lease set given back (or a waiter's place).
struct ReleaseSet {
  static constexpr const Script& script = release_set_script;
  static constexpr Layout layout{
      "lease queue queue_expiry", "token member_suffix notify", Flags::allow_oom,
      "del exists get incr pexpireat pttl publish set spublish time zadd zcard zrange "
      "zrangebyscore zrem zremrangebyscore zrevrangebyscore zscore",
      Preload::one_master};
  static constexpr auto decode = &replies::read_compare;

  std::string_view lease, queue, queue_expiry;
  std::string_view token, member_suffix, notify;

  auto keys() const noexcept { return std::array<Word, 3>{lease, queue, queue_expiry}; }
  auto args() const noexcept { return std::array<Word, 3>{token, member_suffix, notify}; }
};

/// extend.lua: a mutex's lease extended (a renewal, LockGuard::async_extend).
struct Extend {
  static constexpr const Script& script = extend_script;
  static constexpr Layout layout{"lease [info]", "token ttl_ms [announce]", Flags::allow_oom,
                                 "get pexpire publish spublish", Preload::everywhere};
  static constexpr auto decode = &replies::read_compare;

  std::string_view lease;
  Optional info = std::nullopt;  ///< an election's leader: its record, renewed and announced
  std::string_view token, ttl_ms;
  Optional announce = std::nullopt;  ///< an election's leader

  auto keys() const noexcept { return std::array<Word, 2>{lease, info}; }
  auto args() const noexcept { return std::array<Word, 3>{token, ttl_ms, announce}; }
};

/// touch.lua: a mutex holder's label replaced (LockGuard::async_touch).
struct Touch {
  static constexpr const Script& script = touch_script;
  static constexpr Layout layout{"lease info", "token label", Flags::writes, "get set"};
  static constexpr auto decode = &replies::read_compare;

  std::string_view lease, info;
  std::string_view token, label;

  auto keys() const noexcept { return std::array<Word, 2>{lease, info}; }
  auto args() const noexcept { return std::array<Word, 2>{token, label}; }
};

/// extend_set.lua: one hold of a lease set extended.
struct ExtendSet {
  static constexpr const Script& script = extend_set_script;
  static constexpr Layout layout{"lease", "holder ttl_ms place_ms", Flags::allow_oom,
                                 "incr pexpireat pttl set time zadd zrevrangebyscore zscore",
                                 Preload::one_master};
  static constexpr auto decode = &replies::read_compare;

  std::string_view lease;
  std::string_view holder, ttl_ms, place_ms;  ///< holder: token .. mode

  auto keys() const noexcept { return std::array<Word, 1>{lease}; }
  auto args() const noexcept { return std::array<Word, 3>{holder, ttl_ms, place_ms}; }
};

/// acquire_group.lua: several mutexes of one slot at once, or none. Its keys repeat: the
/// fencing counter, then each resource's lease, queue and info.
struct AcquireGroup {
  static constexpr const Script& script = acquire_group_script;
  static constexpr Layout layout{"fence (lease queue info)...", "token ttl_ms data", Flags::writes,
                                 "del exists incr pexpireat pttl set time zrevrangebyscore",
                                 Preload::one_master};

  static constexpr auto decode = &replies::read_group;

  std::string_view fence;
  std::span<const ResourceKeys> resources;
  std::string_view token, ttl_ms, data;
  /// Its own, as the words' count word points into it.
  std::string* key_count = nullptr;
};

/// raise_fence.lua: Redlock's max-register write of a node's fencing counter.
struct RaiseFence {
  static constexpr const Script& script = raise_fence_script;
  static constexpr Layout layout{"fence", "token", Flags::writes, "get set", Preload::redlock};

  std::string_view fence, token;

  auto keys() const noexcept { return std::array<Word, 1>{fence}; }
  auto args() const noexcept { return std::array<Word, 1>{token}; }
};

/// inspect.lua: who holds a resource, changing nothing.
struct Inspect {
  static constexpr const Script& script = inspect_script;
  static constexpr Layout layout{
      "lease info queue_expiry sets_queue_expiry", "", Flags::no_writes,
      "del exists get incr pexpireat pttl publish set spublish time type zcount zrange "
      "zrangebyscore zrem zrevrangebyscore zscore"};

  std::string_view lease, info, queue_expiry, sets_queue_expiry;

  auto keys() const noexcept {
    return std::array<Word, 4>{lease, info, queue_expiry, sets_queue_expiry};
  }
  auto args() const noexcept { return std::array<Word, 0>{}; }
};

/// force_release.lua: a resource taken from whoever holds it.
struct ForceRelease {
  static constexpr const Script& script = force_release_script;
  static constexpr Layout layout{
      "lease queue queue_expiry fence info sets_queue sets_queue_expiry", "notify announce",
      Flags::allow_oom,
      "del exists get incr pexpireat pttl publish set spublish time type zrange zrangebyscore "
      "zrem zremrangebyscore zrevrangebyscore zscore"};
  static constexpr auto decode = &replies::read_compare;

  std::string_view lease, queue, queue_expiry, fence, info, sets_queue, sets_queue_expiry;
  std::string_view notify, announce;

  auto keys() const noexcept {
    return std::array<Word, 7>{lease, queue,      queue_expiry,     fence,
                               info,  sets_queue, sets_queue_expiry};
  }
  auto args() const noexcept { return std::array<Word, 2>{notify, announce}; }
};

// ---------------------------------------------------------------------------------------
// The idempotent requests' scripts (their words are the call's own strings)

/// idem_look.lua: a record read (no writes).
struct IdemLook {
  static constexpr const Script& script = idem_look_script;
  static constexpr Layout layout{"record", "", Flags::no_writes, "hexists hmget pttl time"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record;
  auto keys() const noexcept { return std::array<Word, 1>{record}; }
  auto args() const noexcept { return std::array<Word, 0>{}; }
};

/// idem_begin.lua: a request's attempt begins (or is resumed).
struct IdemBegin {
  static constexpr const Script& script = idem_begin_script;
  static constexpr Layout layout{"record due", "fingerprint key fence first_look_ms mode [payload]",
                                 Flags::writes, "hget hmget hset time zadd zrem"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, due;
  std::string fingerprint, key, fence, first_look_ms, mode;
  std::optional<std::string> payload;
  auto keys() const noexcept { return std::array<Word, 2>{record, due}; }
  auto args() const noexcept {
    return std::array<Word, 6>{fingerprint, key, fence, first_look_ms, mode, payload};
  }
};

/// idem_void.lua: an attempt that never reached downstream is void.
struct IdemVoid {
  static constexpr const Script& script = idem_void_script;
  static constexpr Layout layout{"record due", "key downstream_key fence", Flags::allow_oom,
                                 "hdel hmget hset time zrem"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, due;
  std::string key, downstream_key, fence;
  auto keys() const noexcept { return std::array<Word, 2>{record, due}; }
  auto args() const noexcept { return std::array<Word, 3>{key, downstream_key, fence}; }
};

/// idem_next.lua: the next attempt begins.
struct IdemNext {
  static constexpr const Script& script = idem_next_script;
  static constexpr Layout layout{"record due", "key downstream_key fence first_look_ms",
                                 Flags::writes, "hmget hset time zadd"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, due;
  std::string key, downstream_key, fence, first_look_ms;
  auto keys() const noexcept { return std::array<Word, 2>{record, due}; }
  auto args() const noexcept {
    return std::array<Word, 4>{key, downstream_key, fence, first_look_ms};
  }
};

/// idem_escalate.lua: an attempt whose outcome stays unknown goes to a person.
struct IdemEscalate {
  static constexpr const Script& script = idem_escalate_script;
  static constexpr Layout layout{"record due escalated", "key downstream_key fence min_age_ms",
                                 Flags::allow_oom, "hmget hset time zadd zrem"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, due, escalated;
  std::string key, downstream_key, fence, min_age_ms;
  auto keys() const noexcept { return std::array<Word, 3>{record, due, escalated}; }
  auto args() const noexcept { return std::array<Word, 4>{key, downstream_key, fence, min_age_ms}; }
};

/// idem_defer.lua: the reconciler looks again later.
struct IdemDefer {
  static constexpr const Script& script = idem_defer_script;
  static constexpr Layout layout{"record due", "key downstream_key fence base_ms cap_ms",
                                 Flags::allow_oom, "hmget hset time zadd"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, due;
  std::string key, downstream_key, fence, base_ms, cap_ms;
  auto keys() const noexcept { return std::array<Word, 2>{record, due}; }
  auto args() const noexcept {
    return std::array<Word, 5>{key, downstream_key, fence, base_ms, cap_ms};
  }
};

/// idem_decide.lua: an attempt's outcome recorded.
struct IdemDecide {
  static constexpr const Script& script = idem_decide_script;
  static constexpr Layout layout{
      "record due escalated",
      "key fingerprint attempt downstream_key status body external_id retention_ms",
      Flags::allow_oom, "hdel hmget hset pexpire time zrem"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, due, escalated;
  std::string key, fingerprint, attempt, downstream_key, status, body, external_id, retention_ms;
  auto keys() const noexcept { return std::array<Word, 3>{record, due, escalated}; }
  auto args() const noexcept {
    return std::array<Word, 8>{key,    fingerprint, attempt,     downstream_key,
                               status, body,        external_id, retention_ms};
  }
};

/// idem_settle.lua: an escalated request settled by a person.
struct IdemSettle {
  static constexpr const Script& script = idem_settle_script;
  static constexpr Layout layout{"record escalated", "key status body external_id retention_ms",
                                 Flags::allow_oom, "hdel hmget hset pexpire time zrem"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, escalated;
  std::string key, status, body, external_id, retention_ms;
  auto keys() const noexcept { return std::array<Word, 2>{record, escalated}; }
  auto args() const noexcept {
    return std::array<Word, 5>{key, status, body, external_id, retention_ms};
  }
};

/// idem_reopen.lua: an escalated request sent again.
struct IdemReopen {
  static constexpr const Script& script = idem_reopen_script;
  static constexpr Layout layout{"record escalated", "key", Flags::allow_oom,
                                 "hdel hmget hset time zrem"};
  static constexpr auto decode = &idempotency::read_store_reply;
  std::string record, escalated;
  std::string key;
  auto keys() const noexcept { return std::array<Word, 2>{record, escalated}; }
  auto args() const noexcept { return std::array<Word, 1>{key}; }
};

/// idem_list.lua: an index's keys, oldest first (no writes).
struct IdemList {
  static constexpr const Script& script = idem_list_script;
  static constexpr Layout layout{"index", "limit", Flags::no_writes, "time zrange"};
  static constexpr auto decode = &idempotency::read_due;
  std::string index, limit;
  auto keys() const noexcept { return std::array<Word, 1>{index}; }
  auto args() const noexcept { return std::array<Word, 1>{limit}; }
};

/// idem_due.lua: the reconciler's claim of due keys.
struct IdemDue {
  static constexpr const Script& script = idem_due_script;
  static constexpr Layout layout{"due", "limit claim_ms", Flags::allow_oom, "time zadd zrange"};
  static constexpr auto decode = &idempotency::read_due;
  std::string due, limit, claim_ms;
  auto keys() const noexcept { return std::array<Word, 1>{due}; }
  auto args() const noexcept { return std::array<Word, 2>{limit, claim_ms}; }
};

/// idem_shards.lua: the store's shard count, checked (set by the first client).
struct IdemShards {
  static constexpr const Script& script = idem_shards_script;
  static constexpr Layout layout{"shards", "count", Flags::allow_oom, "get set"};
  std::string shards, count;
  auto keys() const noexcept { return std::array<Word, 1>{shards}; }
  auto args() const noexcept { return std::array<Word, 1>{count}; }
};

/// acquire_group.lua's words (any number of resources), into `out`.
void encode(const AcquireGroup& call, std::vector<std::string_view>& out);

/// The table itself, as the tests and the preload read it: each script's entry.
struct Entry {
  const Script& script;
  Layout layout;
};
template <class... Calls>
constexpr std::array<Entry, sizeof...(Calls)> entries() noexcept {
  return {Entry{Calls::script, Calls::layout}...};
}
inline constexpr auto all_entries =
    entries<Acquire, AcquireSet, Release, ReleaseSet, Extend, ExtendSet, Touch, AcquireGroup,
            RaiseFence, Inspect, ForceRelease, IdemLook, IdemBegin, IdemVoid, IdemNext,
            IdemEscalate, IdemDefer, IdemDecide, IdemSettle, IdemReopen, IdemList, IdemDue,
            IdemShards>();
inline std::span<const Entry> table() noexcept { return all_entries; }

}  // namespace redis_lock::detail::scripts
