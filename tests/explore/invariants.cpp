// SPDX-License-Identifier: MIT
// The promises of docs/safety.md as the explorer checks them, in one place. Each quotes the
// sentence it checks. They read the model (what each client would believe, from the replies
// and messages it got, and the events that ended its lease or place) and the server's keys.
#include "explorer.hpp"

#include <string>

namespace redis_lock::explore {

namespace {

using State = Client::State;

/// A lease the client holds, or that a release handed to it and it has not claimed yet.
bool live_hold(const Client& c) {
  return (c.state == State::holding && !c.ended) || (c.state == State::nudged && c.handed_live);
}

bool live_waiter(const Client& c) { return c.state == State::waiting && c.place_live; }

std::string who(const World& w, int i) {
  return "c" + std::to_string(i) + " (" + std::string(to_string(w.clients[i].build)) + ", " +
         w.clients[i].token + ")";
}

}  // namespace

std::optional<Violation> check_invariants(const World& w) {
  const auto& lease = w.keys.lease;
  int holders = 0;
  int holder = -1;
  bool waiting = false;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const Client& c = w.clients[i];
    waiting = waiting || live_waiter(c);
    if (!live_hold(c)) continue;
    ++holders;
    // MUTEX: "at most one holder at any time" (docs/safety.md, Terms: a mutex).
    if (holders > 1) {
      return Violation{"MUTEX", who(w, holder) + " and " + who(w, i) + " both hold it"};
    }
    holder = i;
    // LEASE_NAMES_HOLDER: a live lease is the holder's until it releases it, and nobody
    // else's call changes that ("compare-and-delete on a token").
    if (!lease || lease->compare(0, 32, c.token) != 0) {
      return Violation{"LEASE_NAMES_HOLDER",
                       who(w, i) + " holds it but the lease is " + (lease ? *lease : "gone")};
    }
  }
  // NO_LAPSED_HANDOFF: "A release never hands anything to a place that has lapsed" (a
  // release of a build further back than the one before today's may: that dead waiter then
  // holds it until it lapses).
  const bool dead_holds = lease && w.phantoms.count(lease->substr(0, 32)) > 0;
  if (dead_holds && w.fairness_promised) {
    return Violation{"NO_LAPSED_HANDOFF", "the lease went to a dead waiter: " + *lease};
  }
  // FREE: "once no hold is live and nobody waits, the resource is free for any kind".
  if (holders == 0 && !waiting && lease && !dead_holds) {
    return Violation{"FREE", "nothing is live and nobody waits, yet the lease is " + *lease};
  }
  return std::nullopt;
}

bool must_grant(const World& w, int c) {
  const Client& self = w.clients[c];
  if (self.state == State::nudged && self.handed_live) return true;  // its own handed lease
  // A lease an earlier build's release handed to a dead waiter holds until it lapses.
  if (w.keys.lease && w.phantoms.count(w.keys.lease->substr(0, 32)) > 0) return false;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    if (i == c) continue;
    // Another's live lease, or another live waiter (who may be ahead in line), keep it.
    if (live_hold(w.clients[i]) || live_waiter(w.clients[i])) return false;
  }
  return true;  // free, and nobody live waits: "a free resource is taken"
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
  // resource" (a lost counter starts again above every token minted before: the clock floor).
  if (fence <= w.max_fence) {
    return Violation{"FENCE", token + " was granted " + std::to_string(fence) + ", not above the " +
                                  std::to_string(w.max_fence) + " granted before"};
  }
  it->second = {fence, true};
  if (fence > w.max_fence) w.max_fence = fence;
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
    if (i != to && v.state == State::waiting && v.continuous && v.joined < c.joined) {
      return Violation{"FIFO", "handed to " + who(w, to) + " before " + who(w, i) +
                                   ", which queued first and stayed live"};
    }
  }
  return std::nullopt;
}

std::optional<Violation> check_served(const World& w, bool handed,
                                      const std::vector<int>& live_waiters_before) {
  // SERVED: "With up to 10,000 lapsed places in the queue, the next live waiter is served by
  // the release itself".
  if (!w.fairness_promised || handed || live_waiters_before.empty()) return std::nullopt;
  return Violation{"SERVED", "the release served nobody while " +
                                 who(w, live_waiters_before.front()) + " waited live"};
}

}  // namespace redis_lock::explore
