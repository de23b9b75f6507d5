// SPDX-License-Identifier: MIT
// docs/security.md's least-privilege ACL is the list, not a copy of it: these tests read the
// `ACL SETUSER` block from the document itself. One checks that it names every command the
// scripts call (so a new redis.call cannot drift from it unnoticed); the other creates that
// user, word for word, on a server of its own and drives every operation of the library and
// every mode of the CLI as it, each one checked for success, and then requires the server's
// ACL LOG to be empty (a denied command the library survived, by polling or retrying, would
// show there and nowhere else).
#include "child_process.hpp"
#include "keys.hpp"
#include "live.hpp"
#include "redis_server.hpp"

#include <redis_lock/election.hpp>
#include <redis_lock/with_lock.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;

namespace {

/// The words of docs/security.md's `ACL SETUSER locker ...` block, after "ACL SETUSER".
std::vector<std::string> documented_acl() {
  std::ifstream in(REDIS_LOCK_SECURITY_DOC);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const auto begin = doc.find("ACL SETUSER locker");
  if (begin == std::string::npos) return {};
  const auto end = doc.find("```", begin);
  std::istringstream words(doc.substr(begin, end - begin));
  std::vector<std::string> out;
  for (std::string w; words >> w;) out.push_back(w);
  return {out.begin() + 2, out.end()};
}

std::set<std::string> documented_commands() {
  std::set<std::string> out;
  for (const auto& w : documented_acl()) {
    if (w.size() > 1 && w[0] == '+') out.insert(w.substr(1));
  }
  return out;
}

/// As docs/security.md tells an administrator: the scripts' Functions library loaded once, by
/// a manager of a user who may (the default user here), since the lock user may not.
void load_library_as_administrator(const RedisServer& server) {
  asio::io_context io;
  LockManager admin(io.get_executor(), server.config());
  const auto r = acquire_once(admin, io, unique_resource("load"));
  EXPECT_TRUE(r.owned) << r.ec.message();
  EXPECT_NE(server.command({"FUNCTION", "LIST", "LIBRARYNAME", "redis_lock_*"}), "");
  EXPECT_EQ(server.command({"FLUSHALL"}), "OK");  // its fencing counter (the library stays)
}

}  // namespace

TEST(LeastPrivilege, TheDocumentedListNamesEveryCommandTheScriptsCall) {
  const auto documented = documented_commands();
  ASSERT_FALSE(documented.empty()) << "no ACL SETUSER block in " << REDIS_LOCK_SECURITY_DOC;
  const std::regex call(R"(redis\.p?call\(\s*'([A-Za-z]+)')");
  std::set<std::string> called;
  for (const auto& entry : std::filesystem::directory_iterator(REDIS_LOCK_SCRIPTS_DIR)) {
    if (entry.path().extension() != ".lua") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string lua = text.str();
    for (std::sregex_iterator it(lua.begin(), lua.end(), call), end; it != end; ++it) {
      std::string name = (*it)[1];
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      called.insert(name);
    }
  }
  // The one call whose command is computed: PUBLISH (standalone) or SPUBLISH (a Cluster).
  called.insert("publish");
  // What the client sends itself on a standalone server.
  for (const char* own : {"fcall", "fcall_ro", "evalsha", "eval", "subscribe", "unsubscribe",
                          "ping", "client|setname", "script|load", "info"}) {
    called.insert(own);
  }
  EXPECT_GT(called.size(), 20u) << "the scripts were not found in " << REDIS_LOCK_SCRIPTS_DIR;
  for (const auto& name : called) {
    EXPECT_TRUE(documented.count(name)) << "+" << name << " is called but not in docs/security.md";
  }
}

TEST(LeastPrivilege, EveryOperationAndEveryCliModeLeavesTheAclLogEmpty) {
  RedisServer server;
  auto acl = documented_acl();
  ASSERT_FALSE(acl.empty());
  for (auto& w : acl) {
    if (w == ">password") w = ">pw";
  }
  acl.insert(acl.begin(), {"ACL", "SETUSER"});
  ASSERT_EQ(server.command(acl), "OK");
  load_library_as_administrator(server);
  ASSERT_EQ(server.command({"ACL", "LOG", "RESET"}), "OK");
  auto cfg = server.config();
  cfg.username = "locker";
  cfg.password = "pw";

  asio::io_context io;
  LockManager a(io.get_executor(), cfg);
  LockManager b(io.get_executor(), cfg);
  const auto done = [](error_code ec, const LockManager& m) {
    return ::testing::AssertionResult(!ec) << ec.message() << " / " << m.last_server_error();
  };
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        const auto use = asio::as_tuple(asio::use_awaitable);
        // A mutex: renewed, extended, waited for (queue, subscription, hand-off), inspected
        // with a waiter, force-released with a waiter, then the waiter's own release.
        const auto mutex = unique_resource("mutex");
        auto [e1, held] = co_await a.async_acquire(mutex, {.ttl = 400ms, .auto_renew = true}, use);
        EXPECT_TRUE(done(e1, a));
        CO_ASSERT_TRUE(held.owns_lock());
        auto [e2, extended] = co_await held.async_extend(2s, use);
        EXPECT_TRUE(done(e2, a));
        EXPECT_TRUE(extended);
        bool handed = false;
        LockGuard second;
        b.async_acquire(mutex, {.ttl = 5s, .wait = 10s}, [&](error_code ec, LockGuard g) {
          EXPECT_TRUE(done(ec, b));
          second = std::move(g);
          handed = true;
        });
        co_await sleep_for(300ms);  // the waiter queues; the holder renews meanwhile
        auto [e3, info] = co_await a.async_inspect(mutex, use);
        EXPECT_TRUE(done(e3, a));
        EXPECT_TRUE(info.held);
        auto [e4, released] = co_await held.async_release(use);
        EXPECT_TRUE(done(e4, a));
        EXPECT_TRUE(released);
        while (!handed) co_await sleep_for(10ms);
        EXPECT_TRUE(second.owns_lock());
        bool queued_done = false;
        a.async_acquire(mutex, {.ttl = 5s, .wait = 10s}, [&](error_code ec, LockGuard g) {
          EXPECT_TRUE(done(ec, a));
          EXPECT_TRUE(g.owns_lock());
          queued_done = true;
        });
        co_await sleep_for(200ms);
        auto [e5, evicted] = co_await b.async_force_release(mutex, use);
        EXPECT_TRUE(done(e5, b));
        EXPECT_TRUE(evicted);
        while (!queued_done) co_await sleep_for(10ms);

        // A semaphore of 1 with a waiter.
        const auto sem = unique_resource("sem");
        auto [e6, permit] = co_await a.async_acquire_permit(sem, 1, {.ttl = 5s}, use);
        EXPECT_TRUE(done(e6, a));
        bool permitted = false;
        b.async_acquire_permit(sem, 1, {.ttl = 5s, .wait = 10s}, [&](error_code ec, LockGuard g) {
          EXPECT_TRUE(done(ec, b));
          EXPECT_TRUE(g.owns_lock());
          permitted = true;
        });
        co_await sleep_for(200ms);
        auto [e7, sem_info] = co_await a.async_inspect(sem, use);
        EXPECT_TRUE(done(e7, a));
        co_await permit.async_release(use);
        while (!permitted) co_await sleep_for(10ms);

        // A read-write lock: a reader, a writer waiting for it, a reader behind the writer.
        const auto rw = unique_resource("rw");
        auto [e8, reader] = co_await a.async_acquire_shared(rw, {.ttl = 5s}, use);
        EXPECT_TRUE(done(e8, a));
        int rw_done = 0;
        b.async_acquire_exclusive(rw, {.ttl = 5s, .wait = 10s}, [&](error_code ec, LockGuard g) {
          EXPECT_TRUE(done(ec, b));
          EXPECT_TRUE(g.owns_lock());
          ++rw_done;
          g.async_release(asio::detached);
        });
        co_await sleep_for(200ms);
        b.async_acquire_shared(rw, {.ttl = 5s, .wait = 10s}, [&](error_code ec, LockGuard g) {
          EXPECT_TRUE(done(ec, b));
          EXPECT_TRUE(g.owns_lock());
          ++rw_done;
        });
        co_await sleep_for(100ms);
        auto [e9, rw_info] = co_await a.async_inspect(rw, use);
        EXPECT_TRUE(done(e9, a));
        co_await reader.async_release(use);
        while (rw_done < 2) co_await sleep_for(10ms);

        // Several at once, and with_lock.
        // (named first: GCC 12 cannot keep a braced list in a coroutine frame)
        std::vector<std::string> several;
        several.push_back(unique_resource("all1"));
        several.push_back(unique_resource("all2"));
        auto [e10, all] = co_await a.async_acquire_all(std::move(several), {.ttl = 5s}, use);
        EXPECT_TRUE(done(e10, a));
        EXPECT_EQ(all.size(), 2u);
        for (auto& g : all) co_await g.async_release(use);
        auto [wex, wec] = co_await async_with_lock(
            a, unique_resource("with"), {.ttl = 5s},
            [](const LockGuard&) -> asio::awaitable<void> { co_return; }, use);
        EXPECT_FALSE(wex);
        EXPECT_TRUE(done(wec, a));

        // An election: a leader, an observer, a queued candidate, the hand-over.
        Election first(a, unique_resource("election"));
        Election other(b, first.name());
        auto [e11, leading] = co_await first.async_campaign("first", {.ttl = 5s}, use);
        EXPECT_TRUE(done(e11, a));
        auto [e12, seen] = co_await other.async_observe(0, use);
        EXPECT_TRUE(done(e12, b));
        CO_ASSERT_TRUE(seen.has_value());
        bool next_leads = false;
        other.async_campaign("second", {.ttl = 5s, .wait = 10s}, [&](error_code ec, LockGuard g) {
          EXPECT_TRUE(done(ec, b));
          EXPECT_TRUE(g.owns_lock());
          next_leads = true;
        });
        co_await sleep_for(200ms);
        auto [e13, now] = co_await first.async_leader(use);
        EXPECT_TRUE(done(e13, a));
        co_await leading.async_release(use);
        auto [e14, changed] = co_await other.async_observe(seen->term, use);
        EXPECT_TRUE(done(e14, b));
        while (!next_leads) co_await sleep_for(10ms);
      },
      30s);

#ifdef REDIS_LOCK_CLI_PATH
  const std::string url = "redis://locker:pw@127.0.0.1:" + std::to_string(server.port());
  const auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {REDIS_LOCK_CLI_PATH, "--url", url});
    return args;
  };
  const auto resource = unique_resource("cli");
  EXPECT_EQ(ChildProcess(cli({resource, "--", "true"})).wait(), 0) << "lock mode";
  EXPECT_EQ(ChildProcess(cli({"--permits", "2", resource + "p", "--", "true"})).wait(), 0)
      << "--permits";
  EXPECT_EQ(ChildProcess(cli({"--shared", resource + "s", "--", "true"})).wait(), 0) << "--shared";
  {
    ChildProcess holder(cli({resource, "--", "sh", "-c", "echo held; exec sleep 30"}));
    ASSERT_EQ(holder.read_line(), "held");
    EXPECT_EQ(ChildProcess(cli({"status", resource})).wait(), 0) << "status";
    EXPECT_EQ(ChildProcess(cli({"status", "--json", resource})).wait(), 0) << "status --json";
    EXPECT_EQ(ChildProcess(cli({"force-release", resource})).wait(), 0) << "force-release";
    EXPECT_EQ(holder.wait(), 4) << "the evicted holder learns it at its renewal";
  }
  const auto name = unique_resource("cli-election");
  ChildProcess observer(cli({"observe", "--json", name}));
  EXPECT_NE(observer.read_line(), "") << "observe";
  EXPECT_EQ(ChildProcess(cli({"elect", name, "--", "true"})).wait(), 0) << "elect";
  EXPECT_NE(observer.read_line(), "") << "observe saw the leader";
  observer.signal(SIGTERM);
  EXPECT_EQ(observer.wait(), 0);
#endif

  EXPECT_EQ(server.command({"ACL", "LOG"}), "")
      << "commands denied to the documented user (ACL LOG)";
}

namespace {

/// Creates the documented user as "locker" with password "pw" on `server`, without the
/// words `left_out`; returns a configuration that logs in as that user.
ConnectionConfig documented_user(const RedisServer& server,
                                 const std::vector<std::string>& left_out = {}) {
  auto acl = documented_acl();
  EXPECT_FALSE(acl.empty());
  std::vector<std::string> words = {"ACL", "SETUSER"};
  for (auto& w : acl) {
    if (std::find(left_out.begin(), left_out.end(), w) != left_out.end()) continue;
    words.push_back(w == ">password" ? ">pw" : w);
  }
  EXPECT_EQ(server.command(words), "OK");
  load_library_as_administrator(server);
  auto cfg = server.config();
  cfg.username = "locker";
  cfg.password = "pw";
  return cfg;
}

/// The server notices an observer heard.
struct Notices final : Observer {
  void on_server_notice(const ServerNotice& n) noexcept override {
    heard.push_back({n.kind, std::string(n.text)});
  }
  std::vector<std::pair<ServerNoticeKind, std::string>> heard;
};

}  // namespace

TEST(LeastPrivilege, TheDocumentedUserMayReadTheEvictionPolicyAndAnEvictingServerIsRefused) {
  // The documented ACL has +info: the library reads maxmemory and its policy, and refuses a
  // server that evicts keys, without a denied command in the ACL LOG.
  RedisServer server;
  const auto cfg = documented_user(server);
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "100mb"}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", "volatile-lru"}), "OK");
  ASSERT_EQ(server.command({"ACL", "LOG", "RESET"}), "OK");
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto r = acquire_once(locks, io, unique_resource());
  EXPECT_EQ(r.ec, error::server_evicts) << r.ec.message() << " / " << locks.last_server_error();
  EXPECT_NE(locks.last_server_error().find("volatile-lru"), std::string::npos);
  EXPECT_EQ(server.command({"DBSIZE"}), "0");
  EXPECT_EQ(server.command({"ACL", "LOG"}), "") << "a command was denied";
}

TEST(LeastPrivilege, WithoutInfoTheConnectGoesOnAndSaysSoOncePerManager) {
  // A user without +info cannot read the policy: the connect goes on (the server may well
  // evict: this one would be refused if the library could see it), and each manager says
  // once that the policy is unknown, however many connections and reconnects it makes.
  RedisServer server;
  const auto cfg = documented_user(server, {"+info"});
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "100mb"}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", "volatile-lru"}), "OK");
  asio::io_context io;
  for (int manager = 0; manager < 2; ++manager) {
    SCOPED_TRACE(manager);
    auto notices = std::make_shared<Notices>();
    LockManager locks(io.get_executor(), cfg, {.observer = notices});
    const auto resource = unique_resource();
    LockGuard held;
    run_co(io, [&]() -> asio::awaitable<void> {
      const auto use = asio::as_tuple(asio::use_awaitable);
      auto [ec, g] = co_await locks.async_acquire(resource, {.ttl = 10s}, use);
      EXPECT_FALSE(ec) << ec.message() << " / " << locks.last_server_error();
      held = std::move(g);
      // A waiter (another connection, its subscription) and a reconnect.
      auto [wec, waited] = co_await locks.async_acquire(resource, {.ttl = 5s, .wait = 300ms}, use);
      EXPECT_FALSE(wec) << wec.message();
      EXPECT_FALSE(waited.owns_lock());
      // (A waiting acquire rides out the link the kill may leave it to find dead.)
      redis_command(server.port(), {"CLIENT", "KILL", "USER", "locker"});
      auto [aec, again] =
          co_await locks.async_acquire(unique_resource(), {.ttl = 5s, .wait = 5s}, use);
      EXPECT_FALSE(aec) << aec.message();
      EXPECT_TRUE(again.owns_lock());
      EXPECT_NE(server.command({"CLIENT", "LIST"}).find("user=locker"), std::string::npos)
          << "reconnected";
      co_await held.async_release(use);
    }());
    ASSERT_EQ(notices->heard.size(), 1u);
    EXPECT_EQ(notices->heard.front().first, ServerNoticeKind::policy_unknown);
    const auto& text = notices->heard.front().second;
    EXPECT_NE(text.find("whether the lock server evicts keys is unknown (INFO refused: NOPERM"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("+info"), std::string::npos) << text;
    EXPECT_EQ(locks.last_server_error(), text);
  }
  EXPECT_NE(server.command({"ACL", "LOG"}).find("info"), std::string::npos)
      << "INFO was asked, and denied";
}

TEST(HandOff, AForgedMessageGrantsNothing) {
  // Any client that may PUBLISH on the lock's channels can publish what a release would:
  // "<token> <fencing token> <place>". It used to grant the waiter the lock, with the
  // forger's token, while the real holder still held it. Now an unsigned message, or one
  // signed with another secret than the waiter's, only makes the waiter ask the server.
  const auto cfg = shared_server_config();
  asio::io_context io;
  LockManager holder_side(io.get_executor(), cfg);
  LockManager waiter_side(io.get_executor(), cfg);
  const auto resource = unique_resource("forged");
  const auto keys = detail::make_keys("lock:", resource);
  LockGuard held;
  run_co(io, [&]() -> asio::awaitable<void> {
    auto [ec, g] = co_await holder_side.async_acquire(resource, {.ttl = 10s},
                                                      asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(ec);
    held = std::move(g);
  });
  ASSERT_TRUE(held.owns_lock());
  bool granted = false;
  std::uint64_t token = 0;
  waiter_side.async_acquire(resource, {.ttl = 5s, .wait = 20s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    granted = g.owns_lock();
    token = g.fencing_token();
    g.async_release(asio::detached);
  });
  const auto port = cfg.port;
  std::string member;
  for (int i = 0; i < 200 && member.empty(); ++i) {
    io.restart(), io.run_for(10ms);
    member = redis_command(port, {"ZRANGE", keys.queue(), "0", "0"});
  }
  ASSERT_GE(member.size(), 48u) << "the waiter did not queue";
  const auto channel = "lock:notify:" + member.substr(32, 16);
  // The waiter subscribes once its attempt's reply says it queued: on a loaded machine that
  // comes after the member shows in the queue.
  for (int i = 0; i < 500; ++i) {
    if (redis_command(port, {"PUBSUB", "NUMSUB", channel}) == channel + " 1") break;
    io.restart(), io.run_for(10ms);
  }
  // The place its last attempt left (read now: the waiter refreshes it while its io runs,
  // and it does not run until the messages are published), which a real release would name.
  const auto place = redis_command(port, {"ZSCORE", keys.queue_expiry(), member});
  EXPECT_EQ(redis_command(port, {"PUBLISH", channel, member.substr(0, 32) + " 999 " + place}), "1")
      << "nobody listened on " << channel;
  // Nor does one with a signature that is not the waiter's secret's (a publisher that may not
  // read the queue cannot know the secret; one that may can also delete the lease:
  // docs/security.md).
  EXPECT_EQ(
      redis_command(port, {"PUBLISH", channel,
                           member.substr(0, 32) + " 999 " + place + " " + std::string(40, 'a')}),
      "1");
  io.restart();
  io.run_for(500ms);
  EXPECT_FALSE(granted) << "a forged message granted the lock, with token " << token;
  EXPECT_NE(token, 999u);
  // The real release hands it over, with a real token.
  const auto holder_token = held.fencing_token();
  run_co(io, [&]() -> asio::awaitable<void> {
    co_await held.async_release(asio::as_tuple(asio::use_awaitable));
  });
  for (int i = 0; i < 500 && !granted; ++i) io.restart(), io.run_for(10ms);
  EXPECT_TRUE(granted);
  EXPECT_GT(token, holder_token);
}

TEST(HandOff, AForgedAnnouncementMakesNoObserverReportALeader) {
  // The same for an election's announcements: an observer waiting for the next leader after
  // the current term hears "<term + 1> <ttl> <value>" from a forger, asks the server, finds
  // the same leader, and goes on waiting; the real hand-over is reported with the real term.
  const auto cfg = shared_server_config();
  asio::io_context io;
  LockManager leader_side(io.get_executor(), cfg);
  LockManager observer_side(io.get_executor(), cfg);
  Election election(leader_side, unique_resource("forged-election"));
  Election watching(observer_side, election.name());
  LockGuard leading;
  bool campaigned = false;
  election.async_campaign("real", {.ttl = 10s}, [&](error_code ec, LockGuard g) {
    EXPECT_FALSE(ec) << ec.message();
    leading = std::move(g);
    campaigned = true;
  });
  // (polled: the leadership's renewals keep the io_context busy, so run() would not return)
  for (int i = 0; i < 500 && !campaigned; ++i) io.restart(), io.run_for(10ms);
  ASSERT_TRUE(leading.owns_lock());
  const auto term = leading.fencing_token();
  bool reported = false;
  std::optional<Leader> seen;
  watching.async_observe(term, [&](error_code ec, std::optional<Leader> l) {
    EXPECT_FALSE(ec) << ec.message();
    reported = true;
    seen = std::move(l);
  });
  io.restart();
  io.run_for(200ms);  // subscribed and read once (nothing signals "listening")
  const auto channel = "lock:leader:election:" + election.name();
  EXPECT_EQ(redis_command(cfg.port, {"PUBLISH", channel, std::to_string(term + 1) + " 5000 evil"}),
            "1");
  io.restart();
  io.run_for(500ms);
  EXPECT_FALSE(reported) << "a forged announcement was reported: "
                         << (seen ? seen->value + " " + std::to_string(seen->term) : "none");
  leading.async_release(asio::detached);  // resigns: announced
  for (int i = 0; i < 500 && !reported; ++i) io.restart(), io.run_for(10ms);
  EXPECT_TRUE(reported);
  EXPECT_FALSE(seen.has_value()) << "the resignation left no leader";
}
