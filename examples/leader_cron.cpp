// SPDX-License-Identifier: MIT
// leader_cron: a periodic job that runs on exactly one of N processes. Start it on every
// node; they campaign in the election NAME, the leader runs the job once per period, and
// when it dies (even by kill -9) another one takes over within the lease's ttl and goes on
// with the next period that has not run.
//
//   leader_cron URL [--name NAME] [--period MS] [--ttl MS] [--work MS] [--for MS]
//                   [--resign-after RUNS] [--quiet]
//
// It prints "candidate PID" once it is ready (signals handled), then what it does (unless
// --quiet): "leading term T", "ran period P (term T)", "resigned term T", "lost ...".
//
// The job's effect is one write to a store that knows fencing tokens (here a Redis hash on
// the lock's server; in production, your database): the write carries the leader's term and
// the store refuses it when it has seen a larger one. A new leader's first step tells the
// store its term and reads which period ran last, in one atomic step: from then on a deposed
// leader (paused by GC, a full disk, SIGSTOP) cannot commit, so no period runs twice. The
// store also keeps the log the tests read: one entry per period that ran.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

struct Settings {
  std::string url;
  std::string name = "report";
  milliseconds period{1000};  // the job runs once per period (of the wall clock)
  milliseconds ttl{3000};     // the leadership's lease: a dead leader's successor is
                              // elected within about this
  milliseconds work{10};      // how long the job itself takes
  milliseconds run_for{0};    // 0: until SIGINT or SIGTERM
  int resign_after = 0;       // resign after this many runs and campaign again (0: never)
  bool quiet = false;         // print only the "candidate" line
};

bool quiet = false;

/// The current period of the wall clock (every node agrees on it, give or take its skew).
long long period_now(milliseconds period) {
  const auto since_epoch =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  return since_epoch / period;
}

/// When `p` ends, on the steady clock (what timers wait on).
std::chrono::steady_clock::time_point end_of(long long p, milliseconds period) {
  const auto wall_end = std::chrono::system_clock::time_point(period * (p + 1));
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             wall_end - std::chrono::system_clock::now());
}

/// The job's store: a blocking client, as most databases' are, used from the job thread only.
/// Keys: `cron:NAME` (hash: fence, period), `cron:NAME:log` (one entry per period that ran:
/// "PERIOD TERM SERVER_MS PID"), `cron:NAME:refused` (commits refused as stale).
class FencedStore {
 public:
  FencedStore(const redis_lock::ConnectionConfig& config, const std::string& name)
      : config_(config),
        state_("cron:" + name),
        log_(state_ + ":log"),
        refused_(state_ + ":refused") {}
  ~FencedStore() {
    if (c_ != nullptr) redisFree(c_);
  }
  FencedStore(const FencedStore&) = delete;
  FencedStore& operator=(const FencedStore&) = delete;

  /// A new leader's first step: the store learns `term` (from now on it refuses a smaller
  /// one, so a deposed leader's late commit cannot land after this) and says which period
  /// ran last (-1: none). nullopt if `term` is smaller than one it has seen (a newer leader
  /// began) or the store cannot be reached (`reachable` says which).
  std::optional<long long> begin_term(std::uint64_t term, bool& reachable) {
    static const char* const script =
        "local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')\n"
        "if tonumber(ARGV[1]) < seen then return -2 end\n"
        "redis.call('HSET', KEYS[1], 'fence', ARGV[1])\n"
        "return tonumber(redis.call('HGET', KEYS[1], 'period') or '-1')\n";
    redisReply* r = command({"EVAL", script, "1", state_, std::to_string(term)});
    reachable = r != nullptr && r->type == REDIS_REPLY_INTEGER;
    std::optional<long long> last;
    if (reachable && r->integer != -2) last = r->integer;
    if (r != nullptr) freeReplyObject(r);
    return last;
  }

  enum class Commit { done, stale, failed };
  /// Records that `period` ran under `term`, unless a larger term was seen (a newer leader:
  /// the write is refused, and kept aside for the tests). A period recorded already is not
  /// recorded again (a retry whose first answer was lost): done.
  Commit commit(std::uint64_t term, long long period) {
    static const char* const script =
        "local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')\n"
        "local t = redis.call('TIME')\n"
        "local ms = tostring(t[1] * 1000 + math.floor(t[2] / 1000))\n"
        "local entry = ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ms .. ' ' .. ARGV[3]\n"
        "if tonumber(ARGV[1]) < seen then\n"
        "  redis.call('RPUSH', KEYS[3], entry)\n"
        "  return 0\n"
        "end\n"
        "local last = tonumber(redis.call('HGET', KEYS[1], 'period') or '-1')\n"
        "if tonumber(ARGV[2]) <= last then return 1 end\n"
        "redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'period', ARGV[2])\n"
        "redis.call('RPUSH', KEYS[2], entry)\n"
        "return 1\n";
    redisReply* r = command({"EVAL", script, "3", state_, log_, refused_, std::to_string(term),
                             std::to_string(period), std::to_string(::getpid())});
    if (r == nullptr) return Commit::failed;
    const auto result = r->type != REDIS_REPLY_INTEGER ? Commit::failed
                        : r->integer == 1              ? Commit::done
                                                       : Commit::stale;
    freeReplyObject(r);
    return result;
  }

 private:
  redisReply* command(std::initializer_list<std::string> words) {
    if (c_ == nullptr || c_->err != 0) {
      if (c_ != nullptr) redisFree(c_);
      const timeval timeout{1, 0};
      c_ = config_.unix_socket.empty()
               ? redisConnectWithTimeout(config_.host.c_str(), config_.port, timeout)
               : redisConnectUnixWithTimeout(config_.unix_socket.c_str(), timeout);
      if (c_ == nullptr || c_->err != 0) return nullptr;
      redisSetTimeout(c_, timeout);
      if (!config_.password.empty()) {
        auto* auth =
            static_cast<redisReply*>(redisCommand(c_, "AUTH %s", config_.password.c_str()));
        if (auth != nullptr) freeReplyObject(auth);
      }
    }
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const auto& w : words) {
      argv.push_back(w.data());
      lengths.push_back(w.size());
    }
    return static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  }

  redis_lock::ConnectionConfig config_;
  std::string state_, log_, refused_;
  redisContext* c_ = nullptr;
};

/// One line on stdout, at once (the tests read it as it comes).
template <class... Args>
void say(const char* format, Args... args) {
  if (quiet) return;
  if constexpr (sizeof...(Args) == 0) {
    std::fputs(format, stdout);
  } else {
    std::printf(format, args...);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

asio::awaitable<void> run(const Settings& s, redis_lock::ConnectionConfig config,
                          redis_lock::LockManager& locks, asio::thread_pool& job_thread,
                          asio::cancellation_signal& stop, const bool& stopping) {
  auto ex = co_await asio::this_coro::executor;
  redis_lock::Election election(locks, s.name);
  FencedStore store(config, s.name);
  const auto stoppable = [&] {
    return asio::bind_cancellation_slot(stop.slot(), asio::as_tuple(asio::use_awaitable));
  };
  asio::steady_timer timer(ex);
  // The blocking parts (the job, the store) run on the job thread; the lease is renewed on
  // this one meanwhile.
  const auto on_job_thread = [&](auto f) {
    return asio::co_spawn(
        job_thread, [f]() -> asio::awaitable<decltype(f())> { co_return f(); },
        asio::use_awaitable);
  };
  const std::string me = std::to_string(::getpid());

  while (!stopping) {
    redis_lock::LockOptions options{.ttl = s.ttl, .wait = std::chrono::hours(24 * 365)};
    auto [ec, leadership] = co_await election.async_campaign(me, options, stoppable());
    if (stopping) break;
    if (ec || !leadership) {
      say("campaign failed: %s; again in a second", ec.message().c_str());
      timer.expires_after(1s);
      co_await timer.async_wait(stoppable());
      continue;
    }
    const std::uint64_t term = leadership.fencing_token();
    say("leading term %llu", static_cast<unsigned long long>(term));

    // The store learns the new term, and says where the previous leader stopped: the
    // current period runs now if it has not.
    std::optional<long long> last;
    bool newer_leader = false;
    while (!stopping && !leadership.lost() && !last && !newer_leader) {
      bool reachable = false;
      last = co_await on_job_thread([&] { return store.begin_term(term, reachable); });
      newer_leader = reachable && !last;
      if (!reachable) {
        timer.expires_after(std::min(s.period, 100ms));  // the store is down: again soon
        co_await timer.async_wait(stoppable());
      }
    }
    int runs = 0;
    while (!stopping && !leadership.lost() && last) {
      const long long p = period_now(s.period);
      if (p > *last && std::chrono::steady_clock::now() + s.work < leadership.valid_until()) {
        const auto outcome = co_await on_job_thread([&] {
          std::this_thread::sleep_for(s.work);  // the job's own work
          return store.commit(term, p);
        });
        if (outcome == FencedStore::Commit::stale) {
          say("period %lld refused: a newer leader began", p);
          break;
        }
        if (outcome == FencedStore::Commit::done) {
          last = p;
          say("ran period %lld (term %llu)", p, static_cast<unsigned long long>(term));
          if (s.resign_after != 0 && ++runs >= s.resign_after) break;
        }
      }
      if (stopping) break;
      // Until the next period, or until the lease would end unrenewed (then a little longer:
      // the renewal's answer, or the loss, is on its way).
      const auto now = std::chrono::steady_clock::now();
      timer.expires_at(
          std::max(std::min(end_of(p, s.period), leadership.valid_until()), now + 10ms));
      co_await timer.async_wait(stoppable());
    }
    const bool lost = leadership.lost();
    auto [release_ec, released] =
        co_await leadership.async_release(asio::as_tuple(asio::use_awaitable));
    say(lost || (!release_ec && !released) ? "lost the leadership of term %llu"
                                           : "resigned term %llu",
        static_cast<unsigned long long>(term));
  }
}

bool parse(int argc, char** argv, Settings& s) {
  const char* env = std::getenv("REDIS_LOCK_URL");
  s.url = env != nullptr ? env : "redis://127.0.0.1:6379";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    const auto number = [&] { return std::atoll(argv[++i]); };
    if (arg == "--name" && has_value) {
      s.name = argv[++i];
    } else if (arg == "--period" && has_value) {
      s.period = milliseconds(number());
    } else if (arg == "--ttl" && has_value) {
      s.ttl = milliseconds(number());
    } else if (arg == "--work" && has_value) {
      s.work = milliseconds(number());
    } else if (arg == "--for" && has_value) {
      s.run_for = milliseconds(number());
    } else if (arg == "--resign-after" && has_value) {
      s.resign_after = static_cast<int>(number());
    } else if (arg == "--quiet") {
      s.quiet = true;
    } else if (arg.rfind("--", 0) != 0) {
      s.url = arg;
    } else {
      return false;
    }
  }
  return s.period > 0ms && s.ttl > 0ms && s.work >= 0ms && s.work < s.period;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  if (!parse(argc, argv, s)) {
    std::fprintf(stderr,
                 "usage: leader_cron URL [--name NAME] [--period MS] [--ttl MS] [--work MS] "
                 "[--for MS] [--resign-after RUNS] [--quiet]   (work < period)\n");
    return 2;
  }
  auto config = redis_lock::ConnectionConfig::from_url(s.url);
  if (!config) return 2;
  // The holder label (what `redis-lock status election:NAME` shows): HOSTNAME:PID, printable.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  for (char* c = host; *c != '\0'; ++c) {
    if (*c < 0x21 || *c > 0x7e) *c = '?';
  }
  host[100] = '\0';
  asio::io_context io;
  asio::thread_pool job_thread(1);
  redis_lock::LockManager locks(
      io.get_executor(), *config,
      {.holder_label = std::string(host) + ":" + std::to_string(::getpid())});

  // SIGINT, SIGTERM or --for: stop campaigning, finish the period's job, resign.
  bool stopping = false;
  asio::cancellation_signal stop;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  asio::steady_timer deadline(io);
  const auto stop_now = [&] {
    if (std::exchange(stopping, true)) return;
    stop.emit(asio::cancellation_type::terminal);
    signals.cancel();
    deadline.cancel();
  };
  signals.async_wait([&](boost::system::error_code ec, int) {
    if (!ec) stop_now();
  });
  if (s.run_for > 0ms) {
    deadline.expires_after(s.run_for);
    deadline.async_wait([&](boost::system::error_code ec) {
      if (!ec) stop_now();
    });
  }
  std::printf("candidate %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  quiet = s.quiet;
  int status = 0;
  asio::co_spawn(io, run(s, *config, locks, job_thread, stop, stopping), [&](std::exception_ptr e) {
    if (e) status = 1;
    stop_now();
  });
  io.run();
  job_thread.join();
  return status;
}
