// SPDX-License-Identifier: MIT
// Layer 4 (engine): waiting for a lease to be handed over. A waiting acquire sleeps in a
// queue on the server; a release hands the lease to the queue's head (set for its ttl, its
// fencing token minted) and publishes that on the head's manager's channel; the manager
// hears it on its subscriber connection and gives it to that waiter, which owns the lock
// from then on if the message is signed with its secret (AcquireOp::handed), and claims it
// otherwise. HandOffBook is the bookkeeping without I/O (tests/unit/waiters_test.cpp);
// Waiters adds the subscriptions.
#pragma once

#include "router.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace redis_lock::detail {

// A queued waiter keeps its place while it retries within `waiter_ttl` (refreshing every
// `refresh_interval`). A release hands the lease to the first live waiter for that
// waiter's ttl, mints its fencing token and tells its manager both: the waiter owns the lock
// when the message, signed with its secret, arrives, without a claim (an unsigned message
// is a nudge: the waiter claims). A waiter that died keeps its place for at most
// waiter_ttl after its last refresh; a release within that time hands it the lease, which
// then lapses after its ttl, as the lease of a holder that died at once would. Shorter would
// trade fairness, not safety: a live waiter that misses a refresh by more than
// waiter_ttl - refresh_interval goes to the back.
inline constexpr std::chrono::milliseconds waiter_ttl{1200};
inline constexpr std::string_view waiter_ttl_ms = "1200";
inline constexpr std::chrono::milliseconds refresh_interval{400};  // a third of waiter_ttl

/// What a hand-off message tells the waiter it names: '<token> <fencing token> <place>',
/// then ' <mac>' for a waiter with a secret (shared.lua's hand_on). `fence` 0: only
/// '<token>' (a release of an older version, a lease set's, or a counter that could not be
/// incremented), or not well formed: the waiter claims the lease with an attempt.
struct HandOff {
  std::string_view token;
  std::uint64_t fence = 0;
  long long place = 0;         // the waiter's queue entry expiry the release saw (acquire.lua)
  std::string_view mac;        // 40 hex digits (a signed message), else empty
  std::string_view signed_by;  // what the mac signs: the message before ' <mac>'
};
HandOff read_hand_off(std::string_view message) noexcept;
/// No release publishes a longer message: token, fencing token, place (up to 20 digits
/// each) and signature, spaced.
inline constexpr std::size_t longest_hand_off_message = 32 + 1 + 20 + 1 + 20 + 1 + 40;

/// A sleeping acquire, as the hand-off sees it.
class Waiter {
 public:
  /// A release handed us the lease (or may have): try now instead of at the timer.
  virtual void nudge() = 0;
  /// A release handed us the lease and said so (a message that carries no fencing token
  /// is only a nudge).
  virtual void handed(const HandOff& hand_off) = 0;

 protected:
  ~Waiter() = default;
};

/// Hears an election's announcements (Election::async_observe), as Waiters delivers them.
/// All on the strand.
class Watcher {
 public:
  /// A message on the watched channel.
  virtual void heard(std::string_view message) = 0;
  /// Subscribed (at once if the channel already was): what was announced before may have
  /// been missed, so the state is read now.
  virtual void listening() = 0;
  /// The subscription failed or its link went down: messages are missed until watched again.
  virtual void unheard() = 0;
  /// The server refused the SUBSCRIBE (an ACL without the channel, say): asking again would
  /// get the same answer. No longer watched.
  virtual void refused(const Reply& error) = 0;

 protected:
  ~Watcher() = default;
};

/// Who waits for which slot, and whether we listen there. No I/O.
class HandOffBook {
 public:
  struct Subscription {
    enum class State { none, pending, confirmed } state = State::none;
    std::size_t node = no_node;
  };

  /// Waiter `token` sleeps on `slot` (again: idempotent). True when the slot needs a
  /// SUBSCRIBE now (it had none, or lost it with its link).
  bool add(const std::string& token, std::weak_ptr<Waiter> waiter, std::uint16_t slot);
  /// True when that was the last waiter: nothing is published to us any more, stop reading.
  bool remove(const std::string& token);
  /// A SUBSCRIBE for `slot` goes to `node` now.
  void subscribing(std::uint16_t slot, std::size_t node);
  /// Whether a SUBSCRIBE's answer still matters: the slot is pending at `node`.
  bool awaits(std::uint16_t slot, std::size_t node) const;
  /// The SUBSCRIBE failed: waiters keep polling; the next sleeper subscribes again.
  void failed(std::uint16_t slot);
  /// The SUBSCRIBE was confirmed. A release may have handed a lease to one of our waiters
  /// before we listened: every waiter of the slot looks once more (returned).
  std::vector<std::shared_ptr<Waiter>> confirmed(std::uint16_t slot);
  /// Subscriptions die with their link.
  void link_down(std::size_t node);
  /// A Cluster node gave `slot` away (sunsubscribe): subscribe again where it went.
  void moved_away(std::uint16_t slot);
  /// A hand-off message for `token`: the waiter to give it to, if it still waits.
  std::shared_ptr<Waiter> handed_to(const std::string& token) const;
  /// A hand-off message for a token nobody waits with: kept (the last few), since it may
  /// have overtaken the reply that queued its waiter, whose add() then takes it. A bare
  /// token is kept too: a lease set's release nudges the waiters it hands holds to that way.
  void keep(std::string_view message);
  /// The kept message for `token` (read it with read_hand_off), taken out of the book; none
  /// kept: nullopt.
  std::optional<std::string> take_kept(const std::string& token);

  bool listening(std::uint16_t slot) const noexcept;
  std::size_t node_of(std::uint16_t slot) const noexcept;
  bool empty() const noexcept { return waiters_.empty(); }
  void clear() noexcept;

 private:
  struct Entry {
    std::weak_ptr<Waiter> waiter;
    std::uint16_t slot = 0;
  };
  std::unordered_map<std::uint16_t, Subscription> subscriptions_;  // by slot (0: standalone)
  std::unordered_map<std::string, Entry> waiters_;                 // by token
  struct Kept {
    std::string token;
    std::string message;
  };
  static constexpr std::size_t kept_max = 8;
  std::vector<Kept> kept_;  // oldest first
};

/// The hand-off's subscriptions: one channel per manager (per slot on a Cluster,
/// <prefix>notify:{<slot tag>}<manager id>, published with SPUBLISH from inside the slot).
/// All member functions on the strand, but for channel_prefix() and manager_id().
class Waiters : public std::enable_shared_from_this<Waiters> {
 public:
  /// `keep_connections`: subscriber connections stay open when nobody waits or watches
  /// (ManagerOptions::keep_subscriber_connection).
  Waiters(std::shared_ptr<Router> router, std::string key_prefix, std::string manager_id,
          bool cluster, bool keep_connections = false);
  /// Installs the push and link-down handlers on subscriber connections (once).
  void attach();
  void add(const std::string& token, std::weak_ptr<Waiter> waiter, std::uint16_t slot);
  void remove(const std::string& token);
  /// Whether a release of a lease in `slot` would reach us at once.
  bool listening(std::uint16_t slot) const noexcept { return book_.listening(slot); }
  /// A release publishes to the next waiter's manager on this + its manager id. (This and
  /// manager_id() read only what the constructor set: callable from any thread.)
  std::string channel_prefix(std::uint16_t slot) const;
  const std::string& manager_id() const noexcept { return manager_id_; }
  /// A queue member is token + this: the manager id, the mode of a lease set's waiter ('s'
  /// or 'x'; a mutex's: folded_member_letter, or signed_member_letter followed by the
  /// waiter's `secret`) and the waiter's ttl in ms (how long a lease handed to it lasts).
  /// `data` (the holder's label, an election's value: acquire.lua) follows a space.
  /// Appended to `out` (an acquire builds it into its script argument in place).
  void append_member_suffix(std::string& out, std::chrono::milliseconds ttl, char mode = 0,
                            std::string_view data = {}, std::string_view secret = {}) const;
  /// `watcher` hears the messages of `channel` (SUBSCRIBE, on the subscriber connection of
  /// the node serving `slot`: a Cluster forwards PUBLISH to every node) until unwatch().
  void watch(const std::string& channel, std::uint16_t slot, std::shared_ptr<Watcher> watcher);
  /// The channel's last watcher gone: UNSUBSCRIBE.
  void unwatch(const std::string& channel, const Watcher* watcher);
  void shutdown() noexcept;

 private:
  struct Channel {
    HandOffBook::Subscription::State state = HandOffBook::Subscription::State::none;
    std::size_t node = no_node;
    std::vector<std::shared_ptr<Watcher>> watchers;
  };

  void subscribe(std::uint16_t slot, int redirects = 0);
  void subscribe_channel(const std::string& channel, std::uint16_t slot);
  void unsubscribe_channel(const std::string& channel, std::size_t node);
  void channels_down(std::size_t node);
  /// Nobody waits, nothing is watched.
  bool idle() const noexcept;
  /// Subscriber connections read while anybody waits or watches (else an idle manager
  /// holds no work), and are closed when nobody does.
  void stop_reading_if_idle();
  void on_notify(const Reply& push);

  std::shared_ptr<Router> router_;   // null once shut down
  const std::string notify_prefix_;  // <prefix>notify:
  const std::string manager_id_;     // 16 hex digits
  const bool cluster_ = false;
  const bool keep_connections_ = false;
  HandOffBook book_;
  std::unordered_map<std::string, Channel> channels_;  // watched (an election's observers)
  bool close_posted_ = false;                          // stop_reading_if_idle's close is on its way
};

}  // namespace redis_lock::detail
