// SPDX-License-Identifier: MIT
// The idempotent requests' store scripts (src/scripts/idem_*.lua) against their
// specification, the record's transition table in C++ (src/idempotency_record.hpp): seeded
// random sequences of every event on a few keys, each event applied to the model and run on
// a real server, the reply word, the record the script answers and the record stored
// compared after every step, and the reconciler's indexes checked against the states.
#include "idempotency_record.hpp"
#include "raw_redis.hpp"
#include "redis_lock_scripts.hpp"
#include "redis_server.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <charconv>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace redis_lock;
using namespace redis_lock::detail::idempotency;
namespace script = redis_lock::detail;

namespace {

struct Said {
  std::string word;
  Record record;
  long long now_ms = 0;
};

std::uint64_t to_u64(const std::string& s) {
  std::uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

State state_of(const std::string& s) {
  if (s == "running") return State::running;
  if (s == "void") return State::void_;
  if (s == "decided") return State::decided;
  if (s == "escalated") return State::escalated;
  EXPECT_EQ(s, "") << "an unknown state";
  return State::none;
}

class Store {
 public:
  explicit Store(std::uint16_t port) : c_(redisConnect("127.0.0.1", port), redisFree) {
    if (!c_ || c_->err) throw std::runtime_error("cannot connect");
  }
  /// EVAL of `s` (its body, as a client without the library sends it).
  Said eval(const script::Script& s, const std::vector<std::string>& keys,
            const std::vector<std::string>& args) {
    std::vector<std::string> words = {"EVAL", std::string(s.body), std::to_string(keys.size())};
    words.insert(words.end(), keys.begin(), keys.end());
    words.insert(words.end(), args.begin(), args.end());
    const auto r = run(words);
    Said out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 14) {
      ADD_FAILURE() << "not a record reply: " << (r->str ? r->str : "?");
      return out;
    }
    std::vector<std::string> e;
    for (std::size_t i = 0; i < r->elements; ++i) {
      e.emplace_back(r->element[i]->str, r->element[i]->len);
    }
    out.word = e[0];
    out.record.state = state_of(e[1]);
    out.record.fingerprint = e[2];
    out.record.attempt = static_cast<std::uint32_t>(to_u64(e[3]));
    out.record.downstream_key = e[4];
    out.record.fence = to_u64(e[5]);
    out.record.began_ms = static_cast<std::int64_t>(to_u64(e[6]));
    out.record.status = static_cast<int>(to_u64(e[7]));
    out.record.body = e[8];
    out.record.external_id = e[9];
    out.now_ms = static_cast<long long>(to_u64(e[10]));
    return out;
  }
  bool in_index(const std::string& index, const std::string& member) {
    return run({"ZSCORE", index, member})->type == REDIS_REPLY_STRING;
  }
  void zrem(const std::string& index, const std::string& member) { run({"ZREM", index, member}); }
  void del(const std::vector<std::string>& keys) {
    std::vector<std::string> words = {"DEL"};
    words.insert(words.end(), keys.begin(), keys.end());
    run(words);
  }

 private:
  test::ReplyPtr run(const std::vector<std::string>& words) {
    auto r = test::raw_command(c_.get(), words);
    if (!r) throw std::runtime_error("connection lost");
    return r;
  }
  std::unique_ptr<redisContext, decltype(&redisFree)> c_;
};

template <class Reply>
const char* word_of(Reply r);
template <>
const char* word_of(BeginReply r) {
  switch (r) {
    case BeginReply::created:
      return "created";
    case BeginReply::restarted:
      return "restarted";
    case BeginReply::resumed:
      return "resumed";
    case BeginReply::replay:
      return "replay";
    case BeginReply::escalated:
      return "escalated";
    case BeginReply::mismatch:
      return "mismatch";
    case BeginReply::stale:
      return "stale";
  }
  return "?";
}
template <>
const char* word_of(ResumeReply r) {
  switch (r) {
    case ResumeReply::resumed:
      return "resumed";
    case ResumeReply::none:
      return "none";
    case ResumeReply::void_:
      return "void";
    case ResumeReply::replay:
      return "replay";
    case ResumeReply::escalated:
      return "escalated";
    case ResumeReply::stale:
      return "stale";
  }
  return "?";
}
template <>
const char* word_of(GuardedReply r) {
  switch (r) {
    case GuardedReply::done:
      return "done";
    case GuardedReply::refused:
      return "refused";
    case GuardedReply::too_young:
      return "too_young";
  }
  return "?";
}
template <>
const char* word_of(OperatorReply r) {
  switch (r) {
    case OperatorReply::done:
      return "done";
    case OperatorReply::refused:
      return "refused";
  }
  return "?";
}
template <>
const char* word_of(DecideReply r) {
  switch (r) {
    case DecideReply::recorded:
      return "recorded";
    case DecideReply::already:
      return "already";
    case DecideReply::refused:
      return "refused";
  }
  return "?";
}

}  // namespace

TEST(IdempotencyStore, TheScriptsMakeTheRecordsTransitionsRowByRow) {
  Store store(test::shared_server_port());
  const std::string prefix = "idemtest:" + std::to_string(::getpid()) + ":";
  const std::string due = prefix + "idem:due:{s0}";
  const std::string esc = prefix + "idem:esc:{s0}";
  const std::vector<std::string> keys = {"order-1", "order-10", "A"};
  std::map<std::string, Record> model;
  auto record_of = [&](const std::string& key) { return prefix + "idem:{s0}" + key; };
  for (const auto& k : keys) store.del({record_of(k)});
  store.del({due, esc});

  // Fencing tokens of 19 and 20 digits (past what a Lua number holds exactly: the scripts
  // compare them as text), a few apart.
  const std::uint64_t fences[] = {1'800'000'000'000'000'000ull, 1'800'000'000'000'000'001ull,
                                  1'800'000'000'000'000'002ull, 9'999'999'999'999'999'999ull,
                                  10'000'000'000'000'000'000ull};
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto pick = [&](auto n) { return static_cast<std::size_t>(rng() % n); };
  std::map<std::string, int> seen;  // how often each reply word came: every row is reached

  const char* const rows[] = {
      "begin created",   "begin restarted",  "begin resumed",      "begin replay",
      "begin escalated", "begin mismatch",   "begin stale",        "resume resumed",
      "resume none",     "resume void",      "resume replay",      "resume escalated",
      "void done",       "void refused",     "next done",          "next refused",
      "escalate done",   "escalate refused", "escalate too_young", "decide recorded",
      "decide already",  "decide refused",   "settle done",        "settle refused",
      "reopen done",     "reopen refused"};
  const auto every_row_seen = [&] {
    for (const char* row : rows) {
      if (seen[row] == 0) return false;
    }
    return true;
  };
  // At least 3,000 steps, and on until every row was reached (a few rows are rare: an
  // escalated record begun again needs three events in a row on one key).
  for (int step = 0; step < 3000 || (step < 30000 && !every_row_seen()); ++step) {
    const auto& key = keys[pick(keys.size())];
    Record& m = model[key];
    const Record before = m;
    const std::uint64_t fence = fences[pick(std::size(fences))];
    const std::string fence_text = std::to_string(fence);
    const std::string fp = pick(5) == 0 ? "other" : "fp";
    // The running attempt's key mostly, else another attempt's.
    const std::string dkey = pick(4) == 0 || m.downstream_key.empty()
                                 ? downstream_key_of(key, 1 + static_cast<std::uint32_t>(pick(3)))
                                 : m.downstream_key;
    // The holder's own token mostly, so that the guarded events get through.
    const std::string guard_fence = pick(3) == 0 ? fence_text : std::to_string(m.fence);
    const auto event = pick(9);
    std::string what, expected;
    Said said;
    const std::vector<std::string> two = {record_of(key), due};
    switch (event) {
      case 0: {
        said = store.eval(script::idem_begin_script, two, {fp, key, fence_text, "60000", "run"});
        expected = word_of(apply(m, Begin{key, fp, fence, said.now_ms}));
        what = "begin " + fp + " " + fence_text;
        break;
      }
      case 1: {
        said = store.eval(script::idem_begin_script, two, {"", key, fence_text, "60000", "resume"});
        expected = word_of(apply(m, Resume{fence}));
        what = "resume " + fence_text;
        break;
      }
      case 2: {
        said = store.eval(script::idem_void_script, two, {key, dkey, guard_fence});
        expected = word_of(apply(m, Void{dkey, to_u64(guard_fence)}));
        what = "void " + dkey + " " + guard_fence;
        break;
      }
      case 3: {
        said = store.eval(script::idem_next_script, two, {key, dkey, guard_fence, "60000"});
        expected = word_of(apply(m, Next{key, dkey, to_u64(guard_fence), said.now_ms}));
        what = "next " + dkey + " " + guard_fence;
        break;
      }
      case 4: {
        const long long bound = pick(2) == 0 ? 0 : 3'600'000;
        said = store.eval(script::idem_escalate_script, {record_of(key), due, esc},
                          {key, dkey, guard_fence, std::to_string(bound)});
        expected = word_of(apply(m, Escalate{dkey, to_u64(guard_fence), said.now_ms, bound}));
        what = "escalate " + dkey + " " + guard_fence + " past " + std::to_string(bound);
        break;
      }
      case 5: {
        const auto attempt =
            static_cast<std::uint32_t>(std::stoul(dkey.substr(dkey.find('/') + 1)));
        const int status = 200 + static_cast<int>(pick(300));
        const std::string body =
            "body " + std::to_string(step) + (pick(2) ? std::string("\r\n\0x", 4) : std::string());
        said = store.eval(script::idem_decide_script, {record_of(key), due, esc},
                          {key, fp, std::to_string(attempt), dkey, std::to_string(status), body,
                           "ch_" + std::to_string(step), "0"});
        expected = word_of(
            apply(m, Decide{fp, attempt, dkey, status, body, "ch_" + std::to_string(step)}));
        what = "decide " + dkey;
        break;
      }
      case 6: {
        said = store.eval(script::idem_settle_script, {record_of(key), esc},
                          {key, "299", "settled " + std::to_string(step), "op", "0"});
        expected = word_of(apply(m, Settle{299, "settled " + std::to_string(step), "op"}));
        what = "settle";
        break;
      }
      case 7: {
        said = store.eval(script::idem_reopen_script, {record_of(key), esc}, {key});
        expected = word_of(apply(m, Reopen{key}));
        what = "reopen";
        break;
      }
      default: {
        // The store forgets the record (a failover, a restore, an expiry): the model too.
        // (A failover loses the record's indexes with it: one script wrote both.)
        store.del({record_of(key)});
        store.zrem(due, key);
        store.zrem(esc, key);
        m = Record{};
        said = store.eval(script::idem_look_script, {record_of(key)}, {});
        expected = "look";
        what = "forgotten";
        break;
      }
    }
    SCOPED_TRACE("step " + std::to_string(step) + " on " + key + ": " + what);
    ASSERT_EQ(said.word, expected) << "from " << static_cast<int>(before.state);
    ++seen[what.substr(0, what.find(' ')) + " " + expected];
    ASSERT_EQ(said.record, m) << "the record the script answered";
    const auto stored = store.eval(script::idem_look_script, {record_of(key)}, {});
    ASSERT_EQ(stored.record, m) << "the record stored";
    // The reconciler looks at every running attempt, and only at those; the operators'
    // list holds every escalated one, and only those.
    {
      ASSERT_EQ(store.in_index(due, key), m.state == State::running) << "the due index";
      ASSERT_EQ(store.in_index(esc, key), m.state == State::escalated) << "the escalated index";
    }
  }
  for (const char* row : rows) {
    EXPECT_GT(seen[row], 0) << row << " was never reached in 30,000 steps";
  }
  for (const auto& k : keys) store.del({record_of(k)});
  store.del({due, esc});
}
