// SPDX-License-Identifier: MIT
#include "replies.hpp"

#include <redis_lock/error.hpp>

namespace redis_lock::detail::replies {

using boost::system::error_code;

Acquire read_acquire(const Reply& reply) noexcept {
  const auto& e = reply.elements;
  const bool well_formed =
      reply.type == Reply::Type::array && (e.size() == 2 || e.size() == 3) &&
      e[0].type == Reply::Type::integer && e[1].type == Reply::Type::integer &&
      (e.size() == 2 || (e[2].type == Reply::Type::integer && e[0].integer == 0));
  if (!well_formed) return {};
  return {e[0].integer == 1 ? Acquire::Kind::granted : Acquire::Kind::held, e[1].integer,
          e.size() == 3 ? e[2].integer : 0};
}

bool may_have_granted(const Reply& reply) noexcept {
  return reply.type == Reply::Type::array && !reply.elements.empty() &&
         reply.elements[0].type == Reply::Type::integer && reply.elements[0].integer == 1;
}

Group read_group(const Reply& reply, std::size_t count) noexcept {
  if (!may_have_granted(reply)) return Group::held;
  const auto& e = reply.elements;
  if (e.size() != count + 1) return Group::malformed;
  for (std::size_t i = 1; i < e.size(); ++i) {
    if (e[i].type != Reply::Type::integer || e[i].integer <= 0) return Group::malformed;
  }
  return Group::granted;
}

Compare read_compare(const Reply& reply) noexcept {
  if (reply.type != Reply::Type::integer) return Compare::malformed;
  return reply.integer == 1 ? Compare::done : Compare::not_ours;
}

error_code replication_outcome(const Reply& reply, int wanted) noexcept {
  if (reply.type != Reply::Type::integer) return error::unexpected_reply;
  return reply.integer < wanted ? error_code(error::not_replicated) : error_code{};
}

bool may_have_run(error_code ec) noexcept {
  return ec == error::connection_lost || ec == error::protocol_error || ec == error::read_only;
}

bool is_outage(error_code ec) noexcept {
  return ec == error::connect_failed || ec == error::connect_timeout ||
         ec == error::connection_lost || ec == error::read_only;
}

Reply integer_reply(long long value) {
  Reply r;
  r.type = Reply::Type::integer;
  r.integer = value;
  return r;
}

Reply acquire_reply(long long taken, long long value) {
  Reply r;
  r.type = Reply::Type::array;
  r.elements = {integer_reply(taken), integer_reply(value)};
  return r;
}

}  // namespace redis_lock::detail::replies
