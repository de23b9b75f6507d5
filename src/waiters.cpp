// SPDX-License-Identifier: MIT
#include "waiters.hpp"

#include "decimal.hpp"
#include "keys.hpp"
#include "redirect.hpp"

#include <boost/asio/post.hpp>

#include <charconv>

namespace redis_lock::detail {

using boost::system::error_code;

HandOff read_hand_off(std::string_view message) noexcept {
  constexpr std::size_t token_size = 32;
  HandOff h;
  h.token = message.substr(0, token_size);
  if (message.size() <= token_size || message[token_size] != ' ') return h;
  const char* p = message.data() + token_size + 1;
  const char* const end = message.data() + message.size();
  std::uint64_t fence = 0;
  long long place = 0;
  auto read = std::from_chars(p, end, fence);
  if (read.ec != std::errc{} || read.ptr == end || *read.ptr != ' ') return h;
  read = std::from_chars(read.ptr + 1, end, place);
  if (read.ec != std::errc{} || fence == 0 || place <= 0) return h;
  std::string_view mac;
  if (read.ptr != end) {
    // ' <mac>': 40 lowercase hex digits (redis.sha1hex), the end of the message.
    constexpr std::size_t mac_size = 40;
    const auto signed_size = static_cast<std::size_t>(read.ptr - message.data());
    if (*read.ptr != ' ' || message.size() != signed_size + 1 + mac_size) return h;
    mac = message.substr(signed_size + 1);
    for (const char c : mac) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return h;
    }
    h.signed_by = message.substr(0, signed_size);
  }
  h.fence = fence;
  h.place = place;
  h.mac = mac;
  return h;
}

// ---------------------------------------------------------------------------------------
// HandOffBook

bool HandOffBook::add(const std::string& token, std::weak_ptr<Waiter> waiter, std::uint16_t slot) {
  waiters_.emplace(token, Entry{std::move(waiter), slot});
  return subscriptions_[slot].state == Subscription::State::none;
}

bool HandOffBook::remove(const std::string& token) {
  return waiters_.erase(token) != 0 && waiters_.empty();
}

void HandOffBook::subscribing(std::uint16_t slot, std::size_t node) {
  auto& sub = subscriptions_[slot];
  sub.state = Subscription::State::pending;
  sub.node = node;
}

bool HandOffBook::awaits(std::uint16_t slot, std::size_t node) const {
  const auto it = subscriptions_.find(slot);
  return it != subscriptions_.end() && it->second.state == Subscription::State::pending &&
         it->second.node == node;
}

void HandOffBook::failed(std::uint16_t slot) {
  subscriptions_[slot].state = Subscription::State::none;
}

std::vector<std::shared_ptr<Waiter>> HandOffBook::confirmed(std::uint16_t slot) {
  subscriptions_[slot].state = Subscription::State::confirmed;
  std::vector<std::shared_ptr<Waiter>> waiting;
  for (auto& [token, entry] : waiters_) {
    if (entry.slot != slot) continue;
    if (auto waiter = entry.waiter.lock()) waiting.push_back(std::move(waiter));
  }
  return waiting;
}

void HandOffBook::link_down(std::size_t node) {
  for (auto& [slot, sub] : subscriptions_) {
    if (sub.node == node) sub.state = Subscription::State::none;
  }
}

void HandOffBook::moved_away(std::uint16_t slot) {
  const auto it = subscriptions_.find(slot);
  if (it != subscriptions_.end()) it->second.state = Subscription::State::none;
}

std::shared_ptr<Waiter> HandOffBook::handed_to(const std::string& token) const {
  const auto it = waiters_.find(token);
  if (it == waiters_.end()) return nullptr;  // a waiter that finished meanwhile
  return it->second.waiter.lock();
}

void HandOffBook::keep(std::string_view message) {
  // Nothing longer than a release's message: anyone who may publish could otherwise pin
  // large strings here.
  const auto token = read_hand_off(message).token;
  if (token.size() != 32 || message.size() > longest_hand_off_message) return;  // not ours
  if (kept_.size() == kept_max) kept_.erase(kept_.begin());
  kept_.push_back({std::string(token), std::string(message)});
}

std::optional<std::string> HandOffBook::take_kept(const std::string& token) {
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->token != token) continue;
    std::string found = std::move(it->message);
    kept_.erase(it);
    return found;
  }
  return std::nullopt;
}

bool HandOffBook::listening(std::uint16_t slot) const noexcept {
  const auto it = subscriptions_.find(slot);
  return it != subscriptions_.end() && it->second.state == Subscription::State::confirmed;
}

std::size_t HandOffBook::node_of(std::uint16_t slot) const noexcept {
  const auto it = subscriptions_.find(slot);
  return it == subscriptions_.end() ? no_node : it->second.node;
}

void HandOffBook::clear() noexcept {
  subscriptions_.clear();
  waiters_.clear();
  kept_.clear();
}

// ---------------------------------------------------------------------------------------
// Waiters

Waiters::Waiters(std::shared_ptr<Router> router, std::string key_prefix, std::string manager_id,
                 bool cluster, bool keep_connections)
    : router_(std::move(router)),
      notify_prefix_(std::move(key_prefix) + "notify:"),
      manager_id_(std::move(manager_id)),
      cluster_(cluster),
      keep_connections_(keep_connections) {}

void Waiters::attach() {
  // (Not in the constructor: the handlers hold us weakly.)
  router_->set_subscriber_setup([weak = weak_from_this()](Connection& c, std::size_t node) {
    c.set_subscriber(
        [weak](const Reply& push) {
          if (auto self = weak.lock()) self->on_notify(push);
        },
        [weak, node] {
          if (auto self = weak.lock()) {
            self->book_.link_down(node);
            self->channels_down(node);
          }
        });
  });
}

std::string Waiters::channel_prefix(std::uint16_t slot) const {
  if (!cluster_) return notify_prefix_;
  std::string prefix = notify_prefix_;
  prefix.append("{").append(slot_tag(slot)).append("}");
  return prefix;
}

void Waiters::append_member_suffix(std::string& out, std::chrono::milliseconds ttl, char mode,
                                   std::string_view data, std::string_view secret) const {
  out.append(manager_id_);
  if (mode != 0) out += mode;
  out.append(secret);
  out.append(to_decimal(ttl.count()));
  if (!data.empty()) out.append(" ").append(data);
}

void Waiters::add(const std::string& token, std::weak_ptr<Waiter> waiter, std::uint16_t slot) {
  if (!router_) return;
  auto alive = waiter.lock();
  if (book_.add(token, std::move(waiter), slot)) subscribe(slot);
  if (const auto node = book_.node_of(slot); node != no_node) {
    router_->connection(node, Router::Pool::subscriber).keep_reading(true);
  }
  if (const auto kept = book_.take_kept(token); kept && alive) {
    alive->handed(read_hand_off(*kept));
  }
}

void Waiters::remove(const std::string& token) {
  // Stay subscribed (no SUBSCRIBE per acquisition), but stop reading: an idle manager
  // holds no work, and no message is published to us while none of our tokens is queued.
  if (book_.remove(token)) stop_reading_if_idle();
}

bool Waiters::idle() const noexcept {
  if (!router_ || !book_.empty()) return false;
  // A channel nobody watches any more (its SUBSCRIBE unanswered yet) needs no reads: that
  // SUBSCRIBE keeps its own connection reading (and open) until it is answered.
  for (const auto& [name, channel] : channels_) {
    if (!channel.watchers.empty()) return false;
  }
  return true;
}

void Waiters::stop_reading_if_idle() {
  if (!idle()) return;
  router_->for_each_subscriber([](std::size_t, Connection& c) { c.keep_reading(false); });
  // Nobody waits or watches: the subscriber connections close (a fleet of idle managers
  // holds one connection each, not one more per master), once the handlers on the stack,
  // which may be the connection's own, have returned. The next wait connects and
  // subscribes again before it relies on a message: until the SUBSCRIBE is confirmed its
  // waiters poll, and the confirmation makes every one of them look again, so a hand-off
  // published in between is not missed (HandOffBook::confirmed).
  if (keep_connections_ || close_posted_) return;
  close_posted_ = true;
  boost::asio::post(router_->strand(), [weak = weak_from_this()] {
    const auto self = weak.lock();
    if (!self) return;
    self->close_posted_ = false;
    if (!self->idle()) return;
    // One with a command still in flight (an UNSUBSCRIBE) closes when it is answered.
    self->router_->for_each_subscriber([](std::size_t, Connection& c) { c.close_if_idle(); });
  });
}

void Waiters::watch(const std::string& channel, std::uint16_t slot,
                    std::shared_ptr<Watcher> watcher) {
  if (!router_) return;
  auto& entry = channels_[channel];
  entry.watchers.push_back(watcher);
  switch (entry.state) {
    case HandOffBook::Subscription::State::none:
      return subscribe_channel(channel, slot);
    case HandOffBook::Subscription::State::pending:
      return;  // listening() when it is confirmed
    case HandOffBook::Subscription::State::confirmed:
      return watcher->listening();
  }
}

void Waiters::unwatch(const std::string& channel, const Watcher* watcher) {
  const auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  auto& watchers = it->second.watchers;
  std::erase_if(watchers, [watcher](const auto& w) { return w.get() == watcher; });
  if (!watchers.empty()) return;
  const bool subscribed = it->second.state == HandOffBook::Subscription::State::confirmed;
  const auto node = it->second.node;
  if (it->second.state == HandOffBook::Subscription::State::pending) {
    return stop_reading_if_idle();  // its answer unsubscribes
  }
  channels_.erase(it);
  if (subscribed) unsubscribe_channel(channel, node);
  stop_reading_if_idle();
}

void Waiters::subscribe_channel(const std::string& channel, std::uint16_t slot) {
  const auto node = router_->node_for(slot);
  auto& entry = channels_[channel];
  entry.state = HandOffBook::Subscription::State::pending;
  entry.node = node;
  const std::string_view command[] = {"SUBSCRIBE", channel};
  Connection& subscriber = router_->connection(node, Router::Pool::subscriber);
  subscriber.keep_reading(true);
  subscriber.execute(command, Connection::Callback([weak = weak_from_this(), channel, node,
                                                    connection = subscriber.weak_from_this()](
                                                       error_code ec, Reply reply) {
                       auto self = weak.lock();
                       if (!self) {
                         // The manager went while its last watcher's SUBSCRIBE was unanswered
                         // (unwatch left this answer to close the subscription): nobody will
                         // stop this connection's reads but us, and nothing needs them.
                         if (auto c = connection.lock()) c->keep_reading(false);
                         return;
                       }
                       if (!self->router_) return;
                       const auto it = self->channels_.find(channel);
                       if (it == self->channels_.end() || it->second.node != node ||
                           it->second.state != HandOffBook::Subscription::State::pending) {
                         return;
                       }
                       auto watchers = it->second.watchers;  // they may unwatch from inside
                       if (watchers.empty()) {
                         // Everyone left while we subscribed.
                         self->channels_.erase(it);
                         if (!ec && !reply.is_error()) self->unsubscribe_channel(channel, node);
                         return self->stop_reading_if_idle();
                       }
                       if (ec || reply.is_error()) {
                         self->channels_.erase(it);
                         for (auto& w : watchers) {
                           if (ec) {
                             w->unheard();
                           } else {
                             w->refused(reply);
                           }
                         }
                         return self->stop_reading_if_idle();
                       }
                       it->second.state = HandOffBook::Subscription::State::confirmed;
                       for (auto& w : watchers) w->listening();
                     }));
}

void Waiters::unsubscribe_channel(const std::string& channel, std::size_t node) {
  // Read until its answer comes (an in-flight command keeps the connection reading); then,
  // if nothing else is watched, the connection closes.
  const std::string_view command[] = {"UNSUBSCRIBE", channel};
  router_->connection(node, Router::Pool::subscriber)
      .execute(command, Connection::Callback([weak = weak_from_this()](error_code, Reply) {
                 if (const auto self = weak.lock()) self->stop_reading_if_idle();
               }));
}

void Waiters::channels_down(std::size_t node) {
  std::vector<std::shared_ptr<Watcher>> unheard;
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.node != node) {
      ++it;
      continue;
    }
    unheard.insert(unheard.end(), it->second.watchers.begin(), it->second.watchers.end());
    it = channels_.erase(it);
  }
  for (auto& w : unheard) w->unheard();
}

void Waiters::subscribe(std::uint16_t slot, int redirects) {
  const auto node = router_->node_for(slot);
  book_.subscribing(slot, node);
  const std::string channel = channel_prefix(slot) + manager_id_;
  // On a Cluster, a shard channel lives on the node serving its slot.
  const std::string_view command[] = {cluster_ ? "SSUBSCRIBE" : "SUBSCRIBE", channel};
  Connection& subscriber = router_->connection(node, Router::Pool::subscriber);
  subscriber.keep_reading(true);
  subscriber.execute(command, Connection::Callback([weak = weak_from_this(), slot, node, redirects](
                                                       error_code ec, Reply reply) {
                       auto self = weak.lock();
                       if (!self || !self->router_) return;
                       // A stale answer (the slot moved, subscribed again elsewhere): its
                       // connection may be idle now all the same.
                       if (!self->book_.awaits(slot, node)) return self->stop_reading_if_idle();
                       if (!ec && reply.is_error() && redirects < redirect::max_redirects) {
                         const auto action = redirect::read(reply.str);
                         if (action.kind == redirect::Action::Kind::moved) {
                           self->router_->moved(slot, self->router_->node_at(action.address, node));
                           return self->subscribe(slot, redirects + 1);
                         }
                       }
                       if (ec || reply.is_error()) {
                         self->book_.failed(slot);
                       } else {
                         for (auto& waiter : self->book_.confirmed(slot)) waiter->nudge();
                       }
                       // Every waiter may have gone while it was on its way.
                       self->stop_reading_if_idle();
                     }));
}

void Waiters::on_notify(const Reply& push) {
  if (push.elements[0].str == "sunsubscribe") {
    book_.moved_away(key_slot(push.elements[1].str));
    if (router_) router_->refresh();
    return;
  }
  if (const auto it = channels_.find(push.elements[1].str); it != channels_.end()) {
    auto watchers = it->second.watchers;  // they may unwatch from inside
    for (auto& w : watchers) w->heard(push.elements[2].str);
    return;
  }
  const auto hand_off = read_hand_off(push.elements[2].str);
  if (auto waiter = book_.handed_to(std::string(hand_off.token))) {
    waiter->handed(hand_off);
  } else {
    book_.keep(push.elements[2].str);
  }
}

void Waiters::shutdown() noexcept {
  router_.reset();
  book_.clear();
  channels_.clear();
}

}  // namespace redis_lock::detail
