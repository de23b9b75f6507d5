// SPDX-License-Identifier: MIT
#include "idempotency_store.hpp"

#include "decimal.hpp"
#include "engine.hpp"
#include "info_text.hpp"
#include "replies.hpp"
#include "script_op.hpp"

#include "redis_lock_scripts.hpp"

#include <redis_lock/error.hpp>

#include <algorithm>
#include <charconv>

namespace redis_lock::detail::idempotency {

using boost::system::error_code;

unsigned shard_of(std::string_view key, unsigned shards) noexcept {
  std::uint32_t h = 2166136261u;
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return shards == 0 ? 0 : h % shards;
}

StoreKeys shard_keys(std::string_view prefix, unsigned shard, std::string_view key) {
  const std::string tag = "{s" + to_decimal(shard) + "}";
  StoreKeys k;
  k.record.append(prefix).append("idem:").append(tag).append(key);
  k.due.append(prefix).append("idem:due:").append(tag);
  k.escalated.append(prefix).append("idem:esc:").append(tag);
  return k;
}

StoreKeys store_keys(std::string_view prefix, std::string_view key, unsigned shards) {
  return shard_keys(prefix, shard_of(key, shards), key);
}

namespace {

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

/// One script call whose reply goes to `done`, on the strand. Its words point into `words`,
/// which never moves once the op is made.
struct StoreOp final : ScriptOp {
  std::vector<std::string> words;
  std::function<void(error_code, Reply)> done;
  void on_reply(error_code ec, Reply reply) override {
    if (done) std::exchange(done, nullptr)(ec, std::move(reply));
  }
};

void send_op(Engine& store, std::shared_ptr<StoreOp> op) {
  // Once the context shut down, dropped, as Asio drops handlers (its strand is gone).
  if (!store.alive()) return;
  store.on_strand([op = std::move(op)]() mutable {
    auto& service = *op->service;
    if (!service.running()) return;  // the context shut down: dropped, as Asio drops handlers
    service.send(std::move(op));
  });
}

/// An EVALSHA of `script` (KEYS: the first `keys` words; ARGV: the others), sent to the slot
/// of its first key (a record's or a shard's index: one slot per shard); `done` gets the
/// reply, a server's error reply already an error_code. `confirm` (a write, with
/// IdempotencyOptions::store_replicas): the script goes on the connection that may block on
/// WAIT, and its reply counts once WAIT says that many replicas have it (fewer:
/// not_replicated, though the master has it).
void send_script(const std::shared_ptr<Engine>& store, const Script& script,
                 std::vector<std::string> words, std::size_t keys, const Replicas& confirm,
                 std::function<void(error_code, Reply)> done) {
  auto op = std::make_shared<StoreOp>();
  op->service = store;
  const int replicas = confirm.count;
  op->durable = replicas > 0;
  op->words = std::move(words);
  // Every word in place before argv views them (the vector does not move again).
  op->words.push_back(to_decimal(static_cast<long long>(keys)));
  op->slot = store->slot_of(op->words.front());
  op->script_body = script.body;
  op->argc = 0;
  op->argv[op->argc++] = "EVALSHA";
  op->argv[op->argc++] = script.sha1;
  op->argv[op->argc++] = op->words.back();
  for (std::size_t i = 0; i + 1 < op->words.size(); ++i) op->argv[op->argc++] = op->words[i];
  // (On the store's strand, from the op's on_reply: `sent` is alive.)
  op->done = [store, replicas, timeout = confirm.timeout, sent = op.get(), done = std::move(done)](
                 error_code ec, Reply reply) mutable {
    if (!ec && reply.is_error()) ec = store->server_error(reply);
    if (ec || replicas == 0) return done(ec, std::move(reply));
    // WAIT on the connection that carried the script: it counts the replicas that have
    // everything written on it so far, this script's writes included.
    store->confirm_replicas(sent->node, replicas, timeout,
                            Engine::Confirmed([reply = std::move(reply), done = std::move(done)](
                                                  error_code wait_ec, std::string_view) mutable {
                              done(wait_ec, std::move(reply));
                            }));
  };
  send_op(*store, std::move(op));
}

}  // namespace

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

void StoreCalls::call(const Script& script, std::vector<std::string> words, std::size_t keys,
                      StoreHandler done) {
  send_script(store_, script, std::move(words), keys,
              &script == &idem_look_script ? Replicas{} : replicas_,
              [done = std::move(done)](error_code ec, Reply reply) {
                // not_replicated: the master ran the script; its reply says what it did.
                if (ec && ec != error::not_replicated) return done(ec, StoreReply{});
                auto read = read_store_reply(reply);
                if (!read) return done(ec ? ec : error::unexpected_reply, StoreReply{});
                done(ec, std::move(*read));
              });
}

void StoreCalls::look(const std::string& key, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_look_script, {std::move(k.record)}, 1, std::move(done));
}

void StoreCalls::begin(const std::string& key, const std::string& fingerprint, std::uint64_t fence,
                       std::int64_t first_look_ms, bool resume, bool resend,
                       const std::optional<std::string>& payload, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  std::vector<std::string> words{std::move(k.record),
                                 std::move(k.due),
                                 fingerprint,
                                 key,
                                 to_decimal_u(fence),
                                 to_decimal(first_look_ms),
                                 !resume  ? "run"
                                 : resend ? "resend"
                                          : "resume"};
  if (payload && !resume) words.push_back(*payload);
  call(idem_begin_script, std::move(words), 2, std::move(done));
}

void StoreCalls::void_attempt(const std::string& key, const std::string& downstream_key,
                              std::uint64_t fence, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_void_script,
       {std::move(k.record), std::move(k.due), key, downstream_key, to_decimal_u(fence)}, 2,
       std::move(done));
}

void StoreCalls::next(const std::string& key, const std::string& downstream_key,
                      std::uint64_t fence, std::int64_t first_look_ms, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_next_script,
       {std::move(k.record), std::move(k.due), key, downstream_key, to_decimal_u(fence),
        to_decimal(first_look_ms)},
       2, std::move(done));
}

void StoreCalls::escalate(const std::string& key, const std::string& downstream_key,
                          std::uint64_t fence, std::int64_t min_age_ms, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_escalate_script,
       {std::move(k.record), std::move(k.due), std::move(k.escalated), key, downstream_key,
        to_decimal_u(fence), to_decimal(min_age_ms)},
       3, std::move(done));
}

void StoreCalls::defer(const std::string& key, const std::string& downstream_key,
                       std::uint64_t fence, std::int64_t base_ms, std::int64_t cap_ms,
                       StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_defer_script,
       {std::move(k.record), std::move(k.due), key, downstream_key, to_decimal_u(fence),
        to_decimal(base_ms), to_decimal(cap_ms)},
       2, std::move(done));
}

void StoreCalls::decide(const std::string& key, const std::string& fingerprint,
                        std::uint32_t attempt, const std::string& downstream_key, int status,
                        const std::string& body, const std::string& external_id,
                        std::int64_t retention_ms, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_decide_script,
       {std::move(k.record), std::move(k.due), std::move(k.escalated), key, fingerprint,
        to_decimal(attempt), downstream_key, to_decimal(status), body, external_id,
        to_decimal(retention_ms)},
       3, std::move(done));
}

void StoreCalls::settle(const std::string& key, int status, const std::string& body,
                        const std::string& external_id, std::int64_t retention_ms,
                        StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_settle_script,
       {std::move(k.record), std::move(k.escalated), key, to_decimal(status), body, external_id,
        to_decimal(retention_ms)},
       2, std::move(done));
}

void StoreCalls::reopen(const std::string& key, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(idem_reopen_script, {std::move(k.record), std::move(k.escalated), key}, 2, std::move(done));
}

void StoreCalls::list(const Script& script, std::vector<std::string> words,
                      std::function<void(error_code, DueKeys)> done) {
  send_script(store_, script, std::move(words), 1, Replicas{},
              [done = std::move(done)](error_code ec, Reply reply) {
                if (ec) return done(ec, DueKeys{});
                auto read = read_due(reply);
                if (!read) return done(error::unexpected_reply, DueKeys{});
                done({}, std::move(*read));
              });
}

void StoreCalls::escalated(unsigned shard, std::size_t limit,
                           std::function<void(error_code, DueKeys)> done) {
  list(idem_list_script,
       {shard_keys(store_->key_prefix(), shard).escalated,
        to_decimal(static_cast<long long>(limit))},
       std::move(done));
}

void StoreCalls::due(unsigned shard, std::size_t limit, std::int64_t claim_ms,
                     std::function<void(error_code, DueKeys)> done) {
  list(idem_due_script,
       {shard_keys(store_->key_prefix(), shard).due, to_decimal(static_cast<long long>(limit)),
        to_decimal(claim_ms)},
       std::move(done));
}

void StoreCalls::check_shards(std::function<void(error_code, std::string)> done) {
  auto mine = to_decimal(shards_);
  send_script(store_, idem_shards_script, {std::string(store_->key_prefix()) + "idem:shards", mine},
              1, Replicas{}, [mine, done = std::move(done)](error_code ec, Reply reply) {
                if (!ec && reply.type != Reply::Type::string) ec = error::unexpected_reply;
                if (ec) return done(ec, {});
                if (reply.str == mine) return done({}, {});
                done({}, "the store's records are in " + reply.str + " shards; this client has " +
                             mine +
                             " (IdempotencyOptions::shards must be the same for every client of "
                             "a store)");
              });
}

void StoreCalls::check_durability(bool settings, int replicas,
                                  std::function<void(error_code, std::vector<std::string>)> done) {
  struct Round {
    std::size_t left = 0;
    error_code first_error;
    std::vector<std::string> missing;
    std::function<void(error_code, std::vector<std::string>)> done;
    void add(std::string said) {
      if (std::find(missing.begin(), missing.end(), said) == missing.end()) {
        missing.push_back(std::move(said));
      }
    }
    void answered(error_code ec) {
      if (ec && !first_error) first_error = ec;
      if (--left == 0) done(first_error, std::move(missing));
    }
  };
  auto round = std::make_shared<Round>();
  round->done = std::move(done);
  // One shard per distinct slot asks (the slots' nodes are not known here; on a Cluster a
  // handful of reads at start-up, on one server one).
  std::vector<unsigned> asking;
  std::vector<std::uint16_t> slots;
  for (unsigned shard = 0; shard < shards_; ++shard) {
    const auto slot = store_->slot_of(shard_keys(store_->key_prefix(), shard).due);
    if (std::find(slots.begin(), slots.end(), slot) != slots.end()) continue;
    slots.push_back(slot);
    asking.push_back(shard);
  }
  round->left = asking.size() * ((settings ? 1 : 0) + (replicas > 0 ? 1 : 0));
  if (round->left == 0) return round->done({}, {});
  auto ask = [this](unsigned shard, std::initializer_list<std::string_view> command,
                    std::function<void(error_code, Reply)> then) {
    auto op = std::make_shared<StoreOp>();
    op->service = store_;
    op->words = {shard_keys(store_->key_prefix(), shard).due};
    op->slot = store_->slot_of(op->words[0]);
    op->argc = 0;
    for (const auto w : command) op->argv[op->argc++] = w;
    op->done = [store = store_, then = std::move(then)](error_code ec, Reply reply) {
      if (!ec && reply.is_error()) ec = store->server_error(reply);
      then(ec, std::move(reply));
    };
    send_op(*store_, std::move(op));
  };
  for (const unsigned shard : asking) {
    if (settings) {
      ask(shard, {"CONFIG", "GET", "appendonly", "appendfsync", "maxmemory-policy"},
          [round](error_code ec, Reply reply) {
            if (!ec && reply.type != Reply::Type::array) ec = error::unexpected_reply;
            if (ec) return round->answered(ec);
            const std::pair<std::string_view, std::string_view> wanted[] = {
                {"appendonly", "yes"},
                {"appendfsync", "always"},
                {"maxmemory-policy", "noeviction"}};
            for (const auto& [name, value] : wanted) {
              std::string found = "(not reported)";
              for (std::size_t i = 0; i + 1 < reply.elements.size(); i += 2) {
                if (reply.elements[i].str == name) found = reply.elements[i + 1].str;
              }
              if (found != value) {
                round->add(std::string(name) + " is " + found + ", needs " + std::string(value));
              }
            }
            round->answered({});
          });
    }
    if (replicas > 0) {
      ask(shard, {"INFO", "replication"}, [round, replicas](error_code ec, Reply reply) {
        if (!ec && reply.type != Reply::Type::string) ec = error::unexpected_reply;
        if (ec) return round->answered(ec);
        // The replicas WAIT can count: those the master has put online ("slave<n>:...,
        // state=online,..."), not one still syncing (connected_slaves counts it too).
        int online = 0;
        for (int n = 0;; ++n) {
          const auto replica = info_field(reply.str, "slave" + std::to_string(n));
          if (!replica) break;
          if (replica->find("state=online") != std::string_view::npos) ++online;
        }
        if (online < replicas) {
          round->add(std::to_string(online) + " replica(s) connected, " + std::to_string(replicas) +
                     " asked for");
        }
        round->answered({});
      });
    }
  }
}

}  // namespace redis_lock::detail::idempotency
