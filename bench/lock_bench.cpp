// SPDX-License-Identifier: MIT
// One program, every workload, one table — each figure beside raw hiredis baselines measured
// in the same run, against the same server, round by round:
//   (a) latency     one acquire+release at a time: p50/p99
//   (b) throughput  1, 8, 64, 256 acquire+release chains in flight on one LockManager, and
//                   this process's CPU per pair; the baselines keep as many independent
//                   chains in flight on one pipelined hiredis context (each new command goes
//                   out with the next write)
//       Baselines of (a) and (b): a raw client sending the library's own scripts with the
//       library's arguments (a fresh 128-bit token per acquisition), and a minimal fenced lock
//       (one script: SET NX PX and, if set, INCR of the fencing counter; one compare-and-delete
//       script). Each round measures all three back to back (the order alternates) and the
//       ratios are computed within the round; the table gives their median and range.
//   (c) hand-off    2..64 waiters (one LockManager each, as processes would have) want one
//                   resource; each holds it --hold-ms and may not ask again until someone else
//                   has had it: the gap from a release being issued to the next owner's
//                   acquire completing, and client commands per acquisition (SLOWLOG at
//                   threshold 0, script-internal entries left out, in a run of its own: the
//                   slow log slows scripts, so gaps are timed without it). Baseline, before and
//                   after: as many hiredis clients in as many threads pass a baton through one
//                   list with BLPOP/RPUSH, holding it as long (the floor of a notified
//                   hand-off); gap: RPUSH issued -> the next BLPOP returned.
//   (d) held     1k, 10k, 100k auto-renewed locks held by one manager: client CPU over a
//                renewal period (share of a core, per renewal; baseline: raw hiredis sending
//                the same extension script in batches of 1000), Redis commands per second,
//   (e)          heap and RSS per held lock, and (growth) acquire+release p50 while they
//                are held, next to p50 with none held.
//   (f) the server ceiling: each library's command shape driven from C, 256 pairs in flight.
//   --stages, alone: the per-stage account of one acquire + release and of a hand-off (two
//       managers, a thread each), beside the raw client and the BLPOP baton: every socket
//       call is timed (io_trace.hpp), Redis' INFO splits the server's part; rows add up to
//       the total. Also each script's own time and the commands it runs.
// Every baseline reply is checked for its exact value (an acquire granted with a fencing
// token, a release or extension returning 1, ...); any other reply stops the program. Keys
// carry a stem unique to the run (pid and random), so no earlier run's lease is met.
//
//   lock_bench --port P [--quick] [--hold-ms 1] [--json FILE]
//   lock_bench --port P --stages [--quick] [--hold-ms 1] [--busy-hold]
#include <redis_lock/redis_lock.hpp>

#include "acquire_op.hpp"
#include "io_trace.hpp"
#include "keys.hpp"
#include "raw_redis.hpp"
#include "redis_lock_scripts.hpp"
#include "stats.hpp"
#include "token.hpp"

#include <hiredis/hiredis.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>
#include <mutex>
#include <numeric>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// Allocations per pair: every malloc, calloc, realloc and aligned allocation of this process
// is counted by interposing glibc's allocator (operator new allocates through malloc, Asio's
// recycling allocator through aligned_alloc; hiredis calls malloc directly), so the library
// and the raw hiredis client are counted the same way. Sanitizer builds bring their own
// allocator: nothing is counted there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOCK_BENCH_NO_ALLOC_COUNT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LOCK_BENCH_NO_ALLOC_COUNT 1
#endif
#endif
#ifdef LOCK_BENCH_NO_ALLOC_COUNT
static constexpr bool counts_allocations = false;
static unsigned long long allocations() { return 0; }
#else
static constexpr bool counts_allocations = true;
static std::atomic<unsigned long long> allocation_count{0};
static unsigned long long allocations() { return allocation_count.load(std::memory_order_relaxed); }
// glibc's own entry points, which ours forward to.
extern "C" void* __libc_malloc(std::size_t) noexcept;
extern "C" void* __libc_calloc(std::size_t, std::size_t) noexcept;
extern "C" void* __libc_realloc(void*, std::size_t) noexcept;
extern "C" void* malloc(std::size_t n) noexcept {
  allocation_count.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
extern "C" void* calloc(std::size_t n, std::size_t size) noexcept {
  allocation_count.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
extern "C" void* realloc(void* p, std::size_t n) noexcept {
  allocation_count.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
extern "C" void* __libc_memalign(std::size_t, std::size_t) noexcept;
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t n) noexcept {
  allocation_count.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, n);
}
extern "C" int posix_memalign(void** p, std::size_t alignment, std::size_t n) noexcept {
  allocation_count.fetch_add(1, std::memory_order_relaxed);
  *p = __libc_memalign(alignment, n);
  return *p != nullptr ? 0 : ENOMEM;
}
#endif

namespace asio = boost::asio;
namespace detail = redis_lock::detail;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct Args {
  std::uint16_t port = 6379;
  bool quick = false;
  bool probe = false;         // only the raw baseline, for runs of other programs to be scaled by
  bool ceiling_only = false;  // only (f), the server ceiling by command shape
  bool handoff_only = false;  // only redis_lock's side of (c), the hand-off
  bool stages = false;        // only the per-stage account (of a pair and of a hand-off)
  bool busy_hold = false;     // --stages: holders spin through their hold instead of sleeping
  int hold_ms = 1;
  std::string json;
  std::string stem;  // "bench:<pid>-<random>:", unique to the run
};

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

using bench::median;
using bench::Spread;
using bench::spread;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "\nlock_bench: CHECK FAILED: %s\n", what.c_str());
  std::fflush(nullptr);
  std::_Exit(3);  // also from a hand-off thread, with the others still running
}

// ------------------------------------------------------------------------ checked replies

/// The exact reply a baseline command must get; anything else stops the benchmark.
enum class Expect {
  granted,   // acquire.lua: {1, fencing token > 0}
  one,       // integer 1: a release or extension that was ours, a DEL of our key, ...
  positive,  // integer > 0: the minimal fenced acquire's fencing counter
  ok,        // status OK: a SET that was done
  queued,    // acquire.lua: {0, pttl, place}: a waiter that joined the queue
};

const char* describe(Expect e) {
  switch (e) {
    case Expect::granted:
      return "{1, fencing token > 0}";
    case Expect::one:
      return "integer 1";
    case Expect::positive:
      return "integer > 0";
    case Expect::ok:
      return "OK";
    case Expect::queued:
      return "{0, pttl, place}";
  }
  return "?";
}

std::string describe(const redisReply* r) {
  if (r == nullptr) return "no reply (connection error)";
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      return "integer " + std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STATUS:
      return "status " + std::string(r->str, r->len);
    case REDIS_REPLY_ERROR:
      return "error " + std::string(r->str, r->len);
    case REDIS_REPLY_STRING:
      return "string \"" + std::string(r->str, r->len) + "\"";
    case REDIS_REPLY_ARRAY: {
      std::string s = "{";
      for (std::size_t i = 0; i < r->elements; ++i) s += (i ? ", " : "") + describe(r->element[i]);
      return s + "}";
    }
    default:
      return "reply type " + std::to_string(r->type);
  }
}

bool integer_is(const redisReply* r, long long v) {
  return r != nullptr && r->type == REDIS_REPLY_INTEGER && r->integer == v;
}

bool matches(const redisReply* r, Expect e) {
  switch (e) {
    case Expect::granted:
      return r->type == REDIS_REPLY_ARRAY && r->elements == 2 && integer_is(r->element[0], 1) &&
             r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer > 0;
    case Expect::one:
      return integer_is(r, 1);
    case Expect::positive:
      return r->type == REDIS_REPLY_INTEGER && r->integer > 0;
    case Expect::ok:
      return r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == "OK";
    case Expect::queued:
      return r->type == REDIS_REPLY_ARRAY && r->elements == 3 && integer_is(r->element[0], 0);
  }
  return false;
}

/// Reads the next reply on a blocking context (sending what is queued first) and checks it.
void check_next_reply(redisContext* c, Expect e, const char* what) {
  void* reply = nullptr;
  if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) {
    fail(std::string("baseline ") + what + ": connection error: " + c->errstr);
  }
  auto* r = static_cast<redisReply*>(reply);
  if (!matches(r, e)) {
    fail(std::string("baseline ") + what + ": expected " + describe(e) + ", got " + describe(r));
  }
  freeReplyObject(r);
}

void append_argv(redisContext* c, std::initializer_list<std::string_view> args) {
  std::array<const char*, 16> argv{};
  std::array<std::size_t, 16> lens{};
  std::size_t n = 0;
  for (const auto a : args) {
    argv[n] = a.data();
    lens[n++] = a.size();
  }
  redisAppendCommandArgv(c, static_cast<int>(n), argv.data(), lens.data());
}

// ------------------------------------------------------------------------ raw baselines

// The minimal fenced lock: a lease and a fencing counter, nothing else (no queue, no clock
// floor). Acquire: 2 keys, 2 arguments; returns the counter, 0 when held. Release: 1 key,
// 1 argument; 1 if the lease was ours.
constexpr const char* fenced_acquire_lua =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  return redis.call('INCR', KEYS[2])\nend\nreturn 0\n";
constexpr const char* compare_and_delete_lua =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "return redis.call('DEL', KEYS[1])\n";
// The minimal fenced lock with redis_lock's clock floor (never a token below the server's
// clock in microseconds, so tokens survive a lost counter): the least a lock with those
// tokens can send, the yardstick for redis_lock's own shape.
constexpr const char* floored_acquire_lua =
    "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n"
    "local f = redis.call('INCR', KEYS[2])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "if f < now then\n"
    "  f = now\n"
    "  redis.call('SET', KEYS[2], t[1] .. string.sub('00000' .. t[2], -6))\n"
    "end\n"
    "return f\n";
// npm redlock's acquire shape on one master.
constexpr const char* check_and_set_lua =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\nreturn 1\n";

/// The whole of file `path`; exits when it cannot be read.
std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A blocking hiredis context that sends lock commands of several shapes, pipelined, and
/// checks each reply, in order, against what its command must get.
class Raw {
 public:
  explicit Raw(std::uint16_t port) : c_(bench::connect_or_exit(port)) {
    for (const auto* s : {&detail::acquire_script, &detail::release_script}) {
      if (load(std::string(s->body)) != s->sha1) fail("SCRIPT LOAD of " + std::string(s->name));
    }
    fenced_acquire_ = load(fenced_acquire_lua);
    floored_acquire_ = load(floored_acquire_lua);
    compare_delete_ = load(compare_and_delete_lua);
    check_and_set_ = load(check_and_set_lua);
    noop_ = load("return 1");
    const std::string dir = REDIS_LOCK_OLD_SCRIPTS_DIR;
    before_fold_acquire_ = load(file_text(dir + "/acquire_89ab635.lua"));
    before_fold_release_ = load(file_text(dir + "/release_89ab635.lua"));
    // The same scripts as the library's functions (ManagerOptions::use_functions), and the
    // floored minimal lock as functions too: FCALL against FCALL.
    load_library(std::string(detail::function_library));
    load_library(std::string("#!lua name=lock_bench_floor\n") +  // (replaced: this text)
                 "redis.register_function('lock_bench_floored', function(KEYS, ARGV)\n" +
                 floored_acquire_lua + "end)\n" +
                 "redis.register_function('lock_bench_compare_delete', function(KEYS, ARGV)\n" +
                 compare_and_delete_lua + "end)\n");
  }
  ~Raw() { redisFree(c_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  // One acquire or release of each shape; `k` the resource's keys, `t` a fresh token.
  void acquire(const detail::ResourceKeys& k, const std::string& t) {
    acquire_as(k, t, acquire_how, Expect::granted);
  }
  void release(const detail::ResourceKeys& k, const std::string& t) {
    release_as(k, t, manager_id);
  }
  // The scripts of 89ab635, before issue 31 folded the holder's record into the lease
  // (tests/integration/old_scripts), with the same keys and arguments: the before of that
  // change, measured in the same rounds.
  void acquire_before_fold(const detail::ResourceKeys& k, const std::string& t) {
    acquire_as(k, t, acquire_how, Expect::granted, before_fold_acquire_, "acquire.lua of 89ab635");
  }
  void release_before_fold(const detail::ResourceKeys& k, const std::string& t) {
    release_as(k, t, manager_id, before_fold_release_, "release.lua of 89ab635");
  }
  void acquire_fcall(const detail::ResourceKeys& k, const std::string& t) {
    const auto w = words_of(acquire_how);
    send(Expect::granted, "acquire (FCALL)",
         {"FCALL", detail::acquire_script.function, "5", k.lease(), k.fence(), k.queue(),
          k.queue_expiry(), k.info(), t, "10000", w[0], w[1], w[2]});
  }
  void release_fcall(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::one, "release (FCALL)",
         {"FCALL", detail::release_script.function, "5", k.lease(), k.queue(), k.queue_expiry(),
          k.fence(), k.info(), t, manager_id, notify_prefix});
  }
  void floored_acquire_fcall(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::positive, "minimal fenced acquire with the clock floor (FCALL)",
         {"FCALL", "lock_bench_floored", "2", k.lease(), k.fence(), t, "10000"});
  }
  void compare_delete_fcall(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::one, "compare-and-delete (FCALL)",
         {"FCALL", "lock_bench_compare_delete", "1", k.lease(), t});
  }
  void fenced_acquire(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::positive, "minimal fenced acquire",
         {"EVALSHA", fenced_acquire_, "2", k.lease(), k.fence(), t, "10000"});
  }
  void floored_acquire(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::positive, "minimal fenced acquire with the clock floor",
         {"EVALSHA", floored_acquire_, "2", k.lease(), k.fence(), t, "10000"});
  }
  void compare_delete(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::one, "compare-and-delete", {"EVALSHA", compare_delete_, "1", k.lease(), t});
  }
  void check_and_set(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::one, "check-and-set", {"EVALSHA", check_and_set_, "1", k.lease(), t, "10000"});
  }
  void set_nx(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::ok, "SET NX PX", {"SET", k.lease(), t, "NX", "PX", "10000"});
  }
  void del(const detail::ResourceKeys& k, const std::string&) {
    send(Expect::one, "DEL", {"DEL", k.lease()});
  }
  // acquire.lua and release.lua as a waiting manager sends them: `how` is
  // '<mode><place ms> <member suffix>' (words_of), `suffix` release.lua's ARGV[2] (for the
  // per-stage account's hand-off); `sha` and `what` name another build's script, which takes
  // `how` as one word (its ARGV[3]).
  void acquire_as(const detail::ResourceKeys& k, const std::string& t, std::string_view how,
                  Expect e, std::string_view sha = detail::acquire_script.sha1,
                  const char* what = "acquire.lua") {
    if (sha != detail::acquire_script.sha1) {
      return send(e, what,
                  {"EVALSHA", sha, "5", k.lease(), k.fence(), k.queue(), k.queue_expiry(), k.info(),
                   t, "10000", how});
    }
    const auto w = words_of(how);
    send(e, what,
         {"EVALSHA", sha, "5", k.lease(), k.fence(), k.queue(), k.queue_expiry(), k.info(), t,
          "10000", w[0], w[1], w[2]});
  }
  /// acquire.lua's mode, place_ms and member_suffix (ARGV[3..5]) from a
  /// '<mode><place ms> <member suffix>'.
  static std::array<std::string_view, 3> words_of(std::string_view how) {
    const auto space = how.find(' ');
    return {how.substr(0, 1), how.substr(1, space - 1), how.substr(space + 1)};
  }
  void release_as(const detail::ResourceKeys& k, const std::string& t, std::string_view suffix,
                  std::string_view sha = detail::release_script.sha1,
                  const char* what = "release.lua") {
    send(Expect::one, what,
         {"EVALSHA", sha, "5", k.lease(), k.queue(), k.queue_expiry(), k.fence(), k.info(), t,
          suffix, notify_prefix});
  }
  void noop_acquire(const detail::ResourceKeys& k, const std::string& t) {
    const auto w = words_of(acquire_how);
    send(Expect::one, "no-op acquire",
         {"EVALSHA", noop_, "5", k.lease(), k.fence(), k.queue(), k.queue_expiry(), k.info(), t,
          "10000", w[0], w[1], w[2]});
  }
  void noop_release(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::one, "no-op release",
         {"EVALSHA", noop_, "5", k.lease(), k.queue(), k.queue_expiry(), k.fence(), k.info(), t,
          manager_id, notify_prefix});
  }
  // The same two calls declaring the lease key alone (what "fewer declared keys" could save
  // at most: the scripts would name the others from it, which a Cluster allows in one slot).
  void noop_acquire_one_key(const detail::ResourceKeys& k, const std::string& t) {
    const auto w = words_of(acquire_how);
    send(Expect::one, "no-op acquire, one key",
         {"EVALSHA", noop_, "1", k.lease(), t, "10000", w[0], w[1], w[2]});
  }
  void noop_release_one_key(const detail::ResourceKeys& k, const std::string& t) {
    send(Expect::one, "no-op release, one key",
         {"EVALSHA", noop_, "1", k.lease(), t, manager_id, notify_prefix});
  }

  /// Reads the reply to the oldest command not yet answered and checks it.
  void check_reply() {
    const auto [e, what] = expected_.front();
    expected_.pop_front();
    check_next_reply(c_, e, what);
  }
  redisContext* context() const noexcept { return c_; }

 private:
  // What a manager with id 0123456789abcdef and no holder label sends for a 10 s ttl
  // (acquire.lua's mode, place and member suffix, words_of: no queue, waiter place 1200 ms;
  // a holder's
  // release.lua ARGV[2] and ARGV[3]: its member suffix, the waiters' channel prefix).
  static constexpr const char acquire_how[] = "01200 0123456789abcdeff10000";
  static constexpr const char manager_id[] = "0123456789abcdef";
  static constexpr const char notify_prefix[] = "Plock:notify:";

  std::string load(const std::string& body) {
    const auto sha = bench::command(c_, {"SCRIPT", "LOAD", body});
    if (sha.size() != 40) fail("SCRIPT LOAD returned \"" + sha + "\"");
    return sha;
  }
  void load_library(const std::string& text) {
    // Ours is named for its text; the bench's own is replaced, never an older text measured.
    const bool ours = text.find("name=redis_lock_") != std::string::npos;
    const auto name = ours ? bench::command(c_, {"FUNCTION", "LOAD", text})
                           : bench::command(c_, {"FUNCTION", "LOAD", "REPLACE", text});
    if (name.find("redis_lock_") != 0 && name.find("lock_bench") != 0 &&
        name.find("already exists") == std::string::npos) {
      fail("FUNCTION LOAD returned \"" + name + "\"");
    }
  }
  void send(Expect e, const char* what, std::initializer_list<std::string_view> args) {
    append_argv(c_, args);
    expected_.emplace_back(e, what);
  }

  redisContext* c_;
  std::string fenced_acquire_, floored_acquire_, compare_delete_, check_and_set_, noop_;
  std::string before_fold_acquire_, before_fold_release_;
  std::deque<std::pair<Expect, const char*>> expected_;  // what each reply must be, and whose
};

/// A command shape: what one acquire + release sends.
struct Kind {
  const char* name;
  const char* sends;
  void (Raw::*acquire)(const detail::ResourceKeys&, const std::string&);
  void (Raw::*release)(const detail::ResourceKeys&, const std::string&);
};

const Kind own_scripts{"redis_lock",
                       "acquire.lua (EXISTS lease queue, TIME, SET fence GET, SET lease with "
                       "its record PX) + release.lua (GET, DEL; the queue only when the lease "
                       "says someone waits)",
                       &Raw::acquire, &Raw::release};
const Kind minimal_fenced{"minimal fenced lock",
                          "script (SET NX PX, INCR fence) + script (GET, DEL)",
                          &Raw::fenced_acquire, &Raw::compare_delete};

std::vector<detail::ResourceKeys> keys_for(const std::string& stem, int n) {
  std::vector<detail::ResourceKeys> keys;
  for (int i = 0; i < n; ++i) keys.push_back(detail::make_keys("lock:", stem + std::to_string(i)));
  return keys;
}

Percentiles raw_latency(const Args& a, const Kind& kind, int pairs) {
  Raw raw(a.port);
  const auto keys = keys_for(a.stem + "raw:seq:", 1);
  std::vector<double> us;
  for (int i = 0; i < pairs; ++i) {
    const auto t0 = Clock::now();
    const auto token = detail::random_token();
    (raw.*kind.acquire)(keys[0], token);
    raw.check_reply();
    (raw.*kind.release)(keys[0], token);
    raw.check_reply();
    us.push_back(micros(Clock::now() - t0));
  }
  return percentiles(us);
}

struct Pairs {
  long pairs = 0;
  double seconds = 0;
  double per_second() const { return static_cast<double>(pairs) / seconds; }
};

/// `in_flight` independent acquire->release chains on distinct keys for `seconds`, pipelined
/// on one context: a chain's release is sent once its acquire's reply is read, its next
/// acquire (a fresh token) once the release's reply is read. New commands go out together
/// with the next write, i.e. once the replies already received have been handled.
Pairs window_pairs(Raw& raw, const std::string& stem, const Kind& kind, int in_flight,
                   double seconds) {
  const auto keys = keys_for(stem, in_flight);
  std::vector<std::string> tokens(static_cast<std::size_t>(in_flight));
  std::deque<std::pair<int, bool>> sent;  // (chain, is acquire), in the order sent
  const auto start_pair = [&](int i) {
    tokens[i] = detail::random_token();
    (raw.*kind.acquire)(keys[i], tokens[i]);
    sent.emplace_back(i, true);
  };
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  for (int i = 0; i < in_flight; ++i) start_pair(i);
  while (!sent.empty()) {
    raw.check_reply();
    const auto [i, acquired] = sent.front();
    sent.pop_front();
    if (acquired) {
      (raw.*kind.release)(keys[i], tokens[i]);
      sent.emplace_back(i, false);
    } else {
      ++pairs;
      if (Clock::now() < until) start_pair(i);
    }
  }
  return {pairs, std::chrono::duration<double>(Clock::now() - start).count()};
}

Pairs raw_throughput(const Args& a, const Kind& kind, int in_flight, double seconds) {
  Raw raw(a.port);
  return window_pairs(raw, a.stem + "raw:tp:", kind, in_flight, seconds);
}

// ------------------------------------------------------------------------ server ceiling

/// What one acquire + release costs the server, for each library's command shape: driven
/// from C with 256 chains in flight so that the client is not the limit. Pairs per second,
/// and the server's own CPU per pair (INFO cpu); each round measures every shape, and the
/// ratios to redis_lock's shape are taken within the round.
struct Shape {
  std::string name;   // whose shape
  std::string sends;  // what one pair sends
  double pairs_per_s = 0;
  double server_us_per_pair = 0;
  Spread cpu_vs_lib;  // server CPU per pair / redis_lock's, per round
};

double server_cpu_seconds(redisContext* c) {
  const auto info = bench::command(c, {"INFO", "cpu"});
  double total = 0;
  for (const char* field : {"used_cpu_sys:", "used_cpu_user:"}) {
    const auto at = info.find(field);
    if (at != std::string::npos) total += std::atof(info.c_str() + at + std::strlen(field));
  }
  return total;
}

std::vector<Shape> server_ceiling(const Args& a, int rounds, double seconds) {
  constexpr int in_flight = 256;
  Raw raw(a.port);
  const std::vector<Kind> kinds = {
      own_scripts,
      {"redis_lock, FCALL (use_functions)",
       "the same scripts as the functions of one library: first.lua's and shared.lua's "
       "functions defined once per load, not once per call",
       &Raw::acquire_fcall, &Raw::release_fcall},
      {"minimal fenced lock + clock floor, FCALL",
       "the floored minimal lock's two scripts as functions", &Raw::floored_acquire_fcall,
       &Raw::compare_delete_fcall},
      {"redis_lock as of 89ab635",
       "the same calls to the scripts before issue 31: the record a key of its own (SET, DEL), "
       "every shared function defined before the common path",
       &Raw::acquire_before_fold, &Raw::release_before_fold},
      minimal_fenced,
      {"minimal fenced lock + clock floor",
       "script (SET NX PX, INCR fence, TIME, SET fence) + script (GET, DEL)", &Raw::floored_acquire,
       &Raw::compare_delete},
      {"npm redlock (one master)", "script (EXISTS, SET PX) + script (GET, DEL)",
       &Raw::check_and_set, &Raw::compare_delete},
      {"redis-semaphore Mutex, redis-py Lock", "SET NX PX + script (GET, DEL)", &Raw::set_nx,
       &Raw::compare_delete},
      {"redis_lock's call overhead alone",
       "its two script calls with their keys and arguments, scripts that only return 1",
       &Raw::noop_acquire, &Raw::noop_release},
      {"the same, declaring one key per call",
       "its two script calls, the lease key alone, scripts that only return 1",
       &Raw::noop_acquire_one_key, &Raw::noop_release_one_key},
      {"floor: no ownership check", "SET NX PX + DEL (not a safe lock)", &Raw::set_nx, &Raw::del},
  };
  std::vector<std::vector<double>> tput(kinds.size()), cpu(kinds.size()), ratio(kinds.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> us(kinds.size());
    for (std::size_t n = 0; n < kinds.size(); ++n) {
      const std::size_t s = r % 2 ? kinds.size() - 1 - n : n;  // alternate the order
      const double cpu0 = server_cpu_seconds(raw.context());
      const auto run = window_pairs(raw, a.stem + "ceiling:", kinds[s], in_flight, seconds);
      us[s] = (server_cpu_seconds(raw.context()) - cpu0) * 1e6 / static_cast<double>(run.pairs);
      tput[s].push_back(run.per_second());
      cpu[s].push_back(us[s]);
    }
    for (std::size_t s = 0; s < kinds.size(); ++s) ratio[s].push_back(us[s] / us[0]);
  }
  std::vector<Shape> out;
  for (std::size_t s = 0; s < kinds.size(); ++s) {
    out.push_back(
        {kinds[s].name, kinds[s].sends, median(tput[s]), median(cpu[s]), spread(ratio[s])});
  }
  return out;
}

// ------------------------------------------------------------------------ redis_lock

redis_lock::ConnectionConfig config(const Args& a) {
  redis_lock::ConnectionConfig cfg;
  cfg.port = a.port;
  return cfg;
}

/// The library's results are checked as strictly as the baselines': granted with a fencing
/// token, released as ours.
void check_acquired(boost::system::error_code ec, const redis_lock::LockGuard& g) {
  if (ec || !g || g.fencing_token() == 0) fail("redis_lock acquire: " + ec.message());
}

void check_released(boost::system::error_code ec, bool released) {
  if (ec || !released) fail("redis_lock release: " + (ec ? ec.message() : "not ours"));
}

Percentiles lib_latency(const Args& a, int pairs) {
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  const std::string name = a.stem + "lib:seq";
  std::vector<double> us;
  int left = pairs;
  Clock::time_point t0;
  std::function<void()> next = [&] {
    t0 = Clock::now();
    locks.async_acquire(name, {.ttl = 10s},
                        [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                          check_acquired(ec, g);
                          g.async_release([&](boost::system::error_code ec2, bool released) {
                            check_released(ec2, released);
                            us.push_back(micros(Clock::now() - t0));
                            if (--left > 0) next();
                          });
                        });
  };
  next();
  io.run();
  return percentiles(us);
}

Pairs lib_throughput(const Args& a, int in_flight, double seconds) {
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  long pairs = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<std::string> names;
  for (int i = 0; i < in_flight; ++i) names.push_back(a.stem + "lib:tp:" + std::to_string(i));
  std::function<void(int)> chain = [&](int slot) {
    locks.async_acquire(names[slot], {.ttl = 10s},
                        [&, slot](boost::system::error_code ec, redis_lock::LockGuard g) {
                          check_acquired(ec, g);
                          g.async_release([&, slot](boost::system::error_code ec2, bool released) {
                            check_released(ec2, released);
                            ++pairs;
                            if (Clock::now() < until) chain(slot);
                          });
                        });
  };
  for (int i = 0; i < in_flight; ++i) chain(i);
  io.run();
  return {pairs, std::chrono::duration<double>(Clock::now() - start).count()};
}

/// Client commands since the last SLOWLOG RESET at threshold 0, without script internals
/// (Redis 7 logs them as client "?:0") and without this program's SLOWLOG/CONFIG calls.
long client_commands(redisContext* c) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "SLOWLOG GET -1"));
  long n = 0;
  for (std::size_t i = 0; r != nullptr && r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 5) continue;
    const redisReply* argv = e->element[3];
    const std::string addr(e->element[4]->str ? e->element[4]->str : "", e->element[4]->len);
    if (addr == "?:0" || argv->type != REDIS_REPLY_ARRAY || argv->elements == 0) continue;
    std::string name(argv->element[0]->str, argv->element[0]->len);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    if (name != "slowlog" && name != "config") ++n;
  }
  if (r != nullptr) freeReplyObject(r);
  return n;
}

struct Handoff {
  int waiters = 0, acquisitions = 0;
  Percentiles gap;
  double commands_per_acquisition = 0;  // after the first round (every manager set up)
  long first_round_commands = 0;        // the first round's, set-up included
  int held_longer = 0;  // raw only: passes that waited past the hold for the others to block
};

/// `count`: a run that counts commands (SLOWLOG at threshold 0, which also logs every
/// command a script runs and so slows scripts down); the gaps are measured in a run without.
Handoff lib_handoff(const Args& a, int waiters, int handoffs, bool count) {
  redisContext* admin = bench::connect_or_exit(a.port);
  if (count) {
    bench::command(admin, {"CONFIG", "SET", "slowlog-max-len", "10000000"});
    bench::command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "0"});
    bench::command(admin, {"SLOWLOG", "RESET"});
  }

  asio::io_context io(1);
  std::vector<std::unique_ptr<redis_lock::LockManager>> managers;
  for (int i = 0; i < waiters; ++i) {
    managers.push_back(std::make_unique<redis_lock::LockManager>(io.get_executor(), config(a)));
  }
  const std::string resource = a.stem + "handoff:" + std::to_string(waiters);
  std::vector<double> gaps;
  int acquisitions = 0, last_owner = -1;
  // Commands are counted from the end of the first round: by then every manager has made
  // its connections, loaded the scripts and subscribed (once per manager, not per
  // acquisition); those are counted apart.
  long first_round_commands = -1;
  Clock::time_point released_at{};
  std::vector<bool> parked(static_cast<std::size_t>(waiters), false);
  std::function<void(int)> want;
  const auto unpark_others = [&](int owner) {
    for (int i = 0; i < waiters; ++i) {
      if (i != owner && parked[i]) {
        parked[i] = false;
        want(i);
      }
    }
  };
  want = [&](int i) {
    managers[i]->async_acquire(
        resource, {.ttl = 10s, .wait = 60s},
        [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
          check_acquired(ec, g);
          if (last_owner >= 0) gaps.push_back(micros(Clock::now() - released_at));
          last_owner = i;
          if (++acquisitions == waiters && count) {
            first_round_commands = client_commands(admin);
            bench::command(admin, {"SLOWLOG", "RESET"});
          }
          unpark_others(i);
          auto guard = std::make_shared<redis_lock::LockGuard>(std::move(g));
          auto hold =
              std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(a.hold_ms));
          hold->async_wait([&, i, guard, hold](boost::system::error_code) {
            released_at = Clock::now();
            guard->async_release([&, i, guard](boost::system::error_code ec2, bool released) {
              check_released(ec2, released);
              if (acquisitions >= handoffs) return;
              parked[i] = true;  // may ask again once someone else has had it
              if (last_owner != i) unpark_others(last_owner);
            });
          });
        });
  };
  for (int i = 0; i < waiters; ++i) want(i);
  io.run();
  Handoff h;
  h.waiters = waiters;
  h.acquisitions = acquisitions;
  h.gap = percentiles(gaps);
  if (count) {
    bench::command(admin, {"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
    h.commands_per_acquisition =
        static_cast<double>(client_commands(admin)) / std::max(1, acquisitions - waiters);
    h.first_round_commands = first_round_commands;
    bench::command(admin, {"CONFIG", "SET", "slowlog-max-len", "128"});
    bench::command(admin, {"SLOWLOG", "RESET"});
  }
  redisFree(admin);
  return h;
}

long info_field(redisContext* c, const char* section, const std::string& field) {
  const auto info = bench::command(c, {"INFO", section});
  const auto at = info.find(field + ":");
  return at == std::string::npos ? -1 : std::atol(info.c_str() + at + field.size() + 1);
}

/// The raw notified hand-off: `waiters` hiredis clients in as many threads pass a baton
/// through one list with BLPOP/RPUSH, each holding it --hold-ms, so that every pass goes to
/// a client already blocked in BLPOP (the server hands the element straight to it). Gap:
/// RPUSH issued -> the next BLPOP returned. The baton is "<pass>:<sender>": a pass must arrive
/// in order and at another client. `passes`, if given, gets when each pass was pushed and
/// taken, and by which thread (the clients are io_trace threads 1..waiters).
/// Holds the lock --hold-ms: asleep, or with --busy-hold working (spinning) through it, as a
/// holder that computes does: its thread is awake when it releases.
void hold(const Args& a) {
  const auto until = Clock::now() + std::chrono::milliseconds(a.hold_ms);
  if (!a.busy_hold) return std::this_thread::sleep_until(until);
  while (Clock::now() < until) {
  }
}

struct Passes {
  std::vector<Clock::time_point> pushed, got;
  std::vector<int> from, to;  // io_trace thread numbers
};

Handoff raw_handoff(const Args& a, int waiters, int handoffs, Passes* passes = nullptr) {
  if (passes != nullptr) {
    const auto n = static_cast<std::size_t>(handoffs);
    passes->pushed.assign(n, {}), passes->got.assign(n, {});
    passes->from.assign(n, 0), passes->to.assign(n, 0);
  }
  const std::string list = a.stem + "baton:" + std::to_string(waiters);
  std::atomic<Clock::rep> pushed_at{0};
  std::atomic<int> held_longer{0}, last_pass{-1};
  std::vector<std::vector<double>> gaps(static_cast<std::size_t>(waiters));
  std::vector<std::thread> threads;
  for (int i = 0; i < waiters; ++i) {
    threads.emplace_back([&, i] {
      bench::io_trace::set_thread(i + 1);
      redisContext* c = bench::connect_or_exit(a.port);
      for (;;) {
        auto* r =
            static_cast<redisReply*>(redisCommand(c, "BLPOP %b 30", list.data(), list.size()));
        const auto got = Clock::now();
        if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_STRING ||
            std::string_view(r->element[0]->str, r->element[0]->len) != list) {
          fail("BLPOP: expected {list, baton}, got " + describe(r));
        }
        const std::string baton(r->element[1]->str, r->element[1]->len);
        freeReplyObject(r);
        if (baton == "stop") break;
        const int pass = std::atoi(baton.c_str());
        const int from = std::atoi(baton.c_str() + baton.find(':') + 1);
        if (pass != last_pass + 1)
          fail("BLPOP: pass " + baton + " after pass " + std::to_string(last_pass));
        last_pass = pass;
        if (from == i) fail("BLPOP: the baton came back to its sender (" + baton + ")");
        if (pass > 0)
          gaps[i].push_back(micros(got - Clock::time_point(Clock::duration(pushed_at.load()))));
        if (passes != nullptr && pass < handoffs) {
          passes->pushed[pass] = Clock::time_point(Clock::duration(pushed_at.load()));
          passes->got[pass] = got;
          passes->from[pass] = from + 1;
          passes->to[pass] = i + 1;
        }
        hold(a);
        if (pass + 1 >= handoffs) {  // the last pass: everyone else stops
          std::vector<const char*> argv = {"RPUSH", list.c_str()};
          for (int w = 1; w < waiters; ++w) argv.push_back("stop");
          auto* s = static_cast<redisReply*>(
              redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), nullptr));
          if (!integer_is(s, waiters - 1)) fail("RPUSH stop: got " + describe(s));
          freeReplyObject(s);
          break;
        }
        // Every pass goes to a client already blocked: on a loaded machine the previous holder
        // may not be back in BLPOP yet after the hold; then hold on until it is.
        for (bool waited = false; info_field(c, "clients", "blocked_clients") < waiters - 1;) {
          if (!waited) ++held_longer, waited = true;
          std::this_thread::sleep_for(100us);
        }
        const std::string next = std::to_string(pass + 1) + ":" + std::to_string(i);
        pushed_at = Clock::now().time_since_epoch().count();
        append_argv(c, {"RPUSH", list, next});
        check_next_reply(c, Expect::one, "RPUSH of the baton");
      }
      redisFree(c);
    });
  }
  redisContext* admin = bench::connect_or_exit(a.port);
  while (info_field(admin, "clients", "blocked_clients") < waiters)
    std::this_thread::sleep_for(1ms);
  bench::command(admin, {"RPUSH", list, "0:-1"});
  for (auto& t : threads) t.join();
  redisFree(admin);
  std::vector<double> all;
  for (const auto& g : gaps) all.insert(all.end(), g.begin(), g.end());
  Handoff h;
  h.waiters = waiters;
  h.acquisitions = handoffs;
  h.gap = percentiles(all);
  h.commands_per_acquisition = 2;  // BLPOP + RPUSH
  h.held_longer = held_longer;
  return h;
}

// ------------------------------------------------------------------------ held locks

long rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

/// Script calls the server ran: EVALSHA, and FCALL of the library (use_functions).
long evalsha_calls(redisContext* c) {
  const auto info = bench::command(c, {"INFO", "commandstats"});
  long n = 0;
  for (const std::string_view name : {"cmdstat_evalsha:calls=", "cmdstat_fcall:calls="}) {
    const auto at = info.find(name);
    if (at != std::string::npos) n += std::atol(info.c_str() + at + name.size());
  }
  return n;
}

/// CPU of a raw client renewing `n` leases once: the same extension script, pipelined in
/// batches of 1000 (the leases are set up first, outside the measurement). Every reply is
/// checked: the SETs OK, each extension 1 (the lease was ours), each DEL 1.
double raw_renewal_cpu_us(const Args& a, int n) {
  redisContext* c = bench::connect_or_exit(a.port);
  if (bench::command(c, {"SCRIPT", "LOAD", std::string(detail::extend_script.body)}) !=
      detail::extend_script.sha1) {
    fail("SCRIPT LOAD of extend.lua");
  }
  const auto keys = keys_for(a.stem + "raw:held:" + std::to_string(n) + ":", n);
  std::vector<std::string> tokens;
  for (int i = 0; i < n; ++i) {
    tokens.push_back(detail::random_token());
    append_argv(c, {"SET", keys[i].lease(), tokens.back(), "PX", "60000"});
  }
  for (int i = 0; i < n; ++i) check_next_reply(c, Expect::ok, "SET (renewal setup)");
  const std::string_view sha = detail::extend_script.sha1;
  const double t0 = cpu_seconds();
  for (int from = 0; from < n; from += 1000) {
    const int to = std::min(n, from + 1000);
    for (int i = from; i < to; ++i)
      append_argv(c, {"EVALSHA", sha, "1", keys[i].lease(), tokens[i], "30000"});
    for (int i = from; i < to; ++i) check_next_reply(c, Expect::one, "extend.lua");
  }
  const double us = (cpu_seconds() - t0) * 1e6 / n;
  for (int i = 0; i < n; ++i) append_argv(c, {"DEL", keys[i].lease()});
  for (int i = 0; i < n; ++i) check_next_reply(c, Expect::one, "DEL (renewal cleanup)");
  redisFree(c);
  return us;
}

struct Held {
  int locks = 0;
  double cpu_share = 0, cpu_us_per_renewal = 0, raw_cpu_us_per_renewal = 0;
  double commands_per_s = 0, heap_bytes_per_lock = 0, rss_bytes_per_lock = 0;
  double latency_p50_us = 0, latency_p50_none_us = 0;
  long renewals = 0, lost = 0;
};

Held held_locks(const Args& a, int n) {
  const auto ttl = a.quick ? 3s : 30s;
  const auto window = a.quick ? 2100ms : 10500ms;  // a little over one renewal period
  Held h;
  h.locks = n;
  h.raw_cpu_us_per_renewal = raw_renewal_cpu_us(a, n);
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  const auto p50_now = [&] {
    // Uncontended acquire+release pairs on another resource while the held ones renew.
    std::vector<double> us;
    std::function<void()> next = [&] {
      if (us.size() >= 500) return;
      const auto t0 = Clock::now();
      locks.async_acquire(a.stem + "held:probe", {.ttl = 10s},
                          [&, t0](boost::system::error_code ec, redis_lock::LockGuard g) {
                            check_acquired(ec, g);
                            g.async_release([&, t0](boost::system::error_code ec2, bool released) {
                              check_released(ec2, released);
                              us.push_back(micros(Clock::now() - t0));
                              next();
                            });
                          });
    };
    next();
    while (us.size() < 500) io.run_one();
    return percentiles(us).p50;
  };
  h.latency_p50_none_us = p50_now();

  const auto heap0 = mallinfo2().uordblks;
  const auto rss0 = rss_bytes();
  std::vector<redis_lock::LockGuard> held;
  held.reserve(static_cast<std::size_t>(n));
  const std::string prefix = a.stem + "held:" + std::to_string(n) + ":";
  int pending = 0, started = 0;
  std::function<void()> more = [&] {
    while (pending < 256 && started < n) {  // bounded in flight, like a real service
      ++pending;
      locks.async_acquire(prefix + std::to_string(started++), {.ttl = ttl, .auto_renew = true},
                          [&](boost::system::error_code ec, redis_lock::LockGuard g) {
                            check_acquired(ec, g);
                            held.push_back(std::move(g));
                            --pending;
                            more();
                          });
    }
  };
  more();
  while (static_cast<int>(held.size()) < n) io.run_one();
  h.heap_bytes_per_lock = static_cast<double>(mallinfo2().uordblks - heap0) / n;
  h.rss_bytes_per_lock = static_cast<double>(rss_bytes() - rss0) / n;

  redisContext* admin = bench::connect_or_exit(a.port);
  const long calls0 = evalsha_calls(admin);
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  io.run_for(window);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const long calls = evalsha_calls(admin) - calls0 - 1;  // INFO itself is not an EVALSHA
  redisFree(admin);
  h.renewals = std::max(calls, 1L);
  h.cpu_share = cpu / wall;
  h.cpu_us_per_renewal = cpu * 1e6 / static_cast<double>(h.renewals);
  h.commands_per_s = static_cast<double>(calls) / wall;
  for (const auto& g : held) h.lost += g.lost();
  h.latency_p50_us = p50_now();
  held.clear();  // the destructors post the releases
  io.run();
  return h;
}

/// One workload measured round by round: redis_lock and its two baselines back to back in
/// each round (the order alternates), ratios taken within the round.
struct Compared {
  std::vector<double> raw, fenced, lib;   // per round
  std::vector<double> vs_raw, vs_fenced;  // lib / baseline, per round
  void add(double r, double f, double l) {
    raw.push_back(r), fenced.push_back(f), lib.push_back(l);
    vs_raw.push_back(l / r), vs_fenced.push_back(l / f);
  }
};

template <class Measure>
void round_of_three(int round, Compared& c, const Measure& measure) {
  // measure(0) the raw scripts, measure(1) the minimal fenced lock, measure(2) redis_lock
  double v[3];
  for (int n = 0; n < 3; ++n) {
    const int which = round % 2 ? 2 - n : n;
    v[which] = measure(which);
  }
  c.add(v[0], v[1], v[2]);
}

std::string json_spread(const Spread& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f}", s.median, s.min,
                s.max);
  return buf;
}

std::string ratio_text(const Spread& s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2fx (%.2f-%.2f)", s.median, s.min, s.max);
  return buf;
}

// ------------------------------------------------------------------------ per-stage account

namespace trace = bench::io_trace;

/// Redis' own account, read between blocks on a connection of its own: CPU (user + sys) and
/// the scripts' time (EVALSHA's calls and microseconds in INFO commandstats, which include
/// the commands a script runs).
struct ServerSample {
  double cpu_s = 0;
  long evalsha_calls = 0;
  double evalsha_us = 0;
  long other_calls = 0;  // every other command, but INFO: with only scripts sent, the
                         // commands they ran (a count that does not drift with the machine)
};

ServerSample server_sample(redisContext* c) {
  ServerSample s;
  s.cpu_s = server_cpu_seconds(c);
  const auto stats = bench::command(c, {"INFO", "commandstats"});
  constexpr std::string_view stem = "cmdstat_";
  for (std::size_t at = stats.find(stem); at != std::string::npos; at = stats.find(stem, at + 1)) {
    const auto colon = stats.find(':', at);
    const std::string_view name(stats.data() + at + stem.size(), colon - at - stem.size());
    const char* p = stats.c_str() + colon + std::strlen(":calls=");
    // A script call is an EVALSHA, or an FCALL of the library (use_functions); the
    // handshake's FCALL_RO probe is neither a lock call nor a command inside one.
    if (name == "evalsha" || name == "fcall") {
      s.evalsha_calls += std::atol(p);
      const char* u = std::strstr(p, "usec=");
      if (u != nullptr) s.evalsha_us += std::atof(u + 5);
    } else if (name != "info" && name != "fcall_ro") {
      s.other_calls += std::atol(p);
    }
  }
  return s;
}

/// One request and its reply as the client saw them: issued; its bytes written (the write
/// call returned); the reply's bytes read (the read call returned); its completion handler
/// (for the raw client: the reply parsed and checked).
struct Exchange {
  Clock::time_point issued, written, read, done;
};

/// The first event at or after index `from` that `pred` accepts; ev.size() if none.
template <class Pred>
std::size_t find_event(const std::vector<trace::Event>& ev, std::size_t from, const Pred& pred) {
  while (from < ev.size() && !pred(ev[from])) ++from;
  return from;
}

/// The first event at or after `t`.
std::size_t event_at(const std::vector<trace::Event>& ev, Clock::time_point t) {
  return static_cast<std::size_t>(
      std::lower_bound(ev.begin(), ev.end(), t,
                       [](const trace::Event& e, Clock::time_point x) { return e.at < x; }) -
      ev.begin());
}

bool starts_with(const trace::Event& e, std::string_view prefix) {
  return static_cast<std::size_t>(e.bytes) >= prefix.size() &&
         std::string_view(e.head, std::min(sizeof e.head, prefix.size())) ==
             prefix.substr(0, sizeof e.head);
}

/// Fills x.written and x.read from the events of `thread`: the first write at or after
/// x.issued, then the first read on that descriptor (by the same thread) after it, before
/// x.done. False if there is none (the exchange is left out).
bool locate(const std::vector<trace::Event>& ev, int thread, Exchange& x) {
  const std::size_t w = find_event(ev, event_at(ev, x.issued), [&](const trace::Event& e) {
    return e.write && e.thread == thread;
  });
  if (w == ev.size() || ev[w].at > x.done) return false;
  const std::size_t r = find_event(ev, w + 1, [&](const trace::Event& e) {
    return !e.write && e.thread == thread && e.fd == ev[w].fd;
  });
  if (r == ev.size() || ev[r].at > x.done) return false;
  x.written = ev[w].at;
  x.read = ev[r].at;
  return true;
}

/// Rows that add up to a total: the mean of each stage over the measured operations.
struct Rows {
  std::vector<std::string> names;
  std::vector<double> sum;  // microseconds, over `count` operations
  std::vector<double> totals;
  std::vector<std::vector<double>> values;  // [stage][operation]
  long count = 0;
  void add(const std::vector<double>& stages) {
    if (sum.empty()) sum.assign(stages.size(), 0), values.resize(stages.size());
    double total = 0;
    for (std::size_t i = 0; i < stages.size(); ++i) {
      sum[i] += stages[i], total += stages[i];
      values[i].push_back(stages[i]);
    }
    totals.push_back(total);
    ++count;
  }
  double mean(std::size_t i) const { return count ? sum[i] / static_cast<double>(count) : 0; }
  double p50(std::size_t i) const { return count ? percentiles(values[i]).p50 : 0; }
};

/// The rows of the operations (each a list of stage durations) whose total is within the 99th
/// percentile: the same cut for every side, so that one preempted operation does not own a
/// mean. `what` names them if none could be followed through the trace.
Rows within_p99(const std::vector<std::vector<double>>& stages, const char* what) {
  std::vector<double> totals;
  for (const auto& st : stages) totals.push_back(std::accumulate(st.begin(), st.end(), 0.0));
  if (totals.empty()) fail(std::string(what) + ": none could be followed through the trace");
  const double cut = percentiles(totals).p99;
  Rows rows;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (totals[i] <= cut) rows.add(stages[i]);
  }
  return rows;
}

/// Ends the trace; a trace that lost events (its buffer was too small) would bias the account.
std::vector<trace::Event> stop_tracing() {
  auto ev = trace::stop();
  if (trace::dropped() != 0) fail("the socket trace's buffer was too small");
  return ev;
}

/// The stages of each pair that `ev` shows (the write and read of both exchanges, by thread 0).
std::vector<std::vector<double>> pair_stages(const std::vector<trace::Event>& ev,
                                             std::vector<Exchange> acq, std::vector<Exchange> rel) {
  std::vector<std::vector<double>> stages;
  for (std::size_t i = 0; i < acq.size(); ++i) {
    Exchange& a = acq[i];
    Exchange& r = rel[i];
    if (!locate(ev, 0, a) || !locate(ev, 0, r)) continue;
    stages.push_back({micros(a.written - a.issued), micros(a.read - a.written),
                      micros(a.done - a.read), micros(r.issued - a.done),
                      micros(r.written - r.issued), micros(r.read - r.written),
                      micros(r.done - r.read)});
  }
  return stages;
}

struct PairSide {
  Rows rows;
  double server_cpu_us = 0;  // Redis' CPU per pair
  double scripts_us = 0;     // of it, running the two scripts
  double evalsha_per_pair = 0;
  double inner_per_pair = 0;  // commands the scripts ran
};

PairSide pair_side(const std::vector<trace::Event>& ev, std::vector<Exchange> acq,
                   std::vector<Exchange> rel, const ServerSample& s0, const ServerSample& s1,
                   int pairs) {
  PairSide side;
  side.rows = within_p99(pair_stages(ev, std::move(acq), std::move(rel)), "pairs");
  side.server_cpu_us = (s1.cpu_s - s0.cpu_s) * 1e6 / pairs;
  side.scripts_us = (s1.evalsha_us - s0.evalsha_us) / pairs;
  side.evalsha_per_pair = static_cast<double>(s1.evalsha_calls - s0.evalsha_calls) / pairs;
  side.inner_per_pair = static_cast<double>(s1.other_calls - s0.other_calls) / pairs;
  return side;
}

/// `pairs` acquire+release pairs of the raw client with our scripts, one at a time, traced.
PairSide raw_pairs_traced(const Args& a, redisContext* admin, int pairs) {
  Raw raw(a.port);
  const auto keys = keys_for(a.stem + "stages:raw:", 1);
  std::vector<Exchange> acq(static_cast<std::size_t>(pairs)), rel(acq.size());
  const auto s0 = server_sample(admin);
  trace::start(8 * acq.size() + 1024);
  for (std::size_t i = 0; i < acq.size(); ++i) {
    const auto token = detail::random_token();
    acq[i].issued = Clock::now();
    raw.acquire(keys[0], token);
    raw.check_reply();
    acq[i].done = rel[i].issued = Clock::now();
    raw.release(keys[0], token);
    raw.check_reply();
    rel[i].done = Clock::now();
  }
  const auto ev = stop_tracing();
  return pair_side(ev, std::move(acq), std::move(rel), s0, server_sample(admin), pairs);
}

/// The same through a LockManager (after 200 pairs of warm-up: its connection and scripts).
PairSide lib_pairs_traced(const Args& a, redisContext* admin, int pairs) {
  asio::io_context io(1);
  redis_lock::LockManager locks(io.get_executor(), config(a));
  const std::string name = a.stem + "stages:lib";
  constexpr int warm = 200;
  std::vector<Exchange> acq(static_cast<std::size_t>(pairs)), rel(acq.size());
  ServerSample s0;
  int n = -warm;
  std::function<void()> next = [&] {
    if (n == 0) {
      s0 = server_sample(admin);
      trace::start(8 * acq.size() + 1024);
    }
    const auto i = static_cast<std::size_t>(std::max(n, 0));
    acq[i].issued = Clock::now();
    locks.async_acquire(name, {.ttl = 10s},
                        [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
                          acq[i].done = Clock::now();
                          check_acquired(ec, g);
                          rel[i].issued = Clock::now();
                          g.async_release([&, i](boost::system::error_code ec2, bool released) {
                            rel[i].done = Clock::now();
                            check_released(ec2, released);
                            if (++n < pairs) next();
                          });
                        });
  };
  next();
  io.run();
  const auto ev = stop_tracing();
  return pair_side(ev, std::move(acq), std::move(rel), s0, server_sample(admin), pairs);
}

/// What each script costs Redis on its own, by the commandstats of blocks of `n` calls of one
/// kind (pipelined 100 at a time): an uncontended acquire and release, a waiter joining the
/// queue, a release that hands the lease on (its PUBLISH reaches no subscriber here), the
/// waiter's claim. Microseconds per call.
struct ScriptCost {
  double us = 0;        // Redis' time per call
  double commands = 0;  // commands run per call
};
struct ScriptCosts {
  ScriptCost acquire, release, join, handing_release, claim;
  ScriptCost unsigned_release;  // handing on to a waiter without a secret ('f'), same round
};

ScriptCosts script_costs(const Args& a, redisContext* admin, int n) {
  Raw raw(a.port);
  const auto keys =
      keys_for(a.stem + "stages:costs:" + detail::random_token().substr(0, 6) + ":", n);
  std::vector<std::string> holders, waiters;
  for (int i = 0; i < n; ++i) holders.push_back(detail::random_token());
  for (int i = 0; i < n; ++i) waiters.push_back(detail::random_token());
  constexpr std::string_view holder_how = "11200 0123456789abcdeff10000";
  // A waiter of today's build: its secret after the 'g', so the release that hands it the
  // lease signs its message (two redis.sha1hex).
  constexpr std::string_view waiter_how =
      "11200 fedcba9876543210g00112233445566778899aabbccddeeff10000";
  // The claim as a waiter sends it after an unsigned hand-off message ('2': the lease read
  // first).
  constexpr std::string_view claim_how =
      "21200 fedcba9876543210g00112233445566778899aabbccddeeff10000";
  const auto block = [&](const auto& send) {
    const auto s0 = server_sample(admin);
    for (int i = 0; i < n; i += 100) {
      const int end = std::min(n, i + 100);
      for (int j = i; j < end; ++j) send(static_cast<std::size_t>(j));
      for (int j = i; j < end; ++j) raw.check_reply();
    }
    const auto s1 = server_sample(admin);
    if (s1.evalsha_calls - s0.evalsha_calls != n) fail("script_costs: EVALSHA count");
    return ScriptCost{(s1.evalsha_us - s0.evalsha_us) / n,
                      static_cast<double>(s1.other_calls - s0.other_calls) / n};
  };
  ScriptCosts c;
  c.acquire = block(
      [&](std::size_t i) { raw.acquire_as(keys[i], holders[i], holder_how, Expect::granted); });
  c.join = block(
      [&](std::size_t i) { raw.acquire_as(keys[i], waiters[i], waiter_how, Expect::queued); });
  c.handing_release =
      block([&](std::size_t i) { raw.release_as(keys[i], holders[i], "0123456789abcdef"); });
  c.claim = block(
      [&](std::size_t i) { raw.acquire_as(keys[i], waiters[i], claim_how, Expect::granted); });
  c.release =
      block([&](std::size_t i) { raw.release_as(keys[i], waiters[i], "fedcba9876543210"); });
  // The same handing release to a waiter of the build before (no secret: no signature), on
  // fresh keys, in the same round: what signing costs.
  const auto other_keys =
      keys_for(a.stem + "stages:costs:" + detail::random_token().substr(0, 6) + ":", n);
  constexpr std::string_view unsigned_how = "11200 fedcba9876543210f10000";
  block([&](std::size_t i) {
    raw.acquire_as(other_keys[i], holders[i], holder_how, Expect::granted);
  });
  block([&](std::size_t i) {
    raw.acquire_as(other_keys[i], waiters[i], unsigned_how, Expect::queued);
  });
  c.unsigned_release =
      block([&](std::size_t i) { raw.release_as(other_keys[i], holders[i], "0123456789abcdef"); });
  block([&](std::size_t i) { raw.release_as(other_keys[i], waiters[i], "fedcba9876543210"); });
  return c;
}

/// The hand-off, stage by stage. A holder's release issued -> its bytes written -> the
/// message read by the waiter's subscriber connection -> the waiter's claim written -> the
/// claim's reply read -> the waiter's acquire completes. For the raw BLPOP baton: RPUSH
/// issued -> written -> the BLPOP reply read by the other client -> BLPOP returned.
struct HandoffSide {
  Rows rows;
  double server_cpu_us = 0;  // Redis' CPU per hand-off (every command of the cycle)
  double commands = 0;       // commands sent per hand-off (the client's, not INFO)
  double inner = 0;          // commands the scripts ran per hand-off
  int one_hop = 0;           // hand-offs granted on their signed message, no claim
  int followed = 0;          // hand-offs followed through the trace
};

/// Two managers, each on an io_context and a thread of its own (as two processes), pass one
/// lock back and forth, each holding it --hold-ms: every acquisition after the first is a
/// hand-off through the queue.
HandoffSide lib_handoff_traced(const Args& a, redisContext* admin, int handoffs) {
  struct Worker {
    asio::io_context io{1};
    std::unique_ptr<redis_lock::LockManager> locks;
    std::thread thread;
  };
  struct Grant {
    Clock::time_point released, granted;
    int holder = 0, waiter = 0;  // io_trace thread numbers
  };
  std::array<Worker, 2> w;
  for (auto& x : w)
    x.locks = std::make_unique<redis_lock::LockManager>(x.io.get_executor(), config(a));
  const std::string resource = a.stem + "stages:handoff";
  constexpr int warm = 50;
  std::atomic<int> acquisitions{0};
  std::atomic<Clock::rep> released_at{0};
  std::atomic<int> last_holder{0};
  std::mutex m;
  std::vector<Grant> grants;
  ServerSample s0;
  std::function<void(int)> want = [&](int i) {
    w[i].locks->async_acquire(
        resource, {.ttl = 10s, .wait = 60s},
        [&, i](boost::system::error_code ec, redis_lock::LockGuard g) {
          const auto granted = Clock::now();
          check_acquired(ec, g);
          const int n = acquisitions.fetch_add(1) + 1;
          if (n == warm) {
            s0 = server_sample(admin);
            trace::start(64 * static_cast<std::size_t>(handoffs) + 4096);
          } else if (n > warm && n <= warm + handoffs) {
            const std::lock_guard lock(m);
            grants.push_back({Clock::time_point(Clock::duration(released_at.load())), granted,
                              last_holder.load(), i + 1});
          }
          auto guard = std::make_shared<redis_lock::LockGuard>(std::move(g));
          const auto release = [&, i, n, guard] {
            last_holder = i + 1;
            released_at = Clock::now().time_since_epoch().count();
            guard->async_release([&, i, n, guard](boost::system::error_code ec2, bool released) {
              check_released(ec2, released);
              if (n < warm + handoffs) want(i);
            });
          };
          if (a.busy_hold) {
            hold(a);
            return release();
          }
          auto timer =
              std::make_shared<asio::steady_timer>(w[i].io, std::chrono::milliseconds(a.hold_ms));
          timer->async_wait([release, timer](boost::system::error_code) { release(); });
        });
  };
  for (int i = 0; i < 2; ++i) {
    w[i].thread = std::thread([&, i] {
      trace::set_thread(i + 1);
      want(i);
      w[i].io.run();
    });
  }
  for (auto& x : w) x.thread.join();
  const auto ev = stop_tracing();
  const auto s1 = server_sample(admin);
  for (auto& x : w) {
    x.locks.reset();
    x.io.restart();
    x.io.run();
  }
  HandoffSide side;
  const double n = std::max<double>(1, static_cast<double>(grants.size()));
  side.server_cpu_us = (s1.cpu_s - s0.cpu_s) * 1e6 / n;
  side.commands = static_cast<double>(s1.evalsha_calls - s0.evalsha_calls) / n;
  side.inner = static_cast<double>(s1.other_calls - s0.other_calls) / n;
  std::vector<std::vector<double>> stages;
  for (const auto& g : grants) {
    if (g.holder == g.waiter || g.released >= g.granted) continue;
    const std::size_t rw = find_event(ev, event_at(ev, g.released), [&](const trace::Event& e) {
      return e.write && e.thread == g.holder;
    });
    const std::size_t msg = find_event(ev, rw + 1, [&](const trace::Event& e) {
      return !e.write && e.thread == g.waiter && starts_with(e, "*3\r\n$7\r\nmessage");
    });
    if (msg >= ev.size() || ev[msg].at > g.granted) continue;
    // A signed message grants on arrival (the one-hop hand-off): nothing is written between
    // it and the grant. Otherwise the waiter claims: its claim's write and reply.
    const std::size_t cw = find_event(
        ev, msg + 1, [&](const trace::Event& e) { return e.write && e.thread == g.waiter; });
    if (cw >= ev.size() || ev[cw].at > g.granted) {
      stages.push_back({micros(ev[rw].at - g.released), micros(ev[msg].at - ev[rw].at), 0.0, 0.0,
                        micros(g.granted - ev[msg].at)});
      ++side.one_hop;
      continue;
    }
    const std::size_t cr = find_event(ev, cw + 1, [&](const trace::Event& e) {
      return !e.write && e.thread == g.waiter && e.fd == ev[cw].fd;
    });
    if (cr >= ev.size() || ev[cr].at > g.granted) continue;
    stages.push_back({micros(ev[rw].at - g.released), micros(ev[msg].at - ev[rw].at),
                      micros(ev[cw].at - ev[msg].at), micros(ev[cr].at - ev[cw].at),
                      micros(g.granted - ev[cr].at)});
  }
  side.followed = static_cast<int>(stages.size());
  side.rows = within_p99(stages, "hand-offs");
  return side;
}

/// The raw BLPOP baton between two clients in two threads, traced the same way.
HandoffSide raw_handoff_traced(const Args& a, redisContext* admin, int handoffs) {
  Passes passes;
  const auto s0 = server_sample(admin);
  trace::start(64 * static_cast<std::size_t>(handoffs) + 4096);
  raw_handoff(a, 2, handoffs, &passes);
  const auto ev = stop_tracing();
  const auto s1 = server_sample(admin);
  HandoffSide side;
  side.server_cpu_us = (s1.cpu_s - s0.cpu_s) * 1e6 / (handoffs - 1);
  side.commands = static_cast<double>(s1.other_calls - s0.other_calls) / (handoffs - 1);
  std::vector<std::vector<double>> stages;
  for (int p = 1; p < handoffs; ++p) {
    const auto from = passes.from[p], to = passes.to[p];
    const std::size_t pw =
        find_event(ev, event_at(ev, passes.pushed[p]), [&](const trace::Event& e) {
          return e.write && e.thread == from && starts_with(e, "*3\r\n$5\r\nRPUSH");
        });
    const std::size_t br = find_event(ev, pw + 1, [&](const trace::Event& e) {
      return !e.write && e.thread == to && starts_with(e, "*2\r\n");
    });
    if (br >= ev.size() || ev[br].at > passes.got[p]) continue;
    stages.push_back({micros(ev[pw].at - passes.pushed[p]), micros(ev[br].at - ev[pw].at),
                      micros(passes.got[p] - ev[br].at)});
  }
  side.rows = within_p99(stages, "BLPOP passes");
  return side;
}

/// Adds up rounds: the mean of each row's per-round means.
struct RoundMeans {
  std::vector<std::vector<double>> rows;  // [row][round]
  std::vector<std::vector<double>> p50s;  // [row][round]: each row's median, for reference
  std::vector<double> p50;                // the total's, per round
  void add(const Rows& r) {
    if (rows.empty()) rows.resize(r.sum.size()), p50s.resize(r.sum.size());
    for (std::size_t i = 0; i < r.sum.size(); ++i) {
      rows[i].push_back(r.mean(i));
      p50s[i].push_back(r.p50(i));
    }
    p50.push_back(percentiles(r.totals).p50);
  }
  double row(std::size_t i) const {
    return std::accumulate(rows[i].begin(), rows[i].end(), 0.0) /
           static_cast<double>(rows[i].size());
  }
  double total() const {
    double t = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) t += row(i);
    return t;
  }
  /// "mean (p50)" of row i.
  std::string cell(std::size_t i) const {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f (%.1f)", row(i), median(p50s[i]));
    return buf;
  }
};

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

/// Medians over rounds of what the server did per pair or per call.
struct ServerShare {
  std::vector<double> scripts_us, cpu_us, evalsha, inner;
};

int stage_account(const Args& a) {
  if (!trace::available()) {
    std::fprintf(stderr,
                 "lock_bench --stages: this build cannot trace its socket calls "
                 "(a sanitizer build); use the release preset\n");
    return 2;
  }
  const int rounds = a.quick ? 3 : 5;
  const int pairs = a.quick ? 2000 : 5000;
  const int handoffs = a.quick ? 200 : 500;
  redisContext* admin = bench::connect_or_exit(a.port);

  // The uncontended pair, raw and redis_lock back to back in each round (order alternating).
  RoundMeans raw_pair, lib_pair;
  ServerShare raw_server, lib_server;
  std::vector<double> pair_ratio;
  std::vector<ScriptCosts> costs;
  for (int r = 0; r < rounds; ++r) {
    PairSide raw, lib;
    if (r % 2) {
      lib = lib_pairs_traced(a, admin, pairs), raw = raw_pairs_traced(a, admin, pairs);
    } else {
      raw = raw_pairs_traced(a, admin, pairs), lib = lib_pairs_traced(a, admin, pairs);
    }
    for (auto [side, m, sv] :
         {std::tuple{&raw, &raw_pair, &raw_server}, std::tuple{&lib, &lib_pair, &lib_server}}) {
      m->add(side->rows);
      sv->scripts_us.push_back(side->scripts_us);
      sv->cpu_us.push_back(side->server_cpu_us);
      sv->evalsha.push_back(side->evalsha_per_pair);
      sv->inner.push_back(side->inner_per_pair);
    }
    pair_ratio.push_back(lib_pair.p50.back() / raw_pair.p50.back());
    costs.push_back(script_costs(a, admin, 2000));
  }
  const char* pair_names[] = {
      "acquire: issued -> request written (client)",
      "acquire: written -> reply read (server, kernel)",
      "acquire: reply read -> handler (client)",
      "handler -> release issued (the caller)",
      "release: issued -> request written (client)",
      "release: written -> reply read (server, kernel)",
      "release: reply read -> handler (client)",
  };
  std::printf(
      "\n(1) One acquire + release at a time: %d rounds of %d pairs, raw client and\n"
      "redis_lock back to back; mean us per pair of the pairs within p99 (p50 in brackets),\n"
      "mean over rounds. The rows add up to the total.\n\n",
      rounds, pairs);
  std::printf(
      "| stage | raw client, our scripts | redis_lock | difference |\n|---|---:|---:|---:|\n");
  for (std::size_t i = 0; i < std::size(pair_names); ++i) {
    std::printf("| %s | %s | %s | %+.1f |\n", pair_names[i], raw_pair.cell(i).c_str(),
                lib_pair.cell(i).c_str(), lib_pair.row(i) - raw_pair.row(i));
  }
  std::printf("| **total** | **%.1f** | **%.1f** | %+.1f |\n", raw_pair.total(), lib_pair.total(),
              lib_pair.total() - raw_pair.total());
  // The two "written -> reply read" rows, split by Redis' own account.
  const auto split = [](const RoundMeans& m, const ServerShare& sv) {
    const double wire = m.row(1) + m.row(5), scripts = mean_of(sv.scripts_us),
                 cpu = mean_of(sv.cpu_us);
    return std::array<double, 3>{scripts, cpu - scripts, wire - cpu};
  };
  const auto rs = split(raw_pair, raw_server), ls = split(lib_pair, lib_server);
  const char* split_names[] = {
      "of the two written -> read: Redis running the scripts (INFO commandstats)",
      "of them: Redis outside the scripts (INFO cpu less the scripts)",
      "of them: the rest (loopback, the kernel, waking each side)",
  };
  for (std::size_t i = 0; i < 3; ++i) {
    std::printf("| %s | %.1f | %.1f | %+.1f |\n", split_names[i], rs[i], ls[i], ls[i] - rs[i]);
  }
  std::printf(
      "| total p50, median over rounds (ratio: median and range of the rounds') | %.1f | "
      "%.1f | %s |\n",
      median(raw_pair.p50), median(lib_pair.p50), ratio_text(spread(pair_ratio)).c_str());
  std::printf(
      "| commands sent / run inside the scripts, per pair | %.2f / %.2f | %.2f / %.2f | |\n",
      mean_of(raw_server.evalsha), mean_of(raw_server.inner), mean_of(lib_server.evalsha),
      mean_of(lib_server.inner));

  const auto cost = [&](ScriptCost ScriptCosts::*which) {
    std::vector<double> us, n;
    for (const auto& c : costs) us.push_back((c.*which).us), n.push_back((c.*which).commands);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f us, %.0f commands", median(us), median(n));
    return std::string(buf);
  };
  std::printf(
      "\nRedis' time per script call (INFO commandstats around blocks of 2000 calls of one\n"
      "kind, median of %d) and the commands each runs:\n"
      "  acquire.lua, uncontended        %s\n"
      "  release.lua, nobody waiting     %s\n"
      "  acquire.lua joining the queue   %s\n"
      "  release.lua handing on, signing %s\n"
      "  the same, to a waiter of the build before (unsigned) %s\n"
      "  acquire.lua claiming the lease  %s\n",
      rounds, cost(&ScriptCosts::acquire).c_str(), cost(&ScriptCosts::release).c_str(),
      cost(&ScriptCosts::join).c_str(), cost(&ScriptCosts::handing_release).c_str(),
      cost(&ScriptCosts::unsigned_release).c_str(), cost(&ScriptCosts::claim).c_str());

  // The hand-off, a thread per manager; the BLPOP baton between two threads.
  // Three sides per round, in a rotating order: the BLPOP baton, today's hand-off (a signed
  // message grants: one hop) and the claimed one (every message a nudge, the claim's reply
  // grants: the build before), so that the machine's drift falls on each alike.
  struct LibSide {
    RoundMeans h;
    std::vector<double> ratio, cpu, cmds, inner;
    int one_hop = 0, followed = 0;
  };
  RoundMeans raw_h;
  std::vector<double> raw_cpu, raw_cmds;
  std::array<LibSide, 2> lib;  // [0] signed (one hop), [1] claimed
  for (int r = 0; r < rounds; ++r) {
    HandoffSide raw;
    std::array<HandoffSide, 2> got;
    for (int k = 0; k < 3; ++k) {
      switch ((r + k) % 3) {
        case 0:
          raw = raw_handoff_traced(a, admin, handoffs);
          break;
        case 1:
          redis_lock::detail::sign_hand_offs = true;
          got[0] = lib_handoff_traced(a, admin, handoffs);
          break;
        default:
          redis_lock::detail::sign_hand_offs = false;
          got[1] = lib_handoff_traced(a, admin, handoffs);
          redis_lock::detail::sign_hand_offs = true;
          break;
      }
    }
    raw_h.add(raw.rows);
    raw_cpu.push_back(raw.server_cpu_us), raw_cmds.push_back(raw.commands);
    for (std::size_t k = 0; k < 2; ++k) {
      auto& side = lib[k];
      side.h.add(got[k].rows);
      side.cpu.push_back(got[k].server_cpu_us), side.cmds.push_back(got[k].commands);
      side.inner.push_back(got[k].inner);
      side.one_hop += got[k].one_hop, side.followed += got[k].followed;
      side.ratio.push_back(side.h.p50.back() / raw_h.p50.back());
    }
  }
  std::printf(
      "\n(2) A hand-off between two managers, each on an io_context and a thread of its own\n"
      "(as two processes), and a BLPOP baton between two hiredis clients in two threads:\n"
      "%d rounds of %d hand-offs, hold %d ms %s; mean us of those within p99 (p50), mean\n"
      "over rounds. The rows add up to the gap. redis_lock signed: today's hand-off (the\n"
      "release's signed message grants); claimed: every message a nudge and the claim's reply\n"
      "grants (the build before), in the same rounds.\n\n",
      rounds, handoffs, a.hold_ms, a.busy_hold ? "working (--busy-hold)" : "asleep");
  std::printf(
      "| stage | raw BLPOP baton | redis_lock, signed | redis_lock, claimed |\n"
      "|---|---:|---:|---:|\n");
  std::printf("| release (RPUSH) issued -> written, by the holder | %s | %s | %s |\n",
              raw_h.cell(0).c_str(), lib[0].h.cell(0).c_str(), lib[1].h.cell(0).c_str());
  std::printf("| written -> the waiter reads the message (the BLPOP reply) | %s | %s | %s |\n",
              raw_h.cell(1).c_str(), lib[0].h.cell(1).c_str(), lib[1].h.cell(1).c_str());
  std::printf("| message read -> claim written, by the waiter | | %s | %s |\n",
              lib[0].h.cell(2).c_str(), lib[1].h.cell(2).c_str());
  std::printf("| claim written -> its reply read (server, kernel) | | %s | %s |\n",
              lib[0].h.cell(3).c_str(), lib[1].h.cell(3).c_str());
  std::printf(
      "| the signed message (the claim's reply) read -> the acquire completes (BLPOP returns) "
      "| %s | %s | %s |\n",
      raw_h.cell(2).c_str(), lib[0].h.cell(4).c_str(), lib[1].h.cell(4).c_str());
  std::printf("| **gap** | **%.1f** | **%.1f** | **%.1f** |\n", raw_h.total(), lib[0].h.total(),
              lib[1].h.total());
  std::printf(
      "| gap p50, median over rounds (ratio to the baton: median and range of the rounds') | "
      "%.1f | %.1f (%s) | %.1f (%s) |\n",
      median(raw_h.p50), median(lib[0].h.p50), ratio_text(spread(lib[0].ratio)).c_str(),
      median(lib[1].h.p50), ratio_text(spread(lib[1].ratio)).c_str());
  std::printf("| Redis' CPU per hand-off, the whole cycle (us) | %.1f | %.1f | %.1f |\n",
              median(raw_cpu), median(lib[0].cpu), median(lib[1].cpu));
  std::printf(
      "| commands sent / run inside the scripts, per hand-off | %.2f / 0 | %.2f / %.2f | %.2f / "
      "%.2f |\n",
      median(raw_cmds), median(lib[0].cmds), median(lib[0].inner), median(lib[1].cmds),
      median(lib[1].inner));
  std::printf(
      "| hand-offs granted on their signed message, of those followed | | %d of %d | %d of "
      "%d |\n",
      lib[0].one_hop, lib[0].followed, lib[1].one_hop, lib[1].followed);
  redisFree(admin);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--quick") {
      a.quick = true;
    } else if (k == "--probe") {
      a.probe = true;
    } else if (k == "--ceiling") {
      a.ceiling_only = true;
    } else if (k == "--handoff") {
      a.handoff_only = true;
    } else if (k == "--stages") {
      a.stages = true;
    } else if (k == "--busy-hold") {
      a.busy_hold = true;
    } else if (k == "--port") {
      a.port = static_cast<std::uint16_t>(std::atoi(v)), ++i;
    } else if (k == "--hold-ms") {
      a.hold_ms = std::atoi(v), ++i;
    } else if (k == "--json") {
      a.json = v, ++i;
    } else {
      std::fprintf(stderr,
                   "usage: lock_bench --port P [--quick] [--hold-ms 1] [--json FILE]\n"
                   "       lock_bench --port P --probe   (raw baseline only, as JSON)\n"
                   "       lock_bench --port P --ceiling [--quick]   (only (f))\n"
                   "       lock_bench --port P --handoff [--quick]   (only redis_lock in (c))\n"
                   "       lock_bench --port P --stages [--quick] [--busy-hold]   (the per-stage "
                   "account)\n");
      return 2;
    }
  }
  a.stem = "bench:" + std::to_string(getpid()) + "-" + detail::random_token().substr(0, 8) + ":";
  if (a.probe) {
    // The loopback round trip of a VM drifts for minutes at a time: programs measured one
    // after the other are compared through the raw baseline measured right before them.
    const auto lat = raw_latency(a, own_scripts, 2000);
    const auto tp = raw_throughput(a, own_scripts, 64, 1.0).per_second();
    std::printf("{\"raw_p50_us\":%.3f,\"raw_p99_us\":%.3f,\"raw_pairs_per_s_64\":%.1f}\n", lat.p50,
                lat.p99, tp);
    return 0;
  }
  if (a.stages) return stage_account(a);
  const int ceiling_rounds = a.quick ? 3 : 5;
  const double ceiling_seconds = a.quick ? 0.3 : 1.0;
  if (a.ceiling_only) {
    for (const auto& c : server_ceiling(a, ceiling_rounds, ceiling_seconds)) {
      std::printf("%-40s %10.0f pairs/s %8.2f server us/pair %s   %s\n", c.name.c_str(),
                  c.pairs_per_s, c.server_us_per_pair, ratio_text(c.cpu_vs_lib).c_str(),
                  c.sends.c_str());
    }
    return 0;
  }
  const int rounds = a.quick ? 3 : 5;
  const int pairs = a.quick ? 2000 : 10000;
  const double seconds = a.quick ? 0.5 : 1.5;
  const int handoffs = a.quick ? 200 : 1000;
  if (a.handoff_only) {
    for (int w : {2, 8, 16, 64}) {
      auto h = lib_handoff(a, w, handoffs, /*count=*/false);
      h.commands_per_acquisition =
          lib_handoff(a, w, handoffs / 2, /*count=*/true).commands_per_acquisition;
      std::printf("%2d waiters: gap p50 %8.1f us, p99 %8.1f us, %.2f commands per acquisition\n", w,
                  h.gap.p50, h.gap.p99, h.commands_per_acquisition);
    }
    return 0;
  }

  // (a) and (b): rounds of raw scripts, minimal fenced lock and redis_lock back to back.
  Compared p50, p99;
  for (int r = 0; r < rounds; ++r) {
    Percentiles runs[3];
    round_of_three(r, p50, [&](int which) {
      runs[which] = which == 2 ? lib_latency(a, pairs)
                               : raw_latency(a, which == 0 ? own_scripts : minimal_fenced, pairs);
      return runs[which].p50;
    });
    p99.add(runs[0].p99, runs[1].p99, runs[2].p99);
  }
  struct Tp {
    int in_flight;
    Compared c, cpu, allocs;  // pairs/s; this process's CPU per pair, us; allocations per pair
  };
  std::vector<Tp> tps;
  for (int n : {1, 8, 64, 256}) {
    Tp t{n, {}, {}, {}};
    for (int r = 0; r < rounds; ++r) {
      double cpu_us[3], allocs[3];
      round_of_three(r, t.c, [&](int which) {
        const double cpu0 = cpu_seconds();
        const auto allocs0 = allocations();
        const Pairs run =
            which == 2 ? lib_throughput(a, n, seconds)
                       : raw_throughput(a, which == 0 ? own_scripts : minimal_fenced, n, seconds);
        cpu_us[which] = (cpu_seconds() - cpu0) * 1e6 / static_cast<double>(run.pairs);
        allocs[which] =
            static_cast<double>(allocations() - allocs0) / static_cast<double>(run.pairs);
        return run.per_second();
      });
      t.cpu.add(cpu_us[0], cpu_us[1], cpu_us[2]);
      if (counts_allocations) t.allocs.add(allocs[0], allocs[1], allocs[2]);
    }
    tps.push_back(std::move(t));
  }
  const auto ceiling = server_ceiling(a, ceiling_rounds, ceiling_seconds);
  // (c): the raw BLPOP hand-off before and after the library's, for each number of waiters.
  struct HandoffRun {
    Handoff before, lib, after;
    Spread vs_raw() const {
      return spread({lib.gap.p50 / before.gap.p50, lib.gap.p50 / after.gap.p50});
    }
  };
  std::vector<HandoffRun> handoff_runs;
  for (int w : {2, 4, 8, 16, 32, 64}) {
    HandoffRun h;
    h.before = raw_handoff(a, w, handoffs);
    h.lib = lib_handoff(a, w, handoffs, /*count=*/false);
    h.after = raw_handoff(a, w, handoffs);
    h.lib.commands_per_acquisition =
        lib_handoff(a, w, handoffs / 2, /*count=*/true).commands_per_acquisition;
    handoff_runs.push_back(h);
  }
  std::vector<Held> held_runs;
  for (int n : {1'000, 10'000, 100'000}) held_runs.push_back(held_locks(a, n));

  std::printf(
      "redis_lock %s vs raw hiredis baselines (same server, same run; %d rounds; ratios\n"
      "are medians of per-round ratios, (range); values are medians across rounds)\n\n",
      REDIS_LOCK_VERSION_STRING, rounds);
  std::printf("%-40s %10s %10s %10s  %-20s %-20s\n", "workload", "raw", "min.fenced", "redis_lock",
              "vs raw", "vs min.fenced");
  const auto row = [](const char* label, const Compared& c, const char* fmt) {
    char r[32], f[32], l[32];
    std::snprintf(r, sizeof r, fmt, median(c.raw));
    std::snprintf(f, sizeof f, fmt, median(c.fenced));
    std::snprintf(l, sizeof l, fmt, median(c.lib));
    std::printf("%-40s %10s %10s %10s  %-20s %-20s\n", label, r, f, l,
                ratio_text(spread(c.vs_raw)).c_str(), ratio_text(spread(c.vs_fenced)).c_str());
  };
  row("(a) latency p50, us per acquire+release", p50, "%.1f");
  row("(a) latency p99, us", p99, "%.1f");
  for (const auto& t : tps) {
    char label[64];
    std::snprintf(label, sizeof label, "(b) throughput, pairs/s, %d in flight", t.in_flight);
    row(label, t.c, "%.0f");
    row("    client CPU us per pair", t.cpu, "%.2f");
    if (counts_allocations) row("    allocations per pair", t.allocs, "%.1f");
  }
  std::printf("\n(f) the server ceiling by command shape (256 in flight, driven from C)\n");
  std::printf("%-40s %12s %20s  %s\n", "shape", "pairs/s", "server CPU us/pair", "vs redis_lock");
  for (const auto& c : ceiling) {
    std::printf("%-40s %12.0f %20.2f  %s\n", c.name.c_str(), c.pairs_per_s, c.server_us_per_pair,
                ratio_text(c.cpu_vs_lib).c_str());
  }
  std::printf("\n%-40s %10s %10s %10s  %-20s\n", "(c) hand-off, BLPOP baseline before/after",
              "before", "redis_lock", "after", "vs BLPOP");
  for (const auto& h : handoff_runs) {
    char label[64];
    std::snprintf(label, sizeof label, "(c) gap p50, us, %d waiters", h.lib.waiters);
    std::printf("%-40s %10.1f %10.1f %10.1f  %-20s\n", label, h.before.gap.p50, h.lib.gap.p50,
                h.after.gap.p50, ratio_text(h.vs_raw()).c_str());
    std::printf("%-40s %10.1f %10.1f %10.1f\n", "    gap p99, us", h.before.gap.p99, h.lib.gap.p99,
                h.after.gap.p99);
    std::printf("%-40s %10s %10.2f\n", "    client commands per acquisition", "2",
                h.lib.commands_per_acquisition);
    if (h.before.held_longer + h.after.held_longer > 0) {
      std::printf("    BLPOP passes held past the hold until the others were blocked: %d, %d\n",
                  h.before.held_longer, h.after.held_longer);
    }
  }
  for (const auto& h : held_runs) {
    char label[64];
    std::snprintf(label, sizeof label, "(d) %d held: CPU us per renewal", h.locks);
    std::printf("%-40s %10.2f %10s %10.2f  %.2fx\n", label, h.raw_cpu_us_per_renewal, "",
                h.cpu_us_per_renewal, h.cpu_us_per_renewal / h.raw_cpu_us_per_renewal);
    std::printf("%-40s %32.2f%%\n", "    share of one core", h.cpu_share * 100);
    std::printf("%-40s %32.0f\n", "    Redis commands per second", h.commands_per_s);
    std::printf("%-40s %32.0f\n", "(e) heap bytes per held lock", h.heap_bytes_per_lock);
    std::printf("%-40s %32.0f\n", "    RSS bytes per held lock", h.rss_bytes_per_lock);
    std::printf("%-40s %21.1f -> %.1f\n", "    latency p50 none held -> held, us",
                h.latency_p50_none_us, h.latency_p50_us);
    if (h.lost) std::printf("    LOST LEASES: %ld\n", h.lost);
  }

  if (!a.json.empty()) {
    FILE* f = std::fopen(a.json.c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f,
                 "{\"library\":\"redis_lock\",\"version\":\"%s\",\"runtime\":\"C++ (Asio)\","
                 "\"rounds\":%d,\"hold_ms\":%d,",
                 REDIS_LOCK_VERSION_STRING, rounds, a.hold_ms);
    std::fprintf(f,
                 "\"latency\":{\"pairs\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
                 "\"raw_p50_us\":%.3f,\"raw_p99_us\":%.3f,\"fenced_p50_us\":%.3f,"
                 "\"fenced_p99_us\":%.3f,\"p50_vs_raw\":%s,\"p50_vs_fenced\":%s,"
                 "\"p99_vs_raw\":%s},",
                 pairs, median(p50.lib), median(p99.lib), median(p50.raw), median(p99.raw),
                 median(p50.fenced), median(p99.fenced), json_spread(spread(p50.vs_raw)).c_str(),
                 json_spread(spread(p50.vs_fenced)).c_str(),
                 json_spread(spread(p99.vs_raw)).c_str());
    std::fprintf(f, "\"throughput\":[");
    for (std::size_t i = 0; i < tps.size(); ++i) {
      const auto& c = tps[i].c;
      std::fprintf(f,
                   "%s{\"in_flight\":%d,\"pairs_per_s\":%.1f,\"raw_pairs_per_s\":%.1f,"
                   "\"fenced_pairs_per_s\":%.1f,\"vs_raw\":%s,\"vs_fenced\":%s,"
                   "\"client_cpu_us\":%.3f,\"raw_client_cpu_us\":%.3f,"
                   "\"fenced_client_cpu_us\":%.3f,\"client_cpu_vs_raw\":%s,"
                   "\"allocations_per_pair\":%.2f,\"raw_allocations_per_pair\":%.2f}",
                   i ? "," : "", tps[i].in_flight, median(c.lib), median(c.raw), median(c.fenced),
                   json_spread(spread(c.vs_raw)).c_str(), json_spread(spread(c.vs_fenced)).c_str(),
                   median(tps[i].cpu.lib), median(tps[i].cpu.raw), median(tps[i].cpu.fenced),
                   json_spread(spread(tps[i].cpu.vs_raw)).c_str(),
                   counts_allocations ? median(tps[i].allocs.lib) : -1.0,
                   counts_allocations ? median(tps[i].allocs.raw) : -1.0);
    }
    std::fprintf(f, "],\"server_ceiling\":[");
    for (std::size_t i = 0; i < ceiling.size(); ++i) {
      const auto& c = ceiling[i];
      std::fprintf(f,
                   "%s{\"shape\":\"%s\",\"sends\":\"%s\",\"in_flight\":256,"
                   "\"pairs_per_s\":%.1f,\"server_us_per_pair\":%.3f,\"cpu_vs_redis_lock\":%s}",
                   i ? "," : "", c.name.c_str(), c.sends.c_str(), c.pairs_per_s,
                   c.server_us_per_pair, json_spread(c.cpu_vs_lib).c_str());
    }
    std::fprintf(f, "],\"handoff\":[");
    for (std::size_t i = 0; i < handoff_runs.size(); ++i) {
      const auto& h = handoff_runs[i];
      std::fprintf(f,
                   "%s{\"waiters\":%d,\"handoffs\":%d,\"gap_p50_us\":%.3f,\"gap_p99_us\":%.3f,"
                   "\"commands_per_acquisition\":%.3f,\"blpop_before_p50_us\":%.3f,"
                   "\"blpop_after_p50_us\":%.3f,\"blpop_before_p99_us\":%.3f,"
                   "\"blpop_after_p99_us\":%.3f,\"vs_blpop\":%s}",
                   i ? "," : "", h.lib.waiters, h.lib.acquisitions, h.lib.gap.p50, h.lib.gap.p99,
                   h.lib.commands_per_acquisition, h.before.gap.p50, h.after.gap.p50,
                   h.before.gap.p99, h.after.gap.p99, json_spread(h.vs_raw()).c_str());
    }
    std::fprintf(f, "],\"held\":[");
    for (std::size_t i = 0; i < held_runs.size(); ++i) {
      const auto& h = held_runs[i];
      std::fprintf(f,
                   "%s{\"locks\":%d,\"cpu_share\":%.5f,\"cpu_us_per_renewal\":%.3f,"
                   "\"raw_cpu_us_per_renewal\":%.3f,\"commands_per_s\":%.1f,"
                   "\"heap_bytes_per_lock\":%.1f,\"rss_bytes_per_lock\":%.1f,"
                   "\"latency_p50_us\":%.3f,\"latency_p50_none_us\":%.3f,\"lost\":%ld}",
                   i ? "," : "", h.locks, h.cpu_share, h.cpu_us_per_renewal,
                   h.raw_cpu_us_per_renewal, h.commands_per_s, h.heap_bytes_per_lock,
                   h.rss_bytes_per_lock, h.latency_p50_us, h.latency_p50_none_us, h.lost);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
