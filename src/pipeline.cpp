// SPDX-License-Identifier: MIT
#include "pipeline.hpp"

#include "script_call.hpp"

#include <algorithm>
#include <utility>

namespace redis_lock::detail {

void Pipeline::push(std::span<const std::string_view> command, bool functions, Callback callback,
                    std::shared_ptr<LateReplies> late, Clock::time_point deadline) {
  const auto before = bytes_.size();
  append_script_call(bytes_, command, functions);
  try {
    queue_.push_back(
        Command{std::move(callback), std::move(late), deadline, bytes_.size() - before});
  } catch (...) {
    bytes_.resize(before);  // the bytes and the commands stay in step
    throw;
  }
}

void Pipeline::push_front(std::string_view bytes, std::vector<Command> commands) {
  load_bytes_.insert(0, bytes);
  for (std::size_t i = commands.size(); i-- > 0;) loads_.push_front(std::move(commands[i]));
}

void Pipeline::restate(bool functions) {
  if (queue_.empty()) return;
  std::vector<std::size_t> sizes;
  sizes.reserve(queue_.size());
  for (const auto& c : queue_) sizes.push_back(c.bytes);
  if (restate_script_calls(bytes_, sizes, functions)) {
    for (std::size_t i = 0; i < sizes.size(); ++i) queue_[i].bytes = sizes[i];
  }
}

Pipeline::Clock::time_point Pipeline::oldest_deadline() const noexcept {
  return queue_.empty() ? never : queue_.front().deadline;
}

Pipeline::Commands Pipeline::take_queued() {
  auto taken = std::move(loads_);
  loads_.clear();
  load_bytes_.clear();
  for (auto& c : queue_) taken.push_back(std::move(c));
  queue_.clear();
  bytes_.clear();
  return taken;
}

Pipeline::Commands Pipeline::take_expired(Clock::time_point now) {
  // (The loads ahead have no deadline: they stay.)
  Commands expired;
  while (!queue_.empty() && queue_.front().deadline <= now) {
    bytes_.erase(0, queue_.front().bytes);
    expired.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return expired;
}

void Pipeline::reset(Link& link) noexcept {
  // (Cleared in place: a deque made afresh allocates, and this runs where nothing may throw.)
  link.id = 0;
  link.in_flight.clear();
  link.drain_until = never;
  link.idle_since = {};
}

Pipeline::LinkId Pipeline::open() {
  reset(current_);
  current_.id = next_id_++;
  return current_.id;
}

Pipeline::Link* Pipeline::find(LinkId link) noexcept {
  if (link == 0) return nullptr;
  if (current_.id == link) return &current_;
  const auto it = std::find_if(draining_.begin(), draining_.end(),
                               [link](const Link& l) { return l.id == link; });
  return it == draining_.end() ? nullptr : &*it;
}

const Pipeline::Link* Pipeline::find(LinkId link) const noexcept {
  return const_cast<Pipeline*>(this)->find(link);
}

bool Pipeline::live(LinkId link) const noexcept { return find(link) != nullptr; }

bool Pipeline::busy(LinkId link) const noexcept {
  const auto* l = find(link);
  return l && !l->in_flight.empty();
}

void Pipeline::expect(Command command) { current_.in_flight.push_back(std::move(command)); }

bool Pipeline::take_batch(std::string& out) {
  if (!queued() || current_.id == 0) return false;
  if (loads_.empty()) {
    out.swap(bytes_);
  } else {
    load_bytes_ += bytes_;
    out.swap(load_bytes_);
    load_bytes_.clear();
    for (auto& c : loads_) current_.in_flight.push_back(std::move(c));
    loads_.clear();
  }
  bytes_.clear();
  for (auto& c : queue_) current_.in_flight.push_back(std::move(c));
  queue_.clear();
  return true;
}

std::optional<Pipeline::Command> Pipeline::pop(LinkId link, Clock::time_point now) {
  auto* l = find(link);
  if (!l || l->in_flight.empty()) return std::nullopt;
  // (Constructed, not assigned: a handler's move assignment recurses in Boost 1.81.)
  std::optional<Command> out(std::move(l->in_flight.front()));
  l->in_flight.pop_front();
  if (l->in_flight.empty()) l->idle_since = now;
  return out;
}

Pipeline::Commands Pipeline::close_current() {
  auto rest = std::move(current_.in_flight);
  reset(current_);
  return rest;
}

void Pipeline::discard_current() noexcept { reset(current_); }

std::vector<Pipeline::Callback> Pipeline::drain_current(Clock::time_point until) {
  std::vector<Callback> timed_out;
  if (current_.id == 0) return timed_out;
  for (auto& c : current_.in_flight) {
    // Moving out leaves the callback empty, so its late handler takes the reply. (No
    // assignment: it would recurse in Boost 1.81.)
    if (c.callback) timed_out.push_back(std::move(c.callback));
  }
  current_.drain_until = until;
  draining_.push_back(std::move(current_));
  reset(current_);
  return timed_out;
}

Pipeline::Commands Pipeline::close_draining(LinkId link) {
  const auto it = std::find_if(draining_.begin(), draining_.end(),
                               [link](const Link& l) { return l.id == link; });
  if (it == draining_.end()) return {};
  auto rest = std::move(it->in_flight);
  draining_.erase(it);
  return rest;
}

Pipeline::Clock::time_point Pipeline::current_deadline() const noexcept {
  for (const auto& c : current_.in_flight) {
    if (c.deadline == never) continue;  // a handshake step
    // Deadlines grow along a link (a WAIT's longer one holds up those behind it, which
    // cannot be answered before it anyway).
    return c.deadline;
  }
  return never;
}

bool Pipeline::current_late(Clock::time_point now) const noexcept {
  const auto deadline = current_deadline();
  return deadline != never && deadline <= now;
}

std::vector<Pipeline::LinkId> Pipeline::drained(Clock::time_point now) const {
  std::vector<LinkId> past;
  for (const auto& l : draining_) {
    if (l.drain_until <= now) past.push_back(l.id);
  }
  return past;
}

Pipeline::Clock::time_point Pipeline::next_deadline() const noexcept {
  auto earliest = std::min(current_deadline(), oldest_deadline());
  for (const auto& l : draining_) earliest = std::min(earliest, l.drain_until);
  return earliest;
}

bool Pipeline::has_work() const noexcept {
  return queued() || !draining_.empty() || !current_.in_flight.empty();
}

void Pipeline::clear() noexcept {
  loads_.clear();
  load_bytes_.clear();
  queue_.clear();
  bytes_.clear();
  reset(current_);
  draining_.clear();
}

void Pipeline::fail_all(Commands& commands, boost::system::error_code ec) {
  auto failed = std::move(commands);
  commands.clear();
  for (auto& c : failed) {
    if (c.callback) {
      std::move(c.callback)(ec, Reply{});
    } else if (c.late) {
      c.late->on_late_reply(ec, Reply{});
    }
  }
}

ReplyEffects effects_of(const Reply& reply, ReplyContext context) noexcept {
  ReplyEffects e;
  if (context.subscriber && reply.type == Reply::Type::array && reply.elements.size() == 3 &&
      reply.elements[0].type == Reply::Type::string) {
    // (We never send SUNSUBSCRIBE ourselves: one is always a push.)
    const auto& kind = reply.elements[0].str;
    e.push = kind == "message" || kind == "smessage" || kind == "sunsubscribe";
    if (e.push) return e;
  }
  if (!reply.is_error() || !context.current_ready) return e;
  e.demoted = context.located && reply.str.starts_with("READONLY");
  e.check_functions = context.functions;
  return e;
}

}  // namespace redis_lock::detail
