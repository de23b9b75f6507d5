// SPDX-License-Identifier: MIT
#include "ledger.hpp"

#include <hiredis/hiredis.h>

#include <charconv>
#include <string_view>

namespace checkout {

namespace {

// Lua numbers are doubles, exact up to 2^53; fencing tokens are about 1.8e15 (never below the
// lock server's clock in microseconds) and stay below it.
constexpr const char* begin_script = R"lua(
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'final' then return {'final', unpack(redis.call('HGETALL', KEYS[1]))} end
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and tonumber(ARGV[1]) < tonumber(fence) then return {'stale'} end
if state == 'pending' then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
  return {'resume', unpack(redis.call('HGETALL', KEYS[1]))}
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', 'pending', 'order_id', ARGV[5], 'amount', ARGV[2],
           'currency', ARGV[3], 'idempotency_key', ARGV[4], 'fence', ARGV[1])
redis.call('ZADD', KEYS[2], ms, ARGV[5])
return {'go_ahead', unpack(redis.call('HGETALL', KEYS[1]))}
)lua";

constexpr const char* finish_script = R"lua(
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'pending' and redis.call('HGET', KEYS[1], 'idempotency_key') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', 'final', 'status', ARGV[2], 'body', ARGV[3],
             'charge_id', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('ZREM', KEYS[2], ARGV[6])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', '1000000', '*', 'order_id', ARGV[6],
             'charge_id', ARGV[4], 'status', ARGV[2])
end
return redis.call('HGETALL', KEYS[1])
)lua";

constexpr const char* overdue_script = R"lua(
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms - tonumber(ARGV[1]), 'LIMIT', 0, ARGV[2])
)lua";

// Claims a reconcile retry of an overdue order: one worker at a time, even when several
// listed it as overdue. Moves the order back in overdue()'s line, further back each time: the
// n-th retry delays the next by min(base * (2^(n-1) - 1), cap) beyond overdue()'s minimum age,
// so a provider that keeps failing is asked at growing intervals, not every reconcile round
// (n = 1 adds nothing). Returns {n, delay ms}, or {} when the order is no longer pending or
// was retried within the minimum age (by another worker).
constexpr const char* claim_retry_script = R"lua(
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return {} end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
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
    if (field == "idempotency_key") r.idempotency_key = value;
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

Ledger::Ledger(redis_lock::ConnectionConfig config, std::string prefix,
               std::chrono::milliseconds retention)
    : config_(std::move(config)), prefix_(std::move(prefix)), retention_(retention) {
  if (config_.tls) throw LedgerError("the example ledger speaks plain TCP or Unix sockets only");
  if (retention_.count() <= 0) throw LedgerError("the ledger's retention must be positive");
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

std::vector<std::string> Ledger::run(const std::vector<std::string>& command) {
  // A pooled connection may have been cut while idle (the ledger restarted, say): its first
  // command fails without an answer. Then the whole pool is suspect: it is emptied, and the
  // command sent once more on a new connection; every command here is safe to repeat.
  for (int attempt = 0;; ++attempt) {
    auto c = take();
    if (auto out = c->run(command)) {
      give_back(std::move(c));
      return std::move(*out);
    }
    if (attempt == 1) throw LedgerError("the ledger connection broke");
    std::lock_guard lock(mutex_);
    idle_.clear();
  }
}

std::optional<Record> Ledger::find(const std::string& order_id) {
  auto fields = run({"HGETALL", prefix_ + "order:" + order_id});
  if (fields.empty()) return std::nullopt;
  return record_from_fields(fields, 0);
}

Ledger::BeginResult Ledger::begin(const std::string& order_id, std::int64_t amount,
                                  const std::string& currency, std::uint64_t fence,
                                  const std::string& key) {
  const auto reply =
      run({"EVAL", begin_script, "2", prefix_ + "order:" + order_id, prefix_ + "pending",
           std::to_string(fence), std::to_string(amount), currency, key, order_id});
  if (reply.empty()) throw LedgerError("empty ledger reply");
  const std::string& what = reply[0];
  const Begun outcome = what == "go_ahead" ? Begun::go_ahead
                        : what == "resume" ? Begun::resume
                        : what == "final"  ? Begun::final
                                           : Begun::stale;
  return {outcome, record_from_fields(reply, 1)};
}

Record Ledger::finish(const std::string& order_id, const std::string& key, int status,
                      const std::string& body, const std::string& charge_id) {
  return record_from_fields(
      run({"EVAL", finish_script, "3", prefix_ + "order:" + order_id, prefix_ + "pending",
           prefix_ + "journal", key, std::to_string(status), body, charge_id,
           std::to_string(retention_.count()), order_id}),
      0);
}

std::vector<std::string> Ledger::overdue(std::chrono::milliseconds min_age, std::size_t limit) {
  return run({"EVAL", overdue_script, "1", prefix_ + "pending", std::to_string(min_age.count()),
              std::to_string(limit)});
}

std::optional<Ledger::Retry> Ledger::claim_retry(const std::string& order_id,
                                                 std::chrono::milliseconds min_age,
                                                 std::chrono::milliseconds base,
                                                 std::chrono::milliseconds cap) {
  const auto reply = run({"EVAL", claim_retry_script, "2", prefix_ + "pending",
                          prefix_ + "order:" + order_id, order_id, std::to_string(min_age.count()),
                          std::to_string(base.count()), std::to_string(cap.count())});
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
