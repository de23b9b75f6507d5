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
using std::chrono::milliseconds;

namespace {

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(long long ms) { return t0 + milliseconds(ms); }
constexpr long long none = -1;  // no time: nothing queued / no wake

// ---------------------------------------------------------------------------------------
// ConnectFsm: scripted rows, one event each, with the state after it and the action

enum class Ev {
  queued,    // arg: the oldest waiting command's deadline
  over,      // the backoff's timer; arg: the queue
  up,        // transport_up
  done,      // handshake_done
  failed,    // connect_failed(e)
  deadline,  // connect_deadline
  broke,     // link_failed(e); arg: the queue
  late,      // arg: the queue
  idle,      // arg: 1 = has work, 2 = busy (waiting or draining), 3 = both
  nothing,   // nothing_waiting
  leave,     // arg: the queue
};

using L = ConnectFsm::Action::Link;
using N = ConnectFsm::Action::Next;

struct Row {
  Ev ev;
  long long t;        // now
  long long arg;      // the queue's oldest deadline (none: nothing waits), or idle's bits
  State state;        // after the event
  L link;             // the action
  N next;             //
  long long until;    // with wait
  long long next_at;  // next_connect_at after the event, none for "at once"
  error_code e{};     // failed, broke: the error given
  error_code want{};  // drop, fail: the error the action carries
};

struct Script {
  const char* name;
  milliseconds command_timeout;
  std::vector<Row> rows;
};

ConnectFsm::Queue queue_of(long long deadline) {
  if (deadline == none) return {};
  return {.waiting = true, .oldest_deadline = at(deadline)};
}

void run(const Script& s) {
  SCOPED_TRACE(s.name);
  ConnectFsm fsm(s.command_timeout, no_jitter);
  int i = 0;
  for (const auto& r : s.rows) {
    SCOPED_TRACE("row " + std::to_string(i++));
    const auto q = queue_of(r.arg);
    ConnectFsm::Action act;
    switch (r.ev) {
      case Ev::queued:
        act = fsm.queued(at(r.t), q);
        break;
      case Ev::over:
        act = fsm.backoff_over(q);
        break;
      case Ev::up:
        act = fsm.transport_up();
        break;
      case Ev::done:
        act = fsm.handshake_done();
        break;
      case Ev::failed:
        act = fsm.connect_failed(at(r.t), r.e);
        break;
      case Ev::deadline:
        act = fsm.connect_deadline(at(r.t));
        break;
      case Ev::broke:
        act = fsm.link_failed(at(r.t), r.e, q);
        break;
      case Ev::late:
        act = fsm.late(at(r.t), q);
        break;
      case Ev::idle:
        act = fsm.idle((r.arg & 1) != 0, (r.arg & 2) != 0);
        break;
      case Ev::nothing:
        act = fsm.nothing_waiting();
        break;
      case Ev::leave:
        act = fsm.leave(at(r.t), q);
        break;
    }
    EXPECT_EQ(fsm.state(), r.state);
    EXPECT_EQ(act.link, r.link);
    EXPECT_EQ(act.next, r.next);
    EXPECT_EQ(act.link_down(), r.link != L::keep);
    EXPECT_EQ(act.error, r.want);
    if (r.next == N::wait) {
      EXPECT_EQ(act.until, at(r.until));
    }
    if (r.next_at == none) {
      EXPECT_LE(fsm.next_connect_at(), at(r.t)) << "the next connect may go at once";
    } else {
      EXPECT_EQ(fsm.next_connect_at(), at(r.next_at));
    }
    EXPECT_EQ(fsm.ready(), r.state == State::ready);
    EXPECT_EQ(fsm.in_handshake(), r.state == State::handshake);
  }
}

const auto C = State::closed;
const auto B = State::backoff;
const auto K = State::connecting;
const auto H = State::handshake;
const auto R = State::ready;
const error_code lost = error::connection_lost;
const error_code not_connected = error::connect_failed;
const error_code tls = error::tls_handshake_failed;

// A connect that fails at `t` (a command queued at `t`, its connect refused), the backoff
// then running to `next_at`.
std::vector<Row> failing(long long t, long long next_at, long long since = none) {
  return {{Ev::queued, t, t + 1000, K, L::keep, N::connect, 0, since},
          {Ev::failed, t, 0, C, L::fail, N::none, 0, next_at, not_connected, not_connected}};
}

std::vector<Row> join(std::initializer_list<std::vector<Row>> parts) {
  std::vector<Row> rows;
  for (const auto& part : parts) rows.insert(rows.end(), part.begin(), part.end());
  return rows;
}

const std::vector<Row> ready_at_0 = {
    {Ev::queued, 0, 1000, K, L::keep, N::connect, 0, none},
    {Ev::up, 1, 0, H, L::keep, N::handshake, 0, none},
    {Ev::done, 2, 0, R, L::keep, N::write, 0, none},
};

const Script connect_scripts[] = {
    {"the first command connects at once; a good handshake makes the link ready; then each "
     "command is written",
     1000ms, join({ready_at_0, {{Ev::queued, 3, 1003, R, L::keep, N::write, 0, none}}})},
    {"failures back off 25 ms, doubling to 1 s; the timer's end connects again", 100000ms,
     join({failing(0, 25),
           {{Ev::queued, 1, 100001, B, L::keep, N::wait, 25, 25},
            {Ev::queued, 2, 100001, B, L::keep, N::none, 0, 25},  // (the timer is armed)
            {Ev::over, 25, 100001, K, L::keep, N::connect, 0, 25},
            {Ev::failed, 30, 0, C, L::fail, N::none, 0, 80, not_connected, not_connected},
            {Ev::queued, 30, 100030, B, L::keep, N::wait, 80, 80},
            {Ev::over, 80, 100030, K, L::keep, N::connect, 0, 80},
            {Ev::failed, 80, 0, C, L::fail, N::none, 0, 180, not_connected, not_connected}},
           failing(180, 380, 180),
           failing(380, 780, 380),
           failing(780, 1580, 780),
           failing(1580, 2580, 1580),
           failing(2580, 3580, 2580)})},
    {"a ready link resets the backoff: the next failure waits 25 ms again", 100000ms,
     join({failing(0, 25),
           failing(25, 75, 25),
           failing(75, 175, 75),
           {{Ev::queued, 175, 100175, K, L::keep, N::connect, 0, 175},
            {Ev::up, 176, 0, H, L::keep, N::handshake, 0, 175},
            {Ev::done, 177, 0, R, L::keep, N::write, 0, none},
            {Ev::broke, 500, none, C, L::drop, N::none, 0, none, lost, lost},
            {Ev::queued, 500, 1500, K, L::keep, N::connect, 0, none},
            {Ev::failed, 510, 0, C, L::fail, N::none, 0, 535, not_connected, not_connected}}})},
    {"a refused handshake step fails the connect with its error, and backs off",
     1000ms,
     {{Ev::queued, 0, 1000, K, L::keep, N::connect, 0, none},
      {Ev::up, 2, 0, H, L::keep, N::handshake, 0, none},
      {Ev::failed, 3, 0, C, L::fail, N::none, 0, 28, error::server_unsupported,
       error::server_unsupported}}},
    {"the backoff ends early for the oldest command: half its time left, the server is tried",
     1000ms,
     join({failing(0, 25),
           failing(25, 75, 25),
           failing(75, 175, 75),
           failing(175, 375, 175),
           failing(375, 775, 375),
           failing(775, 1575, 775),
           // queued at 800 with a 1 s timeout: deadline 1800, tried at 1300 (before 1575)
           {{Ev::queued, 800, 1800, B, L::keep, N::wait, 1300, 1575},
            {Ev::over, 1300, 1800, K, L::keep, N::connect, 0, 1575}}})},
    {"an oldest command already past half its time connects at once, inside the backoff", 1000ms,
     join({failing(0, 25),
           failing(25, 75, 25),
           failing(75, 175, 75),
           failing(175, 375, 175),
           {{Ev::queued, 200, 600, K, L::keep, N::connect, 0, 375}}})},
    {"a backoff whose queue emptied (its commands timed out) ends closed, connecting nothing",
     1000ms,
     join({failing(0, 25),
           {{Ev::queued, 10, 1010, B, L::keep, N::wait, 25, 25},
            {Ev::over, 25, none, C, L::keep, N::none, 0, 25},
            {Ev::queued, 30, 1030, K, L::keep, N::connect, 0, 25}}})},
    {"a backoff stopped when nothing waits: its timer's late end does nothing", 1000ms,
     join({failing(0, 25),
           {{Ev::queued, 10, 1010, B, L::keep, N::wait, 25, 25},
            {Ev::nothing, 11, 0, C, L::keep, N::stop_wait, 0, 25},
            {Ev::nothing, 12, 0, C, L::keep, N::none, 0, 25},
            {Ev::over, 25, 1010, C, L::keep, N::none, 0, 25}}})},
    {"a ready link lost (server restart, idle close) reconnects at once for what waits", 1000ms,
     join({ready_at_0,
           {{Ev::broke, 9000, 10000, K, L::drop, N::connect, 0, none, lost, lost},
            {Ev::up, 9001, 0, H, L::keep, N::handshake, 0, none},
            {Ev::done, 9002, 0, R, L::keep, N::write, 0, none},
            {Ev::broke, 9500, none, C, L::drop, N::none, 0, none, error::protocol_error,
             error::protocol_error}}})},
    {"a READONLY reply (a demoted master) drops the ready link with read_only", 1000ms,
     join({ready_at_0,
           {{Ev::broke, 5, none, C, L::drop, N::none, 0, none, error::read_only,
             error::read_only}}})},
    {"a TLS-shaped failure of a ready link is a lost link", 1000ms,
     join({ready_at_0, {{Ev::broke, 5, none, C, L::drop, N::none, 0, none, tls, lost}}})},
    {"a link that fails during its handshake fails the connect: tls_handshake_failed for a "
     "TLS refusal, connect_failed for anything else",
     1000ms,
     {{Ev::queued, 0, 1000, K, L::keep, N::connect, 0, none},
      {Ev::up, 0, 0, H, L::keep, N::handshake, 0, none},
      {Ev::broke, 1, 1000, C, L::fail, N::none, 0, 26, tls, tls},
      {Ev::queued, 26, 1026, K, L::keep, N::connect, 0, 26},
      {Ev::up, 27, 0, H, L::keep, N::handshake, 0, 26},
      {Ev::broke, 30, 1026, C, L::fail, N::none, 0, 80, error::protocol_error, not_connected},
      {Ev::queued, 80, 1080, K, L::keep, N::connect, 0, 80},
      {Ev::broke, 81, 1080, C, L::fail, N::none, 0, 181, lost, not_connected}}},
    {"the connect's deadline fails it as connect_timeout; once ready, a deadline does nothing",
     1000ms,
     {{Ev::queued, 0, 1000, K, L::keep, N::connect, 0, none},
      {Ev::deadline, 1000, 0, C, L::fail, N::none, 0, 1025, {}, error::connect_timeout},
      {Ev::queued, 1025, 2025, K, L::keep, N::connect, 0, 1025},
      {Ev::up, 1026, 0, H, L::keep, N::handshake, 0, 1025},
      {Ev::deadline, 2026, 0, C, L::fail, N::none, 0, 2076, {}, error::connect_timeout},
      {Ev::queued, 2076, 3076, K, L::keep, N::connect, 0, 2076},
      {Ev::up, 2077, 0, H, L::keep, N::handshake, 0, 2076},
      {Ev::done, 2078, 0, R, L::keep, N::write, 0, none},
      {Ev::deadline, 3077, 0, R, L::keep, N::none, 0, none}}},
    {"a link whose command is late drains; what waits connects a new one at once", 1000ms,
     join({ready_at_0,
           {{Ev::late, 1002, none, C, L::drain, N::none, 0, none},
            {Ev::queued, 1002, 2002, K, L::keep, N::connect, 0, none},
            {Ev::up, 1003, 0, H, L::keep, N::handshake, 0, none},
            {Ev::late, 1004, 2002, H, L::keep, N::none, 0, none},  // (not ready: no drain)
            {Ev::done, 1005, 0, R, L::keep, N::write, 0, none},
            {Ev::late, 2005, 3000, K, L::drain, N::connect, 0, none}}})},
    {"an unneeded link closes: a ready one without work, a connect nobody waits for", 1000ms,
     join({ready_at_0,
           {{Ev::idle, 5, 1, R, L::keep, N::none, 0, none},
            {Ev::idle, 6, 0, C, L::close, N::none, 0, none},
            {Ev::idle, 7, 0, C, L::keep, N::none, 0, none},
            {Ev::queued, 8, 1008, K, L::keep, N::connect, 0, none},
            {Ev::idle, 9, 3, K, L::keep, N::none, 0, none},
            {Ev::idle, 9, 2, K, L::keep, N::none, 0, none},
            {Ev::up, 10, 0, H, L::keep, N::handshake, 0, none},
            {Ev::idle, 11, 2, H, L::keep, N::none, 0, none},
            {Ev::idle, 12, 1, C, L::close, N::none, 0, none}}})},
    {"a connect given up when its queue timed out keeps its backoff for the next command", 1000ms,
     join({failing(0, 25),
           failing(25, 75, 25),
           {{Ev::queued, 75, 1075, K, L::keep, N::connect, 0, 75},
            {Ev::idle, 1075, 0, C, L::close, N::none, 0, 75}},
           failing(1100, 1200, 75)})},
    {"a backoff is no link to close", 1000ms,
     join({failing(0, 25),
           {{Ev::queued, 5, 1005, B, L::keep, N::wait, 25, 25},
            {Ev::idle, 6, 0, B, L::keep, N::none, 0, 25}}})},
    {"a far deadline: a backoff lasts its whole length", 1000ms,
     join({failing(0, 25), {{Ev::queued, 5, 100000, B, L::keep, N::wait, 25, 25}}})},
    {"leaving the server (Sentinel: its address moved) drops a ready link; elsewhere nothing",
     1000ms,
     join({{{Ev::leave, 0, 1000, C, L::keep, N::none, 0, none}},
           ready_at_0,
           {{Ev::leave, 3, 1003, K, L::drop, N::connect, 0, none, {}, lost},
            {Ev::leave, 4, 1003, K, L::keep, N::none, 0, none}}})},
    {"a command queued while connecting or in the handshake waits for it; a TLS-shaped failure "
     "while connecting is a TLS refusal",
     1000ms,
     {{Ev::queued, 0, 1000, K, L::keep, N::connect, 0, none},
      {Ev::queued, 1, 1000, K, L::keep, N::none, 0, none},
      {Ev::up, 2, 0, H, L::keep, N::handshake, 0, none},
      {Ev::queued, 3, 1000, H, L::keep, N::none, 0, none},
      {Ev::broke, 4, 1000, C, L::fail, N::none, 0, 29, tls, tls},
      {Ev::queued, 29, 1029, K, L::keep, N::connect, 0, 29},
      {Ev::broke, 30, 1029, C, L::fail, N::none, 0, 80, tls, tls}}},
    {"a stale completion (a link given up) changes nothing",
     1000ms,
     {{Ev::up, 0, 0, C, L::keep, N::none, 0, none},
      {Ev::done, 0, 0, C, L::keep, N::none, 0, none},
      {Ev::failed, 0, 0, C, L::keep, N::none, 0, none, not_connected, {}},
      {Ev::broke, 0, 1000, C, L::keep, N::none, 0, none, lost, {}},
      {Ev::late, 0, 1000, C, L::keep, N::none, 0, none},
      {Ev::queued, 0, 1000, K, L::keep, N::connect, 0, none},
      {Ev::done, 1, 0, K, L::keep, N::none, 0, none},
      {Ev::up, 1, 0, H, L::keep, N::handshake, 0, none},
      {Ev::up, 2, 0, H, L::keep, N::none, 0, none}}},
};

// One case per script: the table's rows each have one that exercises them.
class ConnectFsmScript : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ConnectFsmScript, Rows) { run(connect_scripts[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(ConnectFsm, ConnectFsmScript,
                         ::testing::Range(std::size_t{0}, std::size(connect_scripts)),
                         [](const auto& row) { return "script_" + std::to_string(row.param); });

TEST(ConnectFsm, BackoffSequence) {
  // 25, 50, 100, ..., capped at 1 s, for as long as the server stays down.
  ConnectFsm fsm(1000ms, no_jitter);
  const long long expected[] = {25, 50, 100, 200, 400, 800, 1000, 1000, 1000};
  long long now = 0;
  for (const auto wait : expected) {
    EXPECT_EQ(fsm.queued(at(now), queue_of(now + 100000)).next, N::connect);
    fsm.connect_failed(at(now), not_connected);
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
