// SPDX-License-Identifier: MIT
// A connection's decisions without a server: when it connects and how long it backs off
// (ConnectFsm, scripted with a fake clock), what its handshake says for each configuration
// and what each handshake reply means (Handshake), how long a stuck link drains.
#include "connect_fsm.hpp"
#include "reply_builders.hpp"

#include <redis_lock/error.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

using namespace redis_lock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;
using redis_lock::error;
using redis_lock::ServerNoticeKind;
using redis_lock::test::error_reply;
using redis_lock::test::integer;
using redis_lock::test::text;
using Clock = std::chrono::steady_clock;
using State = ConnectFsm::State;
using Kind = ConnectFsm::Action::Kind;
using std::chrono::milliseconds;

namespace {

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(long long ms) { return t0 + milliseconds(ms); }
constexpr long long none = -1;  // no time: nothing queued / no wake

// ---------------------------------------------------------------------------------------
// ConnectFsm: scripted rows

enum class Ev { need, over, connected, ready, failed, lost, left };

struct Row {
  Ev ev;
  long long t;      // now (need, failed)
  long long arg;    // need: the oldest queued command's deadline; over: 1 = still queued
  State state;      // after the event
  Kind kind;        // the action (need, over; none for the others)
  long long until;  // with wait
  long long next;   // next_connect_at after the event, none for "at once"
};

struct Script {
  const char* name;
  milliseconds command_timeout;
  std::vector<Row> rows;
};

void run(const Script& s) {
  SCOPED_TRACE(s.name);
  ConnectFsm fsm(s.command_timeout, no_jitter);
  int i = 0;
  for (const auto& r : s.rows) {
    SCOPED_TRACE("row " + std::to_string(i++));
    ConnectFsm::Action act;
    switch (r.ev) {
      case Ev::need:
        act = fsm.need_link(at(r.t), r.arg == none ? Clock::time_point::max() : at(r.arg));
        break;
      case Ev::over:
        act = fsm.backoff_over(r.arg != 0);
        break;
      case Ev::connected:
        fsm.connected();
        break;
      case Ev::ready:
        fsm.ready();
        break;
      case Ev::failed:
        fsm.failed(at(r.t));
        break;
      case Ev::lost:
        fsm.lost();
        break;
      case Ev::left:
        fsm.left();
        break;
    }
    EXPECT_EQ(fsm.state(), r.state);
    EXPECT_EQ(act.kind, r.kind);
    if (r.kind == Kind::wait) {
      EXPECT_EQ(act.until, at(r.until));
    }
    if (r.next == none) {
      EXPECT_LE(fsm.next_connect_at(), at(r.t)) << "the next connect may go at once";
    } else {
      EXPECT_EQ(fsm.next_connect_at(), at(r.next));
    }
  }
}

const auto C = State::closed;
const auto B = State::backoff;
const auto N = State::connecting;
const auto H = State::handshake;
const auto R = State::ready;

const Script connect_scripts[] = {
    {"the first command connects at once; a good handshake makes the link ready",
     1000ms,
     {{Ev::need, 0, 1000, N, Kind::connect, 0, none},
      {Ev::connected, 0, 0, H, Kind::none, 0, none},
      {Ev::ready, 0, 0, R, Kind::none, 0, none}}},
    {"failures back off 25 ms, doubling to 1 s; the timer's end connects again",
     100000ms,
     {{Ev::need, 0, 100000, N, Kind::connect, 0, none},
      {Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::need, 1, 100001, B, Kind::wait, 25, 25},
      {Ev::over, 25, 1, N, Kind::connect, 0, 25},
      {Ev::failed, 30, 0, C, Kind::none, 0, 80},
      {Ev::need, 30, 100000, B, Kind::wait, 80, 80},
      {Ev::over, 80, 1, N, Kind::connect, 0, 80},
      {Ev::failed, 80, 0, C, Kind::none, 0, 180},
      {Ev::failed, 180, 0, C, Kind::none, 0, 380},
      {Ev::failed, 380, 0, C, Kind::none, 0, 780},
      {Ev::failed, 780, 0, C, Kind::none, 0, 1580},
      {Ev::failed, 1580, 0, C, Kind::none, 0, 2580},
      {Ev::failed, 2580, 0, C, Kind::none, 0, 3580}}},
    {"a ready link resets the backoff: the next failure waits 25 ms again",
     100000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::failed, 25, 0, C, Kind::none, 0, 75},
      {Ev::failed, 75, 0, C, Kind::none, 0, 175},
      {Ev::need, 175, 100000, N, Kind::connect, 0, 175},
      {Ev::connected, 176, 0, H, Kind::none, 0, 175},
      {Ev::ready, 177, 0, R, Kind::none, 0, none},
      {Ev::lost, 500, 0, C, Kind::none, 0, none},
      {Ev::need, 500, 1500, N, Kind::connect, 0, none},
      {Ev::failed, 510, 0, C, Kind::none, 0, 535}}},
    {"a handshake refused counts as a failed connect",
     1000ms,
     {{Ev::need, 0, 1000, N, Kind::connect, 0, none},
      {Ev::connected, 2, 0, H, Kind::none, 0, none},
      {Ev::failed, 3, 0, C, Kind::none, 0, 28}}},
    {"the backoff ends early for the oldest command: half its time left, the server is tried",
     1000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::failed, 25, 0, C, Kind::none, 0, 75},
      {Ev::failed, 75, 0, C, Kind::none, 0, 175},
      {Ev::failed, 175, 0, C, Kind::none, 0, 375},
      {Ev::failed, 375, 0, C, Kind::none, 0, 775},
      {Ev::failed, 775, 0, C, Kind::none, 0, 1575},
      // queued at 800 with a 1 s timeout: deadline 1800, tried at 1300 (before 1575)
      {Ev::need, 800, 1800, B, Kind::wait, 1300, 1575},
      {Ev::over, 1300, 1, N, Kind::connect, 0, 1575}}},
    {"an oldest command already past half its time connects at once, inside the backoff",
     1000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::failed, 25, 0, C, Kind::none, 0, 75},
      {Ev::failed, 75, 0, C, Kind::none, 0, 175},
      {Ev::failed, 175, 0, C, Kind::none, 0, 375},
      {Ev::need, 200, 600, N, Kind::connect, 0, 375}}},
    {"a backoff whose queue emptied (its commands timed out) ends closed, connecting nothing",
     1000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::need, 10, 1010, B, Kind::wait, 25, 25},
      {Ev::over, 25, 0, C, Kind::none, 0, 25},
      {Ev::need, 30, 1030, N, Kind::connect, 0, 25}}},
    {"a stale backoff timer (the state moved on) does nothing",
     1000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::need, 10, 1010, B, Kind::wait, 25, 25},
      {Ev::left, 11, 0, C, Kind::none, 0, 25},
      {Ev::over, 25, 1, C, Kind::none, 0, 25}}},
    {"a ready link lost (server restart, idle close) reconnects at once, without backoff",
     1000ms,
     {{Ev::need, 0, 1000, N, Kind::connect, 0, none},
      {Ev::connected, 1, 0, H, Kind::none, 0, none},
      {Ev::ready, 2, 0, R, Kind::none, 0, none},
      {Ev::lost, 9000, 0, C, Kind::none, 0, none},
      {Ev::need, 9000, 10000, N, Kind::connect, 0, none}}},
    {"a link left to drain a timeout: the next command connects a new one at once",
     1000ms,
     {{Ev::need, 0, 1000, N, Kind::connect, 0, none},
      {Ev::connected, 1, 0, H, Kind::none, 0, none},
      {Ev::ready, 2, 0, R, Kind::none, 0, none},
      {Ev::left, 1002, 0, C, Kind::none, 0, none},
      {Ev::need, 1002, 2002, N, Kind::connect, 0, none}}},
    {"a connect given up when its queue timed out keeps its backoff for the next command",
     1000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25},
      {Ev::failed, 25, 0, C, Kind::none, 0, 75},
      {Ev::need, 75, 1075, N, Kind::connect, 0, 75},
      {Ev::left, 1075, 0, C, Kind::none, 0, 75},
      {Ev::failed, 1100, 0, C, Kind::none, 0, 1200}}},
    {"nothing queued: a backoff lasts its whole length",
     1000ms,
     {{Ev::failed, 0, 0, C, Kind::none, 0, 25}, {Ev::need, 5, none, B, Kind::wait, 25, 25}}},
};

TEST(ConnectFsm, ScriptedRows) {
  for (const auto& s : connect_scripts) run(s);
}

TEST(ConnectFsm, BackoffSequence) {
  // 25, 50, 100, ..., capped at 1 s, for as long as the server stays down.
  ConnectFsm fsm(1000ms, no_jitter);
  const long long expected[] = {25, 50, 100, 200, 400, 800, 1000, 1000, 1000};
  long long now = 0;
  for (const auto wait : expected) {
    fsm.failed(at(now));
    EXPECT_EQ(fsm.next_connect_at() - at(now), milliseconds(wait));
    now += wait;
  }
}

TEST(ConnectFsm, DrainGrace) {
  struct Case {
    milliseconds timeout, grace;
  };
  for (const auto& c : {Case{10ms, 2000ms}, Case{100ms, 2000ms}, Case{200ms, 2000ms},
                        Case{201ms, 2010ms}, Case{1000ms, 10000ms}, Case{5000ms, 50000ms}}) {
    EXPECT_EQ(drain_grace(c.timeout), c.grace) << c.timeout.count();
  }
}

// ---------------------------------------------------------------------------------------
// Handshake: what goes out

std::vector<std::vector<std::string>> commands_in(const std::string& resp) {
  ReplyReader reader;
  EXPECT_TRUE(reader.feed(resp.data(), resp.size()));
  std::vector<std::vector<std::string>> out;
  for (;;) {
    bool failed = false;
    auto r = reader.next(failed);
    EXPECT_FALSE(failed);
    if (!r) break;
    std::vector<std::string> words;
    for (const auto& e : r->elements) words.push_back(e.str);
    out.push_back(std::move(words));
  }
  return out;
}

using Step = Handshake::Step;
using Words = std::vector<std::vector<std::string>>;

TEST(Handshake, PlanForEachConfiguration) {
  const std::string_view scripts[] = {"return 1", "return 2"};
  struct Case {
    const char* what;
    Handshake::Settings settings;
    std::vector<Step> steps;
    Words words;
  };
  const Case cases[] = {
      {"nothing to say: a PING learns that the server answers", {}, {Step::ping}, {{"PING"}}},
      {"a password alone: AUTH with the password",
       {.password = "pw"},
       {Step::auth},
       {{"AUTH", "pw"}}},
      {"an ACL user: AUTH with both",
       {.username = "locker", .password = "pw"},
       {Step::auth},
       {{"AUTH", "locker", "pw"}}},
      {"a user name without a password says nothing (the default user)",
       {.username = "locker"},
       {Step::ping},
       {{"PING"}}},
      {"a database", {.database = 3}, {Step::select}, {{"SELECT", "3"}}},
      {"a client name", {.client_name = "svc"}, {Step::setname}, {{"CLIENT", "SETNAME", "svc"}}},
      {"a sentinel's address: ROLE confirms a master",
       {.confirm_master = true},
       {Step::role},
       {{"ROLE"}}},
      {"scripts loaded ahead, one SCRIPT LOAD each",
       {.preload = scripts},
       {Step::script_load, Step::script_load},
       {{"SCRIPT", "LOAD", "return 1"}, {"SCRIPT", "LOAD", "return 2"}}},
      {"a Functions library: its probe, instead of the scripts",
       {.preload = scripts, .function_probe = "x_probe"},
       {Step::function_probe},
       {{"FCALL_RO", "x_probe", "0"}}},
      {"a lock server: HELLO 2 learns its version, INFO memory whether it evicts keys",
       {.check_version = true},
       {Step::hello, Step::info_memory},
       {{"HELLO", "2"}, {"INFO", "memory"}}},
      {"a sentinel (not a lock server): neither HELLO nor INFO",
       {.password = "pw", .client_name = "n"},
       {Step::auth, Step::setname},
       {{"AUTH", "pw"}, {"CLIENT", "SETNAME", "n"}}},
      {"everything, AUTH first (HELLO with a protocol needs it) and the scripts last",
       {.username = "u",
        .password = "p",
        .database = 1,
        .client_name = "n",
        .confirm_master = true,
        .preload = scripts,
        .check_version = true},
       {Step::auth, Step::hello, Step::info_memory, Step::select, Step::setname, Step::role,
        Step::script_load, Step::script_load},
       {{"AUTH", "u", "p"},
        {"HELLO", "2"},
        {"INFO", "memory"},
        {"SELECT", "1"},
        {"CLIENT", "SETNAME", "n"},
        {"ROLE"},
        {"SCRIPT", "LOAD", "return 1"},
        {"SCRIPT", "LOAD", "return 2"}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::string resp = "kept";  // appended to, never replaced
    const auto steps = Handshake::plan(c.settings, resp);
    EXPECT_EQ(steps, c.steps);
    ASSERT_EQ(resp.rfind("kept", 0), 0u);
    EXPECT_EQ(commands_in(resp.substr(4)), c.words);
  }
}

// ---------------------------------------------------------------------------------------
// Handshake: what each answer means

redis_lock::detail::Reply array_of(std::vector<std::string> words) {
  Reply r;
  r.type = Reply::Type::array;
  for (auto& w : words) r.elements.push_back(text(std::move(w)));
  return r;
}

/// A HELLO reply in RESP2 as Redis 7 gives it: names and values, the protocol an integer.
Reply hello_reply(std::string server, std::string version) {
  Reply r = array_of({"server", std::move(server), "version", std::move(version), "proto"});
  Reply proto;
  proto.type = Reply::Type::integer;
  proto.integer = 2;
  r.elements.push_back(proto);
  for (auto& w : array_of({"mode", "standalone", "role", "master"}).elements) {
    r.elements.push_back(std::move(w));
  }
  return r;
}

TEST(Handshake, EachReplyMeans) {
  struct Case {
    Step step;
    Reply reply;
    std::optional<error> fails_with;  // none: go on
  };
  const auto ok = text("OK");
  const auto loading = error_reply("LOADING Redis is loading the dataset in memory");
  const Case cases[] = {
      // AUTH
      {Step::auth, ok, std::nullopt},
      {Step::auth, error_reply("WRONGPASS invalid username-password pair or user is disabled."),
       error::auth_failed},
      {Step::auth, error_reply("ERR invalid password"), error::auth_failed},
      {Step::auth,
       error_reply("ERR AUTH <password> called without any password configured for the default "
                   "user. Are you sure your configuration is correct?"),
       error::auth_failed},
      {Step::auth, error_reply("ERR something unforeseen"), error::auth_failed},
      {Step::auth, error_reply("NOPERM this user has no permissions to run 'auth'"),
       error::no_permission},
      // SELECT
      {Step::select, ok, std::nullopt},
      {Step::select, error_reply("ERR DB index is out of range"), error::invalid_argument},
      {Step::select, error_reply("ERR SELECT is not allowed in cluster mode"),
       error::invalid_argument},
      {Step::select, error_reply("NOAUTH Authentication required."), error::not_authenticated},
      {Step::select, error_reply("NOPERM this user has no permissions to run the 'select' command"),
       error::no_permission},
      // CLIENT SETNAME: refused, still usable
      {Step::setname, ok, std::nullopt},
      {Step::setname, error_reply("NOPERM this user has no permissions to run 'client|setname'"),
       std::nullopt},
      {Step::setname, error_reply("ERR Client names cannot contain spaces"), std::nullopt},
      // SCRIPT LOAD: refused, the script goes with its command later
      {Step::script_load, text("e0e1f9fabfc9d4800c877a703b823ac0578ff8db"), std::nullopt},
      {Step::script_load, error_reply("NOPERM this user has no permissions to run 'script|load'"),
       std::nullopt},
      // ... but a server still loading its data refuses SCRIPT LOAD, the step a lock
      // connection always has (AUTH, SELECT, SETNAME and ROLE pass while it loads)
      {Step::script_load, loading, error::connect_failed},
      {Step::setname, error_reply("BUSY Redis is busy running a script."), error::connect_failed},
      // FUNCTION LOAD and its probe: refused, the scripts go with EVALSHA (loaded ahead)
      {Step::function_load, text("redis_lock_0123456789ab"), std::nullopt},
      {Step::function_load, error_reply("ERR Library 'redis_lock_0123456789ab' already exists"),
       std::nullopt},
      {Step::function_load,
       error_reply("NOPERM this user has no permissions to run the 'function|load' command"),
       std::nullopt},
      {Step::function_load, error_reply("READONLY You can't write against a read only replica."),
       std::nullopt},
      {Step::function_load, error_reply("OOM command not allowed when used memory > 'maxmemory'."),
       std::nullopt},
      {Step::function_load, loading, error::connect_failed},
      {Step::function_load, error_reply("NOAUTH Authentication required."),
       error::not_authenticated},
      {Step::function_probe, integer(1), std::nullopt},
      {Step::function_probe, error_reply("ERR Function not found"), std::nullopt},
      {Step::function_probe,
       error_reply("NOPERM this user has no permissions to run the 'fcall_ro' command"),
       std::nullopt},
      {Step::function_probe, error_reply("NOAUTH Authentication required."),
       error::not_authenticated},
      // PING
      {Step::ping, text("PONG"), std::nullopt},
      {Step::ping, error_reply("NOAUTH Authentication required."), error::not_authenticated},
      {Step::ping, error_reply("ERR Protocol error: unauthenticated multibulk length"),
       error::not_authenticated},
      // A server still loading its data after a restart is down for now, not refusing us:
      // a connect failure (retried with backoff), never "wrong password".
      {Step::ping, loading, error::connect_failed},
      {Step::ping, error_reply("BUSY Redis is busy running a script."), error::connect_failed},
      {Step::ping, error_reply("MASTERDOWN Link with MASTER is down"), error::connect_failed},
      {Step::ping, error_reply("ERR unknown command 'PING'"), error::server_error},
      // ROLE
      {Step::role, array_of({"master"}), std::nullopt},
      {Step::role, array_of({"slave", "127.0.0.1"}), error::master_not_found},
      {Step::role, array_of({"sentinel"}), error::master_not_found},
      {Step::role, array_of({}), error::master_not_found},
      {Step::role, text("master"), error::master_not_found},
      {Step::role, error_reply("ERR unknown command 'ROLE'"), error::master_not_found},
      {Step::role, loading, error::connect_failed},
      {Step::role, error_reply("NOAUTH Authentication required."), error::not_authenticated},
      // HELLO: the version decides
      {Step::hello, hello_reply("redis", "7.0.15"), std::nullopt},
      {Step::hello, hello_reply("redis", "7.0.0"), std::nullopt},
      {Step::hello, hello_reply("valkey", "8.0.1"), std::nullopt},
      {Step::hello, hello_reply("redis", "7.2.4"), std::nullopt},
      {Step::hello, hello_reply("redis", "10.0.0"), std::nullopt},
      {Step::hello, hello_reply("redis", "6.2.14"), error::server_unsupported},
      {Step::hello, hello_reply("redis", "6.0.0"), error::server_unsupported},
      {Step::hello, hello_reply("redis", "5.9"), error::server_unsupported},
      // Redis 5 does not know HELLO.
      {Step::hello, error_reply("ERR unknown command `HELLO`, with args beginning with: `2`, "),
       error::server_unsupported},
      {Step::hello, error_reply("ERR unknown command 'HELLO'"), error::server_unsupported},
      // Cannot tell: not held against the server.
      {Step::hello, error_reply("NOPERM this user has no permissions to run the 'hello' command"),
       std::nullopt},
      {Step::hello, hello_reply("redis", "unstable"), std::nullopt},
      {Step::hello, hello_reply("redis", ""), std::nullopt},
      {Step::hello, hello_reply("redis", "7"), std::nullopt},
      {Step::hello, hello_reply("redis", ".6"), std::nullopt},
      {Step::hello, array_of({}), std::nullopt},
      {Step::hello, text("OK"), std::nullopt},
      // Other refusals as for the other steps.
      {Step::hello, loading, error::connect_failed},
      {Step::hello,
       error_reply("NOAUTH HELLO must be called with the client already authenticated"),
       error::not_authenticated},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE("case " + std::to_string(i++) + ": " + c.reply.str);
    const auto got = Handshake::check(c.step, c.reply);
    if (!c.fails_with) {
      EXPECT_FALSE(got) << got->message();
    } else {
      ASSERT_TRUE(got);
      EXPECT_EQ(*got, *c.fails_with) << got->message();
    }
  }
}

TEST(Handshake, TheLibraryIsThereWhenItsProbeAnswersOne) {
  EXPECT_TRUE(Handshake::functions_ready(Step::function_probe, integer(1)));
  EXPECT_FALSE(Handshake::functions_ready(Step::function_probe, integer(0)));
  EXPECT_FALSE(Handshake::functions_ready(Step::function_probe, text("1")));
  EXPECT_FALSE(
      Handshake::functions_ready(Step::function_probe, error_reply("ERR Function not found")));
  EXPECT_TRUE(Handshake::functions_ready(Step::function_load, text("redis_lock_0123456789ab")));
  EXPECT_TRUE(Handshake::functions_ready(
      Step::function_load, error_reply("ERR Library 'redis_lock_0123456789ab' already exists")));
  EXPECT_FALSE(Handshake::functions_ready(
      Step::function_load,
      error_reply("NOPERM this user has no permissions to run the 'function|load' command")));
  EXPECT_FALSE(Handshake::functions_ready(Step::script_load, text("ok")));
}

TEST(Handshake, ARefusalSaysWhy) {
  // The version found and the version needed, for LockManager::last_server_error().
  EXPECT_EQ(Handshake::refusal_text(Step::hello, hello_reply("redis", "6.2.14")),
            "redis_lock needs a lock server at version 7.0 or later (Redis >= 7.0, Valkey): "
            "this one is redis 6.2.14");
  const auto no_hello = Handshake::refusal_text(
      Step::hello, error_reply("ERR unknown command 'HELLO', with args beginning with: '2'"));
  EXPECT_NE(no_hello.find("does not know HELLO, so it is older than 6.0"), std::string::npos)
      << no_hello;
  EXPECT_NE(no_hello.find("7.0 or later"), std::string::npos) << no_hello;
  // ROLE from a replica: what it says it is.
  EXPECT_EQ(Handshake::refusal_text(Step::role, array_of({"slave", "127.0.0.1"})),
            "ROLE says slave, not master: the sentinels' master is not (or no longer) one");
  // Any other refusal: the server's own words.
  EXPECT_EQ(Handshake::refusal_text(Step::auth, error_reply("WRONGPASS invalid password")),
            "WRONGPASS invalid password");
  EXPECT_EQ(Handshake::refusal_text(Step::hello, error_reply("NOAUTH Authentication required.")),
            "NOAUTH Authentication required.");
}

// ---------------------------------------------------------------------------------------
// Handshake: INFO memory, whether the lock server evicts keys

/// An INFO memory reply as Redis 7 gives it (a bulk string of CRLF lines), with the fields
/// that matter set, or left out when empty.
Reply info_memory(const std::string& maxmemory, const std::string& policy) {
  std::string body =
      "# Memory\r\nused_memory:1012528\r\nused_memory_human:988.80K\r\n"
      "maxmemory_human:100.00M\r\n";
  if (!maxmemory.empty()) body += "maxmemory:" + maxmemory + "\r\n";
  if (!policy.empty()) body += "maxmemory_policy:" + policy + "\r\n";
  body += "allocator_frag_ratio:1.21\r\n";
  return text(body);
}

TEST(Handshake, InfoMemorySaysWhetherTheServerEvicts) {
  struct Case {
    const char* what;
    Reply reply;
    std::optional<error> refused;            // by default (accept_evicting false)
    std::optional<ServerNoticeKind> notice;  // once let through (with accept_evicting)
  };
  const auto noperm =
      error_reply("NOPERM User locker has no permissions to run the 'info' command");
  const Case cases[] = {
      {"noeviction without a limit", info_memory("0", "noeviction"), std::nullopt, std::nullopt},
      {"noeviction with a limit: writes fail with OOM, nothing is evicted",
       info_memory("104857600", "noeviction"), std::nullopt, std::nullopt},
      {"volatile-lru with a limit: leases (all with a ttl) are evicted first",
       info_memory("104857600", "volatile-lru"), error::server_evicts,
       ServerNoticeKind::evicting_policy},
      {"volatile-ttl", info_memory("1", "volatile-ttl"), error::server_evicts,
       ServerNoticeKind::evicting_policy},
      {"allkeys-lru with a limit", info_memory("104857600", "allkeys-lru"), error::server_evicts,
       ServerNoticeKind::evicting_policy},
      {"a policy this library does not know, with a limit: it is not noeviction",
       info_memory("5000", "allkeys-something"), error::server_evicts,
       ServerNoticeKind::evicting_policy},
      {"allkeys-lru without a limit: nothing is ever evicted", info_memory("0", "allkeys-lru"),
       std::nullopt, std::nullopt},
      {"volatile-lfu without a limit", info_memory("0", "volatile-lfu"), std::nullopt,
       std::nullopt},
      // Cannot tell: the connect goes on, a notice says so.
      {"INFO refused by the ACL", noperm, std::nullopt, ServerNoticeKind::policy_unknown},
      {"INFO renamed away", error_reply("ERR unknown command 'INFO', with args beginning with: "),
       std::nullopt, ServerNoticeKind::policy_unknown},
      {"no maxmemory_policy line", info_memory("104857600", ""), std::nullopt,
       ServerNoticeKind::policy_unknown},
      {"no maxmemory line (maxmemory_human does not count)", info_memory("", "volatile-lru"),
       std::nullopt, ServerNoticeKind::policy_unknown},
      {"maxmemory not a number", info_memory("lots", "volatile-lru"), std::nullopt,
       ServerNoticeKind::policy_unknown},
      {"maxmemory negative", info_memory("-1", "volatile-lru"), std::nullopt,
       ServerNoticeKind::policy_unknown},
      {"an empty text", text(""), std::nullopt, ServerNoticeKind::policy_unknown},
      {"not a text at all", array_of({"maxmemory", "1"}), std::nullopt,
       ServerNoticeKind::policy_unknown},
      // What fails every step fails this one.
      {"loading", error_reply("LOADING Redis is loading the dataset in memory"),
       error::connect_failed, std::nullopt},
      {"not authenticated", error_reply("NOAUTH Authentication required."),
       error::not_authenticated, std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto refused = Handshake::check(Step::info_memory, c.reply);
    if (c.refused) {
      ASSERT_TRUE(refused);
      EXPECT_EQ(*refused, *c.refused) << refused->message();
    } else {
      EXPECT_FALSE(refused) << refused->message();
    }
    // ManagerOptions::accept_evicting_server lets an evicting server through, nothing else.
    const auto accepted = Handshake::check(Step::info_memory, c.reply, true);
    const bool evicts = c.refused == error::server_evicts;
    if (c.refused && !evicts) {
      ASSERT_TRUE(accepted);
      EXPECT_EQ(*accepted, *c.refused);
      continue;
    }
    EXPECT_FALSE(accepted) << accepted->message();
    const auto notice = Handshake::notice(Step::info_memory, c.reply);
    ASSERT_EQ(notice.has_value(), c.notice.has_value());
    if (notice) {
      EXPECT_EQ(notice->kind, *c.notice);
    }
  }
}

TEST(Handshake, AnEvictingServerIsNamedWithItsPolicyAndTheOptionThatAcceptsIt) {
  const auto reply = info_memory("104857600", "volatile-lru");
  EXPECT_EQ(Handshake::refusal_text(Step::info_memory, reply),
            "the lock server evicts keys (maxmemory-policy volatile-lru, maxmemory 104857600): a "
            "lease could vanish while held; set maxmemory-policy noeviction, or "
            "ManagerOptions::accept_evicting_server");
  const auto accepted = Handshake::notice(Step::info_memory, reply);
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->text,
            "the lock server evicts keys (maxmemory-policy volatile-lru, maxmemory 104857600): a "
            "lease could vanish while held (accepted: ManagerOptions::accept_evicting_server)");
  // Unknown: what the server said instead, and how to make it tell.
  const auto refused_info = Handshake::notice(
      Step::info_memory, error_reply("NOPERM User locker has no permissions to run the 'info' "
                                     "command"));
  ASSERT_TRUE(refused_info);
  EXPECT_NE(refused_info->text.find("unknown (INFO refused: NOPERM User locker"), std::string::npos)
      << refused_info->text;
  EXPECT_NE(refused_info->text.find("+info"), std::string::npos) << refused_info->text;
  const auto no_policy = Handshake::notice(Step::info_memory, info_memory("7", ""));
  ASSERT_TRUE(no_policy);
  EXPECT_NE(no_policy->text.find("unknown (INFO memory has no maxmemory_policy)"),
            std::string::npos)
      << no_policy->text;
  // The other steps have nothing to say, whatever their reply.
  EXPECT_FALSE(Handshake::notice(Step::hello, error_reply("NOPERM no hello")));
  EXPECT_FALSE(Handshake::notice(Step::setname, error_reply("NOPERM no setname")));
  EXPECT_FALSE(Handshake::notice(Step::ping, text("PONG")));
}

TEST(Handshake, ReadEvictionParsesTheTwoFieldsAndNothingElse) {
  const auto e = read_eviction(info_memory("104857600", "allkeys-lfu"));
  EXPECT_EQ(e.verdict, Eviction::Verdict::evicts);
  EXPECT_EQ(e.maxmemory, 104857600u);
  EXPECT_EQ(e.policy, "allkeys-lfu");
  // LF-only lines, the fields first or last, a status reply (a proxy's rewrite).
  Reply lf = text("maxmemory_policy:noeviction\nmaxmemory:42");
  EXPECT_EQ(read_eviction(lf).verdict, Eviction::Verdict::never);
  EXPECT_EQ(read_eviction(lf).maxmemory, 42u);
  lf.type = Reply::Type::status;
  EXPECT_EQ(read_eviction(lf).policy, "noeviction");
  // A longer field with the same start is not the field.
  EXPECT_EQ(read_eviction(text("maxmemory_policy_x:volatile-lru\r\nmaxmemory:1\r\n")).verdict,
            Eviction::Verdict::unknown);
  EXPECT_EQ(
      read_eviction(text("maxmemory:18446744073709551616\r\nmaxmemory_policy:noeviction")).verdict,
      Eviction::Verdict::unknown)
      << "beyond 64 bits: not a number";
}

}  // namespace
