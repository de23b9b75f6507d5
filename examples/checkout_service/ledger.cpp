// SPDX-License-Identifier: MIT
#include "ledger.hpp"

#include <hiredis/hiredis.h>

#include <charconv>
#include <string_view>

namespace checkout {

namespace {

// Lua numbers are doubles, exact up to 2^53; fencing tokens are about 1.8e15 (never below the
// lock server's clock in microseconds) and stay below it. Tokens are compared as numbers and
// stored as the caller's decimal string.
#define LEDGER_NOW_MS                \
  "local now = redis.call('TIME')\n" \
  "local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)\n"

// KEYS: order, pending set. ARGV: fence, amount, currency, order id, key base.
constexpr const char* begin_script = LEDGER_NOW_MS R"lua(
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'final' or state == 'escalated' then
  return {state, unpack(redis.call('HGETALL', KEYS[1]))}
end
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and tonumber(ARGV[1]) < tonumber(fence) then return {'stale'} end
if state == 'pending' then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
  return {'resume', unpack(redis.call('HGETALL', KEYS[1]))}
end
if state == 'void' then
  -- the last attempt never reached the provider: begin again with its key (a late delivery
  -- of it is then answered as the same charge); the amount is this request's
  redis.call('HSET', KEYS[1], 'state', 'pending', 'amount', ARGV[2], 'currency', ARGV[3],
             'fence', ARGV[1], 'began', ms)
else
  redis.call('HSET', KEYS[1], 'state', 'pending', 'order_id', ARGV[4], 'amount', ARGV[2],
             'currency', ARGV[3], 'attempt', 1, 'idempotency_key', ARGV[5] .. '1',
             'fence', ARGV[1], 'began', ms)
end
redis.call('ZADD', KEYS[2], ms, ARGV[4])
return {'go_ahead', unpack(redis.call('HGETALL', KEYS[1]))}
)lua";

// KEYS: order, pending set, escalated set, journal. ARGV: key, status, body, charge id,
// order id, amount, currency, attempt.
constexpr const char* finish_script = R"lua(
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'final' then return {0, unpack(redis.call('HGETALL', KEYS[1]))} end
if state and redis.call('HGET', KEYS[1], 'idempotency_key') ~= ARGV[1] then
  return {0, unpack(redis.call('HGETALL', KEYS[1]))}
end
if not state then  -- the ledger lost the order: the provider's answer is the record
  redis.call('HSET', KEYS[1], 'order_id', ARGV[5], 'amount', ARGV[6], 'currency', ARGV[7],
             'attempt', ARGV[8], 'idempotency_key', ARGV[1])
end
redis.call('HSET', KEYS[1], 'state', 'final', 'status', ARGV[2], 'body', ARGV[3],
           'charge_id', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[5])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', '1000000', '*', 'order_id', ARGV[5],
           'charge_id', ARGV[4], 'status', ARGV[2])
return {1, unpack(redis.call('HGETALL', KEYS[1]))}
)lua";

// KEYS: order. ARGV: key, fence. The pending attempt `key`, unless a newer holder began on it.
#define LEDGER_OUR_ATTEMPT                                                        \
  "if redis.call('HGET', KEYS[1], 'state') ~= 'pending' or\n"                     \
  "   redis.call('HGET', KEYS[1], 'idempotency_key') ~= ARGV[1] or\n"             \
  "   tonumber(redis.call('HGET', KEYS[1], 'fence')) ~= tonumber(ARGV[2]) then\n" \
  "  return {}\n"                                                                 \
  "end\n"

// KEYS: order, pending set. ARGV: key, fence, order id.
constexpr const char* void_script = LEDGER_OUR_ATTEMPT R"lua(
redis.call('HSET', KEYS[1], 'state', 'void')
redis.call('ZREM', KEYS[2], ARGV[3])
return {1}
)lua";

// KEYS: order. ARGV: key, fence, key base.
constexpr const char* next_attempt_script = LEDGER_OUR_ATTEMPT LEDGER_NOW_MS R"lua(
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'idempotency_key', ARGV[3] .. attempt, 'began', ms)
return redis.call('HGETALL', KEYS[1])
)lua";

// KEYS: order, pending set, escalated set. ARGV: key, fence, order id.
constexpr const char* escalate_script = LEDGER_OUR_ATTEMPT LEDGER_NOW_MS R"lua(
redis.call('HSET', KEYS[1], 'state', 'escalated')
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], ms, ARGV[3])
return {1}
)lua";

// KEYS: order, escalated set. ARGV: order id, key base. A person found no charge: a new
// attempt (its key never seen by the provider), void until the client's next request.
constexpr const char* reopen_script = R"lua(
if redis.call('HGET', KEYS[1], 'state') ~= 'escalated' then return 0 end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'state', 'void', 'idempotency_key', ARGV[2] .. attempt)
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
)lua";

// KEYS: order, escalated set, journal. ARGV: status, body, charge id, order id.
constexpr const char* resolve_script = R"lua(
if redis.call('HGET', KEYS[1], 'state') ~= 'escalated' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'final', 'status', ARGV[1], 'body', ARGV[2],
           'charge_id', ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', '1000000', '*', 'order_id', ARGV[4],
           'charge_id', ARGV[3], 'status', ARGV[1])
return 1
)lua";

constexpr const char* overdue_script = LEDGER_NOW_MS R"lua(
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms - tonumber(ARGV[1]), 'LIMIT', 0, ARGV[2])
)lua";

constexpr const char* due_in_script = LEDGER_NOW_MS R"lua(
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
return math.max(0, tonumber(score) + tonumber(ARGV[2]) - ms)
)lua";

// Claims a reconcile retry of an overdue order: one worker at a time, even when several
// listed it as overdue. Moves the order back in overdue()'s line, further back each time: the
// n-th retry delays the next by min(base * (2^(n-1) - 1), cap) beyond overdue()'s minimum age,
// so a provider that keeps failing is asked at growing intervals, not every reconcile round
// (n = 1 adds nothing). Returns {n, delay ms}, or {} when the order is no longer pending or
// was retried within the minimum age (by another worker).
constexpr const char* claim_retry_script = LEDGER_NOW_MS R"lua(
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return {} end
if tonumber(score) > ms - tonumber(ARGV[2]) then return {} end
local n = redis.call('HINCRBY', KEYS[2], 'retries', 1)
local delay = math.min(tonumber(ARGV[3]) * (2 ^ math.min(n - 1, 40) - 1), tonumber(ARGV[4]))
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', ms + delay), ARGV[1])
return {n, delay}
)lua";

template <class Int>
Int to_int(std::string_view s) {
  Int v{};
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

Record record_from_fields(const std::vector<std::string>& reply, std::size_t from) {
  Record r;
  for (std::size_t i = from; i + 1 < reply.size(); i += 2) {
    const auto& field = reply[i];
    const auto& value = reply[i + 1];
    if (field == "state") r.state = value;
    if (field == "order_id") r.order_id = value;
    if (field == "amount") r.amount = to_int<std::int64_t>(value);
    if (field == "currency") r.currency = value;
    if (field == "attempt") r.attempt = to_int<int>(value);
    if (field == "idempotency_key") r.idempotency_key = value;
    if (field == "began") r.began_ms = to_int<std::int64_t>(value);
    if (field == "fence") r.fence = to_int<std::uint64_t>(value);
    if (field == "status") r.status = to_int<int>(value);
    if (field == "body") r.body = value;
    if (field == "charge_id") r.charge_id = value;
  }
  return r;
}

void flatten(const redisReply* r, std::vector<std::string>& out) {
  switch (r->type) {
    case REDIS_REPLY_ARRAY:
      for (std::size_t i = 0; i < r->elements; ++i) flatten(r->element[i], out);
      break;
    case REDIS_REPLY_INTEGER:
      out.push_back(std::to_string(r->integer));
      break;
    case REDIS_REPLY_NIL:
      break;
    case REDIS_REPLY_ERROR:
      throw LedgerError(std::string(r->str, r->len));
    default:
      out.emplace_back(r->str, r->len);
  }
}

}  // namespace

struct Ledger::Connection {
  redisContext* ctx = nullptr;
  ~Connection() {
    if (ctx) redisFree(ctx);
  }
  /// The reply, flattened; nullopt when the connection broke (nothing is known of the command).
  std::optional<std::vector<std::string>> run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!reply) return std::nullopt;
    std::vector<std::string> out;
    try {
      flatten(reply, out);
    } catch (...) {
      freeReplyObject(reply);
      throw;
    }
    freeReplyObject(reply);
    return out;
  }
};

Ledger::Ledger(redis_lock::ConnectionConfig config, std::string prefix, LedgerOptions options)
    : config_(std::move(config)), prefix_(std::move(prefix)), options_(options) {
  if (config_.tls) throw LedgerError("the example ledger speaks plain TCP or Unix sockets only");
  if (options_.replicas < 0 || options_.replica_timeout.count() <= 0) {
    throw LedgerError("the ledger's replica count and timeout must be positive");
  }
}

Ledger::~Ledger() = default;

std::unique_ptr<Ledger::Connection> Ledger::take() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<Connection>();
  const timeval timeout{2, 0};
  c->ctx = config_.unix_socket.empty()
               ? redisConnectWithTimeout(config_.host.c_str(), config_.port, timeout)
               : redisConnectUnixWithTimeout(config_.unix_socket.c_str(), timeout);
  if (!c->ctx || c->ctx->err) throw LedgerError("cannot reach the ledger");
  redisSetTimeout(c->ctx, timeout);
  std::vector<std::vector<std::string>> hello;
  if (!config_.password.empty()) {
    hello.push_back(config_.username.empty()
                        ? std::vector<std::string>{"AUTH", config_.password}
                        : std::vector<std::string>{"AUTH", config_.username, config_.password});
  }
  if (config_.database != 0) hello.push_back({"SELECT", std::to_string(config_.database)});
  for (const auto& command : hello) {
    if (!c->run(command)) throw LedgerError("the ledger connection broke during its handshake");
  }
  return c;
}

void Ledger::give_back(std::unique_ptr<Connection> c) {
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(c));
}

std::vector<std::string> Ledger::run(const std::vector<std::string>& command, bool write) {
  // A pooled connection may have been cut while idle (the ledger restarted, say): its first
  // command fails without an answer. Then the whole pool is suspect: it is emptied, and the
  // command sent once more on a new connection; every command here is safe to repeat.
  for (int attempt = 0;; ++attempt) {
    auto c = take();
    if (auto out = c->run(command)) {
      if (write && options_.replicas > 0) {
        // On the same connection: WAIT counts the replicas that have this client's writes.
        const auto acked = c->run({"WAIT", std::to_string(options_.replicas),
                                   std::to_string(options_.replica_timeout.count())});
        if (!acked) throw LedgerError("the ledger connection broke during WAIT");
        if (acked->empty() || to_int<int>(acked->front()) < options_.replicas) {
          give_back(std::move(c));
          throw LedgerError("a ledger write was not acknowledged by " +
                            std::to_string(options_.replicas) + " replica(s) in time");
        }
      }
      give_back(std::move(c));
      return std::move(*out);
    }
    if (attempt == 1) throw LedgerError("the ledger connection broke");
    std::lock_guard lock(mutex_);
    idle_.clear();
  }
}

std::string Ledger::key_base(const std::string& order_id) const { return prefix_ + order_id + "/"; }

std::vector<std::string> Ledger::check_durability() {
  std::vector<std::string> missing;
  const std::pair<const char*, const char*> wanted[] = {
      {"appendonly", "yes"}, {"appendfsync", "always"}, {"maxmemory-policy", "noeviction"}};
  for (const auto& [name, value] : wanted) {
    try {
      const auto reply = run({"CONFIG", "GET", name});
      if (reply.size() != 2 || reply[1] != value) {
        missing.push_back(std::string(name) + " is " + (reply.size() == 2 ? reply[1] : "unknown") +
                          ", needs " + value);
      }
    } catch (const LedgerError& e) {
      missing.push_back(std::string("CONFIG GET ") + name + " failed: " + e.what());
    }
  }
  if (options_.replicas > 0) {
    const auto info = run({"INFO", "replication"});
    const std::string text = info.empty() ? "" : info[0];
    const auto at = text.find("connected_slaves:");
    const int replicas = at == std::string::npos ? 0 : to_int<int>(text.substr(at + 17));
    if (replicas < options_.replicas) {
      missing.push_back(std::to_string(replicas) + " replica(s) connected, " +
                        std::to_string(options_.replicas) + " asked for");
    }
  }
  return missing;
}

std::optional<Record> Ledger::find(const std::string& order_id) {
  auto fields = run({"HGETALL", prefix_ + "order:" + order_id});
  if (fields.empty()) return std::nullopt;
  return record_from_fields(fields, 0);
}

Ledger::BeginResult Ledger::begin(const std::string& order_id, std::int64_t amount,
                                  const std::string& currency, std::uint64_t fence) {
  const auto reply =
      run({"EVAL", begin_script, "2", prefix_ + "order:" + order_id, prefix_ + "pending",
           std::to_string(fence), std::to_string(amount), currency, order_id, key_base(order_id)},
          true);
  if (reply.empty()) throw LedgerError("empty ledger reply");
  const std::string& what = reply[0];
  const Begun outcome = what == "go_ahead"    ? Begun::go_ahead
                        : what == "resume"    ? Begun::resume
                        : what == "final"     ? Begun::final
                        : what == "escalated" ? Begun::escalated
                                              : Begun::stale;
  return {outcome, record_from_fields(reply, 1)};
}

Ledger::Finished Ledger::finish(const Record& attempt, int status, const std::string& body,
                                const std::string& charge_id) {
  const auto reply =
      run({"EVAL", finish_script, "4", prefix_ + "order:" + attempt.order_id, prefix_ + "pending",
           prefix_ + "escalated", prefix_ + "journal", attempt.idempotency_key,
           std::to_string(status), body, charge_id, attempt.order_id,
           std::to_string(attempt.amount), attempt.currency, std::to_string(attempt.attempt)},
          true);
  if (reply.empty()) throw LedgerError("empty ledger reply");
  return {record_from_fields(reply, 1), reply[0] == "1"};
}

bool Ledger::make_void(const std::string& order_id, const std::string& key, std::uint64_t fence) {
  return !run({"EVAL", void_script, "2", prefix_ + "order:" + order_id, prefix_ + "pending", key,
               std::to_string(fence), order_id},
              true)
              .empty();
}

std::optional<Record> Ledger::next_attempt(const std::string& order_id, const std::string& key,
                                           std::uint64_t fence) {
  const auto reply = run({"EVAL", next_attempt_script, "1", prefix_ + "order:" + order_id, key,
                          std::to_string(fence), key_base(order_id)},
                         true);
  if (reply.empty()) return std::nullopt;
  return record_from_fields(reply, 0);
}

bool Ledger::escalate(const std::string& order_id, const std::string& key, std::uint64_t fence) {
  return !run({"EVAL", escalate_script, "3", prefix_ + "order:" + order_id, prefix_ + "pending",
               prefix_ + "escalated", key, std::to_string(fence), order_id},
              true)
              .empty();
}

std::vector<Record> Ledger::escalated() {
  std::vector<Record> out;
  for (const auto& id : run({"ZRANGE", prefix_ + "escalated", "0", "-1"})) {
    if (auto r = find(id); r && r->state == "escalated") out.push_back(std::move(*r));
  }
  return out;
}

bool Ledger::resolve(const std::string& order_id, int status, const std::string& body,
                     const std::string& charge_id) {
  const auto reply =
      run({"EVAL", resolve_script, "3", prefix_ + "order:" + order_id, prefix_ + "escalated",
           prefix_ + "journal", std::to_string(status), body, charge_id, order_id},
          true);
  return !reply.empty() && reply[0] == "1";
}

bool Ledger::reopen(const std::string& order_id) {
  const auto reply = run({"EVAL", reopen_script, "2", prefix_ + "order:" + order_id,
                          prefix_ + "escalated", order_id, key_base(order_id)},
                         true);
  return !reply.empty() && reply[0] == "1";
}

std::vector<std::string> Ledger::overdue(std::chrono::milliseconds min_age, std::size_t limit) {
  return run({"EVAL", overdue_script, "1", prefix_ + "pending", std::to_string(min_age.count()),
              std::to_string(limit)});
}

std::chrono::milliseconds Ledger::due_in(const std::string& order_id,
                                         std::chrono::milliseconds min_age) {
  const auto reply = run(
      {"EVAL", due_in_script, "1", prefix_ + "pending", order_id, std::to_string(min_age.count())});
  return std::chrono::milliseconds(reply.empty() ? 0 : to_int<std::int64_t>(reply[0]));
}

std::optional<Ledger::Retry> Ledger::claim_retry(const std::string& order_id,
                                                 std::chrono::milliseconds min_age,
                                                 std::chrono::milliseconds base,
                                                 std::chrono::milliseconds cap) {
  const auto reply = run({"EVAL", claim_retry_script, "2", prefix_ + "pending",
                          prefix_ + "order:" + order_id, order_id, std::to_string(min_age.count()),
                          std::to_string(base.count()), std::to_string(cap.count())},
                         true);
  if (reply.size() != 2) return std::nullopt;
  return Retry{to_int<int>(reply[0]), std::chrono::milliseconds(to_int<std::int64_t>(reply[1]))};
}
std::vector<Ledger::Entry> Ledger::journal() {
  // XRANGE flattens to: id, field, value, field, value, field, value (per entry)
  const auto flat = run({"XRANGE", prefix_ + "journal", "-", "+"});
  std::vector<Entry> out;
  for (std::size_t i = 0; i + 6 < flat.size(); i += 7) {
    Entry e;
    for (std::size_t f = i + 1; f + 1 < i + 7; f += 2) {
      if (flat[f] == "order_id") e.order_id = flat[f + 1];
      if (flat[f] == "charge_id") e.charge_id = flat[f + 1];
      if (flat[f] == "status") e.status = to_int<int>(flat[f + 1]);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace checkout
