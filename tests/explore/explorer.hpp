// SPDX-License-Identifier: MIT
// The seeded explorer of the scripts (issue 51, docs/design/explorer.md): clients that call
// the exact script bodies the library sends, as the library calls them (the typed calls of
// src/script_table.hpp, one encoder), and clients of earlier builds
// (tests/integration/old_scripts/), against one real server; time passes only as events (a
// lease lapses, a queue place lapses, the fencing counter is lost). After every step the
// promises of docs/safety.md are checked (invariants.cpp, all in one place).
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace redis_lock::detail::scripts {
struct AcquireGroup;
}

namespace redis_lock::explore {

/// Which scripts a client runs, and how it queues.
enum class Build : std::uint8_t {
  signing,   ///< today's, queued with a secret: a signed hand-off message is the grant
  folded,    ///< today's without a secret ('f'): every hand-off is claimed
  b34e159,   ///< the build before the signed hand-off (acquire and release of b34e159)
  p89ab635,  ///< the build before the record was folded (89ab635)
  ec7000c,   ///< further back: 89ab635's acquire, ec7000c's release (before the holder record)
};
std::string_view to_string(Build b) noexcept;

/// What a client takes: a mutex's lease, or one hold of a lease set (a semaphore's permit, a
/// read-write lock's shared or exclusive hold). A client works on one of two resources of one
/// slot (`Client::resource`: "r", or another name whose keys hash to r's slot, so that the
/// two share the fencing counter and a group takes both at once); lease sets and candidates
/// work on r. An election's candidate is a mutex whose holder is the leader, its record beside the
/// lease and every change of leader announced.
enum class Kind : std::uint8_t { mutex, permit, shared, exclusive, candidate };
std::string_view to_string(Kind k) noexcept;

/// What happens next: a client's call, or the world's event (client -1, on `resource`;
/// lapse_place and lapse_hold name the client whose place or hold lapses).
enum class Do : std::uint8_t {
  take,           ///< acquire alone (mode '0')
  join,           ///< acquire that queues (mode '1'); a waiter's refresh of its place
  claim,          ///< a waiter's attempt after a hand-off message (today's mode '2')
  give_up,        ///< a waiter leaves the queue (release.lua with its member)
  release,        ///< a holder releases
  extend,         ///< a holder extends
  walk_away,      ///< a waiter handed the lease gives it back unclaimed (a cancelled acquire)
  lapse_lease,    ///< a mutex's lease's ttl runs out (its key and its record go)
  lapse_place,    ///< a waiter's queue place lapses (its expiry moved into the past)
  lose_counter,   ///< the fencing counter is lost (DEL: a restart without persistence)
  force_release,  ///< an operator's force-release
  crowd,          ///< a crowd of waiters joins behind the holder and dies (their places lapse)
  lapse_hold,     ///< a lease set's hold's ttl runs out (its end moves into the past)
  lapse_queue,    ///< a queue nobody live waits in reaches its expiry (its keys go)
  clock_forward,  ///< the server's wall clock steps 25 s forward (what is due expires)
  clock_back,     ///< the server's wall clock steps 25 s back
  take_all,       ///< a group's first member takes both resources at once (acquire_group.lua)
};
struct Event {
  Do what = Do::take;
  int client = -1;
  int resource = 0;  ///< a world event's: 0 for r ("w."), 1 for the other ("ws.")
  bool operator==(const Event&) const = default;
};
std::string to_string(const Event& e);
/// "c0.take c1.join w.lapse_lease ..." (as to_string writes a sequence) back to events.
std::vector<Event> parse_events(std::string_view text);
std::string to_string(std::span<const Event> events);

/// A promise of docs/safety.md that a step broke.
struct Violation {
  std::string invariant;  ///< its name (invariants.cpp)
  std::string detail;
  std::size_t step = 0;  ///< the index of the event after which it was seen
};

/// A bug put back on purpose (a text substitution in today's assembled bodies), to show the
/// explorer finds it: "claim_token_reuse", "purge_64", "group_overtakes".
struct Mutation {
  std::string_view script, from, to;
};
std::span<const Mutation> plant(std::string_view name);

struct Setup {
  std::vector<Build> builds;  ///< one per client
  std::vector<Kind> kinds;    ///< one per client (a lease set's are today's); none: mutexes
  int limit = 2;              ///< a semaphore's
  std::size_t crowd = 0;      ///< the crowd event's size (0: never)
  std::string plant;          ///< a planted bug's name, or empty
  bool clock_steps = true;    ///< the server's clock may step (where the shim is loaded)
  /// One per client: 0 for r, 1 for the other resource of its slot; none: every client on r.
  std::vector<int> resources = {};
  /// Groups, each two clients, the first on r and the second on the other resource (their
  /// `resources` are set so): the first's take_all takes both at once, as async_acquire_all
  /// does for resources of one slot; after that each is a guard of its own (released,
  /// extended, and when refused taken one by one with acquire.lua, as the library does).
  std::vector<std::pair<int, int>> groups = {};
};

/// The model's view of one client (what the library would believe), invariants.cpp reads it.
struct Client {
  enum class State : std::uint8_t { idle, waiting, nudged, holding };
  Build build = Build::signing;
  Kind kind = Kind::mutex;
  std::string id;  ///< its manager id (16 hex digits)
  State state = State::idle;
  std::string token;         ///< the current attempt's
  std::string secret;        ///< a signing waiter's, per attempt
  long long place = 0;       ///< the place its last answered attempt left (a signed grant names it)
  bool place_live = false;   ///< its queue place has not lapsed
  bool continuous = false;   ///< and never lapsed since it joined (so it is still queued)
  std::uint64_t joined = 0;  ///< the order of its join
  std::uint64_t fence = 0;   ///< its holding's fencing token
  bool ended = false;        ///< holding: the lease ended (lapsed, forced) unbeknown to it
  bool handed_live = false;  ///< nudged: the lease handed to it is still there
  bool handed_short = false;  ///< nudged with an older build's 600 ms bare lease: claims at once
  int resource = 0;           ///< 0: r; 1: the other resource of r's slot
  int partner = -1;           ///< a group's first member: the second (on the other resource)
};
/// A holding's name in World::holdings: its token on its resource (a group's leases share a
/// token, each with its own fencing token).
std::string holding_of(const std::string& token, int resource);
inline std::string holding_of(const Client& c) { return holding_of(c.token, c.resource); }

/// The server's keys of the explored resource after a step.
struct Snapshot {
  std::optional<std::string> lease, info;  ///< a mutex's lease (a string) and its record
  std::map<std::string, double> holds;     ///< a lease set's (a zset): member -> its end
  bool set = false;                        ///< the key is a lease set
  std::vector<std::string> queue;          ///< a mutex's waiters in order
  std::vector<std::string> set_queue;      ///< a lease set's
  long long now_ms = 0;
};

/// What the invariants read: the model and the step that led to it.
struct World {
  std::vector<Client> clients;
  /// holding_of(token, resource) -> fence, live
  std::map<std::string, std::pair<std::uint64_t, bool>> holdings;
  std::uint64_t max_fence = 0;        ///< the slot's: both resources share the fencing counter
  std::set<std::string> phantoms;     ///< the crowd's tokens (never live)
  int limit = 2;                      ///< a semaphore's
  std::set<std::uint64_t> announced;  ///< terms an election's observers heard
  std::vector<std::uint64_t> ended_this_step;  ///< terms heard ended ('- <term>') in the step
  std::vector<std::uint64_t> begun_this_step;  ///< terms heard begun in the step
  bool fairness_promised = true;               ///< no client further back than the build before
  /// The server's clock was stepped back and is behind the latest it showed; a counter lost
  /// then may mint below tokens granted before ("never lowers a token while the counter
  /// survives"): FENCE is not promised from then on.
  bool clock_behind = false, counter_lost = false, fence_exempt = false;
  bool clock_went_back = false;
  long long clock_offset_ms = 0, clock_high_ms = 0;
  std::array<Snapshot, 2> keys;  ///< r's and the other resource's
};

class Explorer {
 public:
  /// Connects to 127.0.0.1:`port` and loads every body (today's, mutated by `setup.plant`
  /// for a planted bug, and the earlier builds').
  Explorer(std::uint16_t port, std::string plant = {});
  ~Explorer();
  Explorer(const Explorer&) = delete;
  Explorer& operator=(const Explorer&) = delete;

  /// Plays `events` from a flushed server, skipping those not enabled when their turn
  /// comes; `played` gets those that ran. Returns the first violation.
  std::optional<Violation> play(const Setup& setup, std::span<const Event> events,
                                std::vector<Event>* played = nullptr);
  /// `depth` events chosen by `seed` among those enabled at each step.
  std::optional<Violation> sample(const Setup& setup, std::uint64_t seed, std::size_t depth,
                                  std::vector<Event>& played);
  /// Every sequence of `depth` enabled events; the first violation and its sequence.
  std::optional<Violation> enumerate(const Setup& setup, std::size_t depth,
                                     std::vector<Event>& sequence);
  /// The shortest sequence (one event removed at a time) that still breaks `invariant`.
  std::vector<Event> shrink(const Setup& setup, std::vector<Event> events,
                            const std::string& invariant);

  std::uint64_t steps() const noexcept { return steps_; }
  std::uint64_t sequences() const noexcept { return sequences_; }
  std::size_t distinct_states() const noexcept { return states_.size(); }
  /// Holds a forward step of the server's clock ended while their holders held on (the
  /// documented overlap: docs/safety.md, clock jumps on a server).
  std::uint64_t holds_ended_by_clock() const noexcept { return ended_by_clock_; }
  /// Holds and places a step back revived (lapsed less than the step ago, not yet purged).
  std::uint64_t revived_by_clock() const noexcept { return revived_by_clock_; }
  /// A group's take_all: both resources taken at once; refused (nothing written).
  std::uint64_t groups_taken() const noexcept { return groups_taken_; }
  std::uint64_t groups_refused() const noexcept { return groups_refused_; }
  /// The server's wall clock offset (the clock shim's shared cell), or null: no clock steps.
  void set_clock(std::atomic<std::int64_t>* offset) noexcept { clock_ = offset; }

 private:
  struct Conn;
  void reset(const Setup& setup);
  std::vector<Event> enabled() const;
  std::optional<Violation> step(const Event& e);
  std::optional<Violation> after_step(const Event& e, bool released_live,
                                      const std::vector<int>& live_waiters_before);
  /// A group's take_all (acquire_group.lua) by client `first` and its partner.
  std::optional<Violation> take_all(const Event& e);
  void read_keys();
  /// Every key of the run's resources and the counter, as DUMP and PEXPIRETIME show them.
  std::vector<std::string> everything_written();
  /// A lapse moved the end `old_end` into the past: `key` of `resource`, whose expiry may
  /// have been that end (a key lives as long as the latest end of what it keeps), expires as
  /// it would have.
  void expire_as_time_would(int resource, std::string_view key, double old_end);
  std::string next_token(int client);
  /// Sends one of today's scripts through its typed call and the one encoder, with the sha
  /// of the body this explorer loaded; its reply is read by the caller.
  template <class Call>
  void append_call(const Call& typed);
  void append_call(const detail::scripts::AcquireGroup& typed);
  std::uint64_t state_hash() const;

  std::uint16_t port_;
  std::string plant_;
  std::unique_ptr<Conn> conn_, sub_;
  std::map<std::string, std::string, std::less<>> sha_;  // script name -> the sha we call
  Setup setup_;
  World world_;
  std::uint64_t attempts_ = 0, joins_ = 0, steps_ = 0, sequences_ = 0;
  bool crowd_done_ = false;
  int used_ = 1;  ///< resources the run's clients use: r, or r and the other
  std::atomic<std::int64_t>* clock_ = nullptr;
  std::vector<std::pair<std::uint64_t, int>> pending_announce_;  // a leader's term, its client
  std::vector<std::uint64_t> pending_end_;                       // a leader's released term
  std::uint64_t ended_by_clock_ = 0;
  std::uint64_t revived_by_clock_ = 0;
  std::uint64_t groups_taken_ = 0, groups_refused_ = 0;
  /// After a step of the server's clock: what it expired (forward: the holders believe on)
  /// or revived (back: a lapsed hold or place not yet purged), the model learns.
  void learn_what_the_clock_did(bool forward);
  std::unordered_set<std::uint64_t> states_;
};

/// What inspect.lua said: the kind ('none', 'mutex', a lease set's marker), the holder's
/// record ('<fencing token> <label>', or ''), the live waiters and the live holds.
struct Inspection {
  std::string what, record;
  long long waiters = 0, holders = 0;
};
std::optional<Violation> check_inspection(const World& world, int resource, const Inspection& seen);
/// An election's observers heard of `term`, which `who` now holds (ANNOUNCED).
std::optional<Violation> check_announced(const World& world, std::uint64_t term,
                                         const std::string& who);
/// A leader that released its live term: its end, or its successor's term, was heard.
std::optional<Violation> check_term_ended(const World& world, std::uint64_t term);

/// invariants.cpp: every promise checked after every step, in one place.
std::optional<Violation> check_invariants(const World& world);
/// Whether anything live holds or waits for `resource` (a group's take_all must then be
/// refused: "never overtakes a waiter").
bool live_on(const World& world, int resource);
std::optional<Violation> check_hand_off(const World& world, int to);
std::optional<Violation> check_served(const World& world, bool handed,
                                      const std::vector<int>& live_waiters_before);
/// Whether `c`'s attempt finds the resource of another kind (WRONGTYPE is its answer then).
bool other_kind_present(const World& world, int c);
/// Whether `c`'s attempt must be granted now (docs/safety.md: a free resource is taken; a
/// live waiter first in line is served).
bool must_grant(const World& world, int c);
/// A new grant to `token` of `fence` (FENCE: above every earlier holding's; one holding, one
/// token). Records it.
std::optional<Violation> check_grant(World& world, const std::string& token, std::uint64_t fence,
                                     bool promised);

}  // namespace redis_lock::explore
