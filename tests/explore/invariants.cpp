// SPDX-License-Identifier: MIT
// The promises of docs/safety.md as the explorer checks them, in one place. Each quotes the
// sentence it checks. They read the model (what each client would believe, from the replies
// and messages it got, and the events that ended its lease or place) and the server's keys.
#include "explorer.hpp"

#include <algorithm>
#include <string>

namespace redis_lock::explore {

namespace {

using State = Client::State;

/// A lease the client holds, or that a release handed to it and it has not claimed yet.
bool live_hold(const Client& c) {
  return (c.state == State::holding && !c.ended) || (c.state == State::nudged && c.handed_live);
}

bool live_waiter(const Client& c) { return c.state == State::waiting && c.place_live; }

/// The kinds that share a resource: a mutex; a semaphore's permits; a read-write lock's holds.
int family(Kind k) {
  return k == Kind::mutex || k == Kind::candidate ? 0 : k == Kind::permit ? 1 : 2;
}

/// A mutex's lease: a plain mutex's, or an election's.
bool string_lease(Kind k) { return k == Kind::mutex || k == Kind::candidate; }

std::string who(const World& w, int i) {
  const Client& c = w.clients[i];
  return "c" + std::to_string(i) + " (" + std::string(to_string(c.build)) + " " +
         std::string(to_string(c.kind)) + (c.resource == 0 ? "" : " on s") + ", " + c.token + ")";
}

/// A lease an earlier build's release handed to a dead waiter (allowed beside such a build).
bool dead_holds(const World& w, int r) {
  const auto& lease = w.keys[static_cast<std::size_t>(r)].lease;
  return lease && w.phantoms.count(lease->substr(0, 32)) > 0;
}

/// Whether a hold of `kind` fits beside the live holds of everyone but `except` (on its
/// resource).
bool fits(const World& w, Kind kind, int except) {
  int permits = 0;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& o = w.clients[i];
    if (i == except || !live_hold(o) || o.resource != w.clients[except].resource) continue;
    if (string_lease(kind) || kind == Kind::exclusive || o.kind != kind) return false;
    ++permits;
  }
  return kind != Kind::permit || permits < w.limit;
}

}  // namespace

bool live_on(const World& w, int r) {
  for (const auto& c : w.clients) {
    if (c.resource == r && (live_hold(c) || live_waiter(c))) return true;
  }
  return false;
}

namespace {

std::optional<Violation> check_resource(const World& w, int r) {
  const auto& keys = w.keys[static_cast<std::size_t>(r)];
  int permits = 0, shared = 0, exclusive = 0, mutexes = 0;
  int first = -1;
  bool waiting = false;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& c = w.clients[i];
    if (c.resource != r) continue;
    waiting = waiting || live_waiter(c);
    if (!live_hold(c)) continue;
    if (first >= 0 && family(w.clients[first].kind) != family(c.kind)) {
      // KINDS: a resource is of one kind at a time ("an acquire that asks for another kind
      // fails with WRONGTYPE").
      return Violation{"KINDS", who(w, first) + " and " + who(w, i) + " both hold it"};
    }
    if (first < 0) first = i;
    switch (c.kind) {
      case Kind::mutex:
      case Kind::candidate:
        ++mutexes;
        break;
      case Kind::permit:
        ++permits;
        break;
      case Kind::shared:
        ++shared;
        break;
      case Kind::exclusive:
        ++exclusive;
        break;
    }
    // MUTEX: "at most one holder at any time"; a semaphore's permits at most its limit; a
    // read-write lock's exclusive hold alone.
    if (mutexes > 1) return Violation{"MUTEX", who(w, first) + " and " + who(w, i) + " hold it"};
    if (permits > w.limit) {
      return Violation{"MUTEX", std::to_string(permits) + " permits of " + std::to_string(w.limit) +
                                    ", the last " + who(w, i)};
    }
    if (exclusive > 1 || (exclusive == 1 && shared > 0)) {
      return Violation{"MUTEX", "an exclusive hold beside another: " + who(w, i)};
    }
    // LEASE_NAMES_HOLDER: a live lease is the holder's until it releases it, and nobody
    // else's call changes that ("compare-and-delete on a token").
    if (string_lease(c.kind)) {
      if (!keys.lease || keys.lease->compare(0, 32, c.token) != 0) {
        return Violation{"LEASE_NAMES_HOLDER", who(w, i) + " holds it but the lease is " +
                                                   (keys.lease ? *keys.lease : "gone")};
      }
    } else {
      const auto hold = keys.holds.find(c.token + (c.kind == Kind::exclusive ? 'x' : 's'));
      if (hold == keys.holds.end() || hold->second <= static_cast<double>(keys.now_ms)) {
        return Violation{"LEASE_NAMES_HOLDER", who(w, i) + " holds it but its hold is gone"};
      }
    }
  }
  // NO_LAPSED_HANDOFF: "A release never hands anything to a place that has lapsed" (a
  // release of a build further back than the one before today's may: that dead waiter then
  // holds it until it lapses).
  if (dead_holds(w, r) && w.fairness_promised) {
    return Violation{"NO_LAPSED_HANDOFF", "the lease went to a dead waiter: " + *keys.lease};
  }
  // FREE: "once no hold is live and nobody waits, the resource is free for any kind": its
  // key is gone.
  // Not after a step back of the server's clock: "every expiry already set moves D later on
  // the server's new clock", a key's too. And a lease set's key lives as long as its queue,
  // which lives until its latest place's end, a served waiter's included: nobody waits,
  // yet the name keeps its kind for at most one place life (w.lapse_queue ends it).
  const bool queue_lives = !keys.set_queue.empty();
  if (first < 0 && !waiting && !dead_holds(w, r) && !w.clock_went_back && !queue_lives &&
      (keys.lease || keys.set)) {
    return Violation{"FREE",
                     "nothing is live and nobody waits, yet the key is there (" +
                         (keys.lease ? "the lease " + *keys.lease
                                     : std::to_string(keys.holds.size()) + " lapsed holds") +
                         ")"};
  }
  return std::nullopt;
}

}  // namespace

std::optional<Violation> check_invariants(const World& w) {
  for (int r = 0; r < static_cast<int>(w.keys.size()); ++r) {
    if (auto v = check_resource(w, r)) return v;
  }
  return std::nullopt;
}

std::optional<Violation> check_inspection(const World& w, int r, const Inspection& seen) {
  // INSPECT: "who holds a resource, for how long, and how many wait" (inspect.lua): the
  // holder's own fencing token and no other's; its live waiters; its live holds. (Not after
  // a step back of the clock: places and holds it revived count there, as they should.)
  if (w.clock_went_back) return std::nullopt;
  long long waiters = 0, holds = 0;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& c = w.clients[i];
    if (c.resource != r) continue;
    waiters += live_waiter(c) ? 1 : 0;
    if (!live_hold(c)) continue;
    ++holds;
    if (!string_lease(c.kind)) continue;
    if (seen.what != "mutex")
      return Violation{"INSPECT", who(w, i) + " holds it, inspect says " + seen.what};
    // A holding's record: its own fencing token (a hand-off not yet claimed may show none).
    const std::string own = std::to_string(c.fence) + " ";
    const bool unclaimed = c.state == State::nudged;
    if (seen.record.compare(0, own.size(), own) != 0 && !(unclaimed && seen.record.empty())) {
      return Violation{"INSPECT", who(w, i) + " holds fencing token " + std::to_string(c.fence) +
                                      ", inspect shows the record '" + seen.record + "'"};
    }
  }
  if (seen.waiters != waiters) {
    return Violation{"INSPECT", "inspect counts " + std::to_string(seen.waiters) +
                                    " live waiters, there are " + std::to_string(waiters)};
  }
  if (seen.what != "mutex" && seen.what != "none" && seen.holders != holds && !dead_holds(w, r)) {
    return Violation{"INSPECT", "inspect counts " + std::to_string(seen.holders) +
                                    " live holds, there are " + std::to_string(holds)};
  }
  return std::nullopt;
}

std::optional<Violation> check_announced(const World& w, std::uint64_t term,
                                         const std::string& who) {
  // ANNOUNCED: an election's observers hear every new leader's term ("a new leader is
  // announced": the grant and the hand-off publish '<fencing token> <ttl ms> <value>').
  if (w.announced.count(term) > 0) return std::nullopt;
  return Violation{"ANNOUNCED",
                   who + " leads with term " + std::to_string(term) + ", which no observer heard"};
}

std::optional<Violation> check_term_ended(const World& w, std::uint64_t term) {
  // ANNOUNCED: a leader that steps down is heard to ('- <term>'), or its successor is.
  const auto& ended = w.ended_this_step;
  if (std::find(ended.begin(), ended.end(), term) != ended.end() || !w.begun_this_step.empty()) {
    return std::nullopt;
  }
  return Violation{"ANNOUNCED", "the leader of term " + std::to_string(term) +
                                    " stepped down and no observer heard of it"};
}

bool other_kind_present(const World& w, int c) {
  const int mine = family(w.clients[c].kind);
  const int r = w.clients[c].resource;
  const auto& keys = w.keys[static_cast<std::size_t>(r)];
  if (dead_holds(w, r) && mine != 0) return true;
  // A queue of the other kind, until its life runs out (dead places, a served waiter's).
  if (mine != 0 && !keys.queue.empty()) return true;
  if (mine == 0 && !keys.set_queue.empty()) return true;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& o = w.clients[i];
    if (i != c && o.resource == r && family(o.kind) != mine && (live_hold(o) || live_waiter(o)))
      return true;
  }
  return false;
}

bool must_grant(const World& w, int c) {
  const Client& self = w.clients[c];
  if (self.state == State::nudged && self.handed_live) return true;  // its own handed lease
  // A lease an earlier build's release handed to a dead waiter holds until it lapses; after
  // a step back of the server's clock, what it revived or kept holds D longer.
  if (dead_holds(w, self.resource) || w.clock_went_back) return false;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    // Another live waiter may be ahead in line.
    const Client& o = w.clients[i];
    if (i != c && o.resource == self.resource && live_waiter(o)) return false;
  }
  // Free, or room beside the live holds: "a free resource is taken" (a permit while fewer
  // than the limit are held, a shared hold beside shared ones).
  return fits(w, self.kind, c);
}

std::optional<Violation> check_grant(World& w, const std::string& token, std::uint64_t fence,
                                     bool promised) {
  auto [it, fresh] = w.holdings.try_emplace(token, fence, true);
  // Beside a build further back than the one before today's, only mutual exclusion is
  // promised (docs/design-notes.md, mixed versions): its grants are recorded, not judged.
  if (!promised) {
    it->second = {fence, true};
    if (fence > w.max_fence) w.max_fence = fence;
    return std::nullopt;
  }
  if (!fresh && it->second.second) {
    // ONE_HOLDING_ONE_TOKEN: "One holding, one fencing token": a hand-off's claim and a
    // resent attempt keep the token the holding was granted.
    if (it->second.first != fence) {
      return Violation{"ONE_HOLDING_ONE_TOKEN", token + " was granted " +
                                                    std::to_string(it->second.first) + ", now " +
                                                    std::to_string(fence)};
    }
    return std::nullopt;
  }
  // FENCE: every new holding's token is "larger than every token granted before it on that
  // resource" (a lost counter starts again above every token minted before: the clock floor;
  // "a clock stepped back by D ... never lowers a token while the counter survives").
  if (fence <= w.max_fence && !w.fence_exempt) {
    return Violation{"FENCE", token + " was granted " + std::to_string(fence) + ", not above the " +
                                  std::to_string(w.max_fence) + " granted before"};
  }
  it->second = {fence, true};
  w.max_fence = std::max(w.max_fence, fence);
  return std::nullopt;
}

std::optional<Violation> check_hand_off(const World& w, int to) {
  const Client& c = w.clients[to];
  if (c.state != State::waiting) {
    return Violation{"HAND_OFF_TO_A_WAITER",
                     "a hand-off message to " + who(w, to) + ", which does not wait"};
  }
  if (!w.fairness_promised) return std::nullopt;
  if (!c.place_live) {
    return Violation{"NO_LAPSED_HANDOFF", "handed to " + who(w, to) + ", whose place lapsed"};
  }
  // FIFO: "every live waiter served in order": one queued before it whose place never
  // lapsed is still in the queue, ahead.
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& v = w.clients[i];
    if (i != to && v.resource == c.resource && v.state == State::waiting && v.continuous &&
        v.joined < c.joined) {
      return Violation{"FIFO", "handed to " + who(w, to) + " before " + who(w, i) +
                                   ", which queued first and stayed live"};
    }
  }
  return std::nullopt;
}

std::optional<Violation> check_served(const World& w, bool handed,
                                      const std::vector<int>& live_waiters_before) {
  if (!w.fairness_promised || live_waiters_before.empty()) return std::nullopt;
  // SERVED: "With up to 10,000 lapsed places in the queue, the next live waiter is served by
  // the release itself" (a mutex: someone is handed it; a lease set: nobody first in line
  // is left waiting for room there is).
  const Client& head = w.clients[live_waiters_before.front()];
  if (string_lease(head.kind)) {
    if (handed) return std::nullopt;
    return Violation{"SERVED", "the release served nobody while " +
                                   who(w, live_waiters_before.front()) + " waited live"};
  }
  // (Not after a step back of the clock: a hold it revived takes room the model gives.)
  if (w.clock_went_back) return std::nullopt;
  int first = -1;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& c = w.clients[i];
    if (!live_waiter(c) || c.resource != head.resource) continue;
    if (!c.continuous) return std::nullopt;  // its place in line is not known
    if (first < 0 || c.joined < w.clients[first].joined) first = i;
  }
  if (first >= 0 && fits(w, w.clients[first].kind, first)) {
    return Violation{
        "SERVED", "the release left " + who(w, first) + " waiting first in line for room there is"};
  }
  return std::nullopt;
}

}  // namespace redis_lock::explore
