// SPDX-License-Identifier: MIT
#include "quorum.hpp"

#include "replies.hpp"

#include <redis_lock/error.hpp>

namespace redis_lock::detail::quorum {

Answer read_acquire(boost::system::error_code ec, const Reply& reply) {
  if (!ec && reply.is_error()) ec = error_from_reply(reply.str);
  if (ec) return {Answer::Kind::failed, ec, -1, -1};
  const auto read = replies::read_acquire(reply);
  switch (read.kind) {
    case replies::Acquire::Kind::granted:
      return {Answer::Kind::granted, {}, read.value, -1};
    case replies::Acquire::Kind::held:
      return {Answer::Kind::refused, {}, -1, read.value > 0 ? read.value : -1};
    case replies::Acquire::Kind::malformed:
      break;
  }
  return {Answer::Kind::failed, error::unexpected_reply, -1, -1};
}

Answer read_compare(boost::system::error_code ec, const Reply& reply) {
  if (!ec && reply.is_error()) ec = error_from_reply(reply.str);
  if (ec) return {Answer::Kind::failed, ec, -1, -1};
  switch (replies::read_compare(reply)) {
    case replies::Compare::done:
      return {Answer::Kind::granted, {}, -1, -1};
    case replies::Compare::not_ours:
      return {Answer::Kind::refused, {}, -1, -1};
    case replies::Compare::malformed:
      break;
  }
  return {Answer::Kind::failed, error::unexpected_reply, -1, -1};
}

Verdict decide(const Tally& t) noexcept {
  const auto needed = majority(t.masters);
  if (t.granted >= needed) return Verdict::majority;
  const auto answered = t.granted + t.refused + t.failed;
  if (t.granted + (t.masters - answered) >= needed) return Verdict::undecided;
  // No majority. If failures alone could not have prevented one, the masters that answered
  // disagree: the lease is held elsewhere (or two clients split the vote and both back
  // off), or it is no longer ours. Otherwise too many masters are unreachable to tell.
  return t.failed <= t.masters - needed ? Verdict::contention : Verdict::no_quorum;
}

Mint mint(const std::vector<long long>& fences) {
  Mint m;
  for (auto f : fences) m.token = std::max(m.token, f);
  for (std::size_t i = 0; i < fences.size(); ++i) {
    if (fences[i] < 0) continue;
    if (fences[i] == m.token) {
      ++m.at_token;
    } else {
      m.to_raise.push_back(i);
    }
  }
  return m;
}

bool raised_to(boost::system::error_code ec, const Reply& reply, long long token) noexcept {
  return !ec && reply.type == Reply::Type::integer && reply.integer >= token;
}

bool still_valid(std::chrono::steady_clock::time_point started, std::chrono::milliseconds ttl,
                 std::chrono::steady_clock::time_point now) noexcept {
  return now < started + ttl - drift_margin(ttl);
}

}  // namespace redis_lock::detail::quorum
