// SPDX-License-Identifier: MIT
#include "ledger.hpp"

#include <hiredis/hiredis.h>

#include <charconv>
#include <string_view>

namespace checkout {

namespace {

// Fencing in two steps. `begin` raises the order's token to ours (refusing a token that is
// not above it); `commit` is accepted only while no newer token has begun. A holder whose
// lease expired mid-charge (a long GC pause, a SIGSTOP) and was replaced finds its commit
// refused: the newer holder's begin raised the token. (Lua numbers are doubles, exact up to
// 2^53; lock tokens are about 1.8e15 — never below the lock server's clock in microseconds —
// and stay below it. Tokens are passed to redis.call as the strings they came in.)
constexpr const char* begin_script = R"lua(
local charged = redis.call('HGETALL', KEYS[1])
if #charged > 0 then return {'already_charged', unpack(charged)} end
local newest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= newest then return {'stale'} end
redis.call('SET', KEYS[2], ARGV[1])
return {'go_ahead'}
)lua";

constexpr const char* commit_script = R"lua(
local newest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < newest then return {'stale'} end
local charged = redis.call('HGETALL', KEYS[1])
if #charged > 0 then return {'already_charged', unpack(charged)} end
redis.call('HSET', KEYS[1], 'order_id', ARGV[2], 'amount', ARGV[3], 'charge_id', ARGV[4],
           'fencing_token', ARGV[1])
redis.call('RPUSH', KEYS[3], ARGV[2])
return {'go_ahead'}
)lua";

template <class Int>
Int to_int(std::string_view s) {
  Int v{};
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

Charge charge_from_fields(const std::vector<std::string>& reply, std::size_t from) {
  Charge c;
  for (std::size_t i = from; i + 1 < reply.size(); i += 2) {
    const auto& field = reply[i];
    const auto& value = reply[i + 1];
    if (field == "order_id") c.order_id = value;
    if (field == "amount") c.amount = to_int<std::int64_t>(value);
    if (field == "charge_id") c.charge_id = value;
    if (field == "fencing_token") c.fencing_token = to_int<std::uint64_t>(value);
  }
  return c;
}

Ledger::Result to_result(const std::vector<std::string>& reply) {
  if (reply.empty()) throw LedgerError("empty ledger reply");
  if (reply[0] == "go_ahead") return {Ledger::Outcome::go_ahead, std::nullopt};
  if (reply[0] == "stale") return {Ledger::Outcome::stale, std::nullopt};
  return {Ledger::Outcome::already_charged, charge_from_fields(reply, 1)};
}

void flatten(const redisReply* r, std::vector<std::string>& out) {
  switch (r->type) {
    case REDIS_REPLY_ARRAY:
      for (std::size_t i = 0; i < r->elements; ++i) flatten(r->element[i], out);
      break;
    case REDIS_REPLY_INTEGER: out.push_back(std::to_string(r->integer)); break;
    case REDIS_REPLY_NIL: break;
    case REDIS_REPLY_ERROR: throw LedgerError(std::string(r->str, r->len));
    default: out.emplace_back(r->str, r->len);
  }
}

}  // namespace

struct Ledger::Connection {
  redisContext* ctx = nullptr;
  ~Connection() {
    if (ctx) redisFree(ctx);
  }
  std::vector<std::string> run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!reply) throw LedgerError(std::string("ledger connection: ") + ctx->errstr);
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

Ledger::Ledger(redis_lock::ConnectionConfig config, std::string prefix)
    : config_(std::move(config)), prefix_(std::move(prefix)) {
  if (config_.tls) throw LedgerError("the example ledger speaks plain TCP or Unix sockets only");
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
  const timeval timeout{1, 0};
  c->ctx = config_.unix_socket.empty()
               ? redisConnectWithTimeout(config_.host.c_str(), config_.port, timeout)
               : redisConnectUnixWithTimeout(config_.unix_socket.c_str(), timeout);
  if (!c->ctx || c->ctx->err) {
    throw LedgerError(std::string("cannot reach the ledger: ") +
                      (c->ctx ? c->ctx->errstr : "out of memory"));
  }
  redisSetTimeout(c->ctx, timeout);
  if (!config_.password.empty()) {
    if (config_.username.empty()) {
      c->run({"AUTH", config_.password});
    } else {
      c->run({"AUTH", config_.username, config_.password});
    }
  }
  if (config_.database != 0) c->run({"SELECT", std::to_string(config_.database)});
  return c;
}

void Ledger::give_back(std::unique_ptr<Connection> c) {
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(c));
}

std::vector<std::string> Ledger::eval(const char* script, const std::vector<std::string>& keys,
                                      const std::vector<std::string>& args) {
  std::vector<std::string> command{"EVAL", script, std::to_string(keys.size())};
  command.insert(command.end(), keys.begin(), keys.end());
  command.insert(command.end(), args.begin(), args.end());
  auto c = take();
  auto out = c->run(command);  // a broken connection throws and is not given back
  give_back(std::move(c));
  return out;
}

Ledger::Result Ledger::begin(const std::string& order_id, std::uint64_t fence) {
  return to_result(eval(begin_script, {prefix_ + "order:" + order_id, prefix_ + "fence:" + order_id},
                        {std::to_string(fence)}));
}

Ledger::Result Ledger::commit(const Charge& charge) {
  return to_result(eval(commit_script,
                        {prefix_ + "order:" + charge.order_id, prefix_ + "fence:" + charge.order_id,
                         prefix_ + "charges"},
                        {std::to_string(charge.fencing_token), charge.order_id,
                         std::to_string(charge.amount), charge.charge_id}));
}

std::vector<std::string> Ledger::all_charges() {
  auto c = take();
  auto out = c->run({"LRANGE", prefix_ + "charges", "0", "-1"});
  give_back(std::move(c));
  return out;
}

std::optional<Charge> Ledger::find(const std::string& order_id) {
  auto c = take();
  auto fields = c->run({"HGETALL", prefix_ + "order:" + order_id});
  give_back(std::move(c));
  if (fields.empty()) return std::nullopt;
  return charge_from_fields(fields, 0);
}

}  // namespace checkout
