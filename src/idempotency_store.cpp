// SPDX-License-Identifier: MIT
#include "idempotency_store.hpp"

#include "decimal.hpp"
#include "engine.hpp"
#include "info_text.hpp"
#include "replies.hpp"
#include "script_op.hpp"

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

/// One command whose reply goes to `done`, on the strand.
struct StoreOp : ScriptOp {
  std::function<void(error_code, Reply)> done;
  void on_reply(error_code ec, Reply reply) override {
    if (done) std::exchange(done, nullptr)(ec, std::move(reply));
  }
};

/// One of the store's scripts: its words view the call's strings (the op never moves).
template <class Call>
struct ScriptStoreOp final : StoreOp {
  Call call;
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

/// Sends one of the store's scripts (script_table.hpp's Idem*), routed by the slot of its
/// first key (a record's or a shard's index: one slot per shard); `done` gets the reply, a
/// server's error reply already an error_code. `confirm` (a write, with
/// IdempotencyOptions::store_replicas): the script goes on the connection that may block on
/// WAIT, and its reply counts once WAIT says that many replicas have it (fewer:
/// not_replicated, though the master has it).
template <class Call>
void send_script(const std::shared_ptr<Engine>& store, Call call, const Replicas& confirm,
                 std::function<void(error_code, Reply)> done) {
  auto op = std::make_shared<ScriptStoreOp<Call>>();
  op->service = store;
  const int replicas = confirm.count;
  op->durable = replicas > 0;
  op->call = std::move(call);  // in place before the words view it (the op does not move)
  op->slot = store->slot_of(op->call.keys().front().text);
  op->set(op->call);
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

template <class Call>
void StoreCalls::call(Call script, StoreHandler done) {
  const Replicas confirm = std::is_same_v<Call, scripts::IdemLook> ? Replicas{} : replicas_;
  send_script(store_, std::move(script), confirm,
              [done = std::move(done)](error_code ec, Reply reply) {
                // not_replicated: the master ran the script; its reply says what it did.
                if (ec && ec != error::not_replicated) return done(ec, StoreReply{});
                auto read = Call::decode(reply);
                if (!read) return done(ec ? ec : error::unexpected_reply, StoreReply{});
                done(ec, std::move(*read));
              });
}

void StoreCalls::look(const std::string& key, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemLook{.record = std::move(k.record)}, std::move(done));
}

void StoreCalls::begin(const std::string& key, const std::string& fingerprint, std::uint64_t fence,
                       std::int64_t first_look_ms, bool resume, bool resend,
                       const std::optional<std::string>& payload, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemBegin{.record = std::move(k.record),
                          .due = std::move(k.due),
                          .fingerprint = fingerprint,
                          .key = key,
                          .fence = to_decimal_u(fence),
                          .first_look_ms = to_decimal(first_look_ms),
                          .mode = !resume  ? "run"
                                  : resend ? "resend"
                                           : "resume",
                          .payload = resume ? std::optional<std::string>() : payload},
       std::move(done));
}

void StoreCalls::void_attempt(const std::string& key, const std::string& downstream_key,
                              std::uint64_t fence, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemVoid{.record = std::move(k.record),
                         .due = std::move(k.due),
                         .key = key,
                         .downstream_key = downstream_key,
                         .fence = to_decimal_u(fence)},
       std::move(done));
}

void StoreCalls::next(const std::string& key, const std::string& downstream_key,
                      std::uint64_t fence, std::int64_t first_look_ms, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemNext{.record = std::move(k.record),
                         .due = std::move(k.due),
                         .key = key,
                         .downstream_key = downstream_key,
                         .fence = to_decimal_u(fence),
                         .first_look_ms = to_decimal(first_look_ms)},
       std::move(done));
}

void StoreCalls::escalate(const std::string& key, const std::string& downstream_key,
                          std::uint64_t fence, std::int64_t min_age_ms, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemEscalate{.record = std::move(k.record),
                             .due = std::move(k.due),
                             .escalated = std::move(k.escalated),
                             .key = key,
                             .downstream_key = downstream_key,
                             .fence = to_decimal_u(fence),
                             .min_age_ms = to_decimal(min_age_ms)},
       std::move(done));
}

void StoreCalls::defer(const std::string& key, const std::string& downstream_key,
                       std::uint64_t fence, std::int64_t base_ms, std::int64_t cap_ms,
                       StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemDefer{.record = std::move(k.record),
                          .due = std::move(k.due),
                          .key = key,
                          .downstream_key = downstream_key,
                          .fence = to_decimal_u(fence),
                          .base_ms = to_decimal(base_ms),
                          .cap_ms = to_decimal(cap_ms)},
       std::move(done));
}

void StoreCalls::decide(const std::string& key, const std::string& fingerprint,
                        std::uint32_t attempt, const std::string& downstream_key, int status,
                        const std::string& body, const std::string& external_id,
                        std::int64_t retention_ms, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemDecide{.record = std::move(k.record),
                           .due = std::move(k.due),
                           .escalated = std::move(k.escalated),
                           .key = key,
                           .fingerprint = fingerprint,
                           .attempt = to_decimal(attempt),
                           .downstream_key = downstream_key,
                           .status = to_decimal(status),
                           .body = body,
                           .external_id = external_id,
                           .retention_ms = to_decimal(retention_ms)},
       std::move(done));
}

void StoreCalls::settle(const std::string& key, int status, const std::string& body,
                        const std::string& external_id, std::int64_t retention_ms,
                        StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(scripts::IdemSettle{.record = std::move(k.record),
                           .escalated = std::move(k.escalated),
                           .key = key,
                           .status = to_decimal(status),
                           .body = body,
                           .external_id = external_id,
                           .retention_ms = to_decimal(retention_ms)},
       std::move(done));
}

void StoreCalls::reopen(const std::string& key, StoreHandler done) {
  auto k = store_keys(store_->key_prefix(), key, shards_);
  call(
      scripts::IdemReopen{
          .record = std::move(k.record), .escalated = std::move(k.escalated), .key = key},
      std::move(done));
}

template <class Call>
void StoreCalls::list(Call script, std::function<void(error_code, DueKeys)> done) {
  send_script(store_, std::move(script), Replicas{},
              [done = std::move(done)](error_code ec, Reply reply) {
                if (ec) return done(ec, DueKeys{});
                auto read = Call::decode(reply);
                if (!read) return done(error::unexpected_reply, DueKeys{});
                done({}, std::move(*read));
              });
}

void StoreCalls::escalated(unsigned shard, std::size_t limit,
                           std::function<void(error_code, DueKeys)> done) {
  list(scripts::IdemList{.index = shard_keys(store_->key_prefix(), shard).escalated,
                         .limit = to_decimal(static_cast<long long>(limit))},
       std::move(done));
}

void StoreCalls::due(unsigned shard, std::size_t limit, std::int64_t claim_ms,
                     std::function<void(error_code, DueKeys)> done) {
  list(scripts::IdemDue{.due = shard_keys(store_->key_prefix(), shard).due,
                        .limit = to_decimal(static_cast<long long>(limit)),
                        .claim_ms = to_decimal(claim_ms)},
       std::move(done));
}

void StoreCalls::check_shards(std::function<void(error_code, std::string)> done) {
  auto mine = to_decimal(shards_);
  send_script(store_,
              scripts::IdemShards{.shards = std::string(store_->key_prefix()) + "idem:shards",
                                  .count = mine},
              Replicas{}, [mine, done = std::move(done)](error_code ec, Reply reply) {
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
    op->slot = store_->slot_of(shard_keys(store_->key_prefix(), shard).due);
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
