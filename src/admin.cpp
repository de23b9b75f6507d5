// SPDX-License-Identifier: MIT
#include "admin.hpp"

#include "completion.hpp"
#include "engine.hpp"
#include "replies.hpp"

#include <redis_lock/error.hpp>

#include <charconv>

namespace redis_lock::detail {

using boost::system::error_code;

namespace {

bool read_count(const Reply& r, long long& out) {
  if (r.type != Reply::Type::integer) return false;
  out = r.integer;
  return true;
}

}  // namespace

std::optional<Leader> Inspection::leader() const {
  if (info.kind != LockInfo::Kind::mutex || !info.held || info.fencing_token == 0) {
    return std::nullopt;
  }
  return Leader{value, info.fencing_token};
}

std::optional<Inspection> read_inspection(const Reply& reply) {
  if (reply.type != Reply::Type::array || reply.elements.size() != 6) return std::nullopt;
  const auto& e = reply.elements;
  long long ms = 0, waiters = 0, holders = 0, exclusive = 0;
  if (e[0].type != Reply::Type::string || e[2].type != Reply::Type::string ||
      !read_count(e[1], ms) || !read_count(e[3], waiters) || !read_count(e[4], holders) ||
      !read_count(e[5], exclusive) || waiters < 0 || holders < 0) {
    return std::nullopt;
  }
  Inspection out;
  auto& info = out.info;
  const std::string_view what = e[0].str;
  info.waiters = static_cast<std::size_t>(waiters);
  info.holders = static_cast<std::size_t>(holders);
  info.held = holders > 0;
  info.ttl_left = std::chrono::milliseconds(std::max(ms, 0LL));
  if (what == "mutex") {
    info.kind = LockInfo::Kind::mutex;
    // '<fencing token> <label>[\n<value>]' (shared.lua's record, inspect.lua leaves out its
    // lease token); none from an older client.
    const std::string_view text = e[2].str;
    const auto gap = text.find(' ');
    if (gap != std::string_view::npos) {
      std::uint64_t fence = 0;
      const auto read = std::from_chars(text.data(), text.data() + gap, fence);
      if (read.ec == std::errc{} && read.ptr == text.data() + gap) {
        info.fencing_token = fence;
        const auto data = text.substr(gap + 1);
        const auto newline = data.find('\n');
        info.holder = std::string(data.substr(0, newline));
        if (newline != std::string_view::npos) out.value = std::string(data.substr(newline + 1));
      }
    }
  } else if (what.starts_with("#S")) {
    info.kind = LockInfo::Kind::semaphore;
    std::uint32_t limit = 0;
    std::from_chars(what.data() + 2, what.data() + what.size(), limit);
    info.limit = limit;
    info.exclusive = false;
  } else if (what == "#RW") {
    info.kind = LockInfo::Kind::read_write;
    info.exclusive = exclusive != 0 && info.held;
  } else if (what != "none" && !what.empty()) {
    return std::nullopt;
  }
  return out;
}

void read_state(Engine& engine, const std::string& resource,
                std::function<void(error_code, Inspection)> done) {
  auto op = std::make_shared<AdminOp>();
  op->service = engine.shared_from_this();
  op->keys = engine.keys_of(resource);
  op->slot = engine.slot_of(op->keys.lease());
  op->sets = engine.keys_of(resource, AcquireKind::shared);
  op->set(scripts::Inspect{.lease = op->keys.lease(),
                           .info = op->keys.info(),
                           .queue_expiry = op->keys.queue_expiry(),
                           .sets_queue_expiry = op->sets.queue_expiry()});
  op->done = [self = op->service, done = std::move(done)](error_code ec, Reply reply) {
    Inspection failed;
    if (!ec && reply.is_error()) {
      ec = self->server_error(reply);
      failed.detail = std::move(reply.str);
    }
    if (ec) return done(ec, std::move(failed));
    auto read = read_inspection(reply);
    if (!read) return done(error::unexpected_reply, Inspection{});
    done({}, std::move(*read));
  };
  engine.on_strand([op = std::move(op)]() mutable {
    auto& service = *op->service;
    service.send(std::move(op));
  });
}

template <class Handler, class Value>
void CancellableCall<Handler, Value>::complete(error_code ec, Value value, std::string detail) {
  if (!handler) return;  // cancelled, or completed already
  tell(diagnostics, ec, detail);
  service->report_admin(command, std::move(resource), ec, started, std::move(detail));
  deliver(service->executor(), Defer::no, std::move(handler), ec, std::move(value));
}

void report_admin_refusal(Engine& engine, AdminCommand command, std::string resource,
                          const Violation& broken, Diagnostics* diagnostics) {
  tell(diagnostics, broken.error, broken.rule);
  engine.report_admin(command, std::move(resource), broken.error, std::chrono::steady_clock::now(),
                      std::string(broken.rule));
}

template struct CancellableCall<InspectHandler, LockInfo>;
template struct CancellableCall<BoolHandler, bool>;
template struct CancellableCall<LeaderHandler, std::optional<Leader>>;

void start_op(Engine& engine, InspectParams params, InspectHandler handler) {
  auto& resource = params.resource;
  if (!engine.alive()) return;
  if (auto broken = engine.check_admin_call(resource)) {
    report_admin_refusal(engine, AdminCommand::inspect, std::move(resource), broken,
                         params.diagnostics);
    return deliver(engine.executor(), Defer::yes, std::move(handler), broken.error, LockInfo{});
  }
  auto call = std::make_shared<CancellableCall<InspectHandler, LockInfo>>(
      engine.shared_from_this(), std::move(handler), AdminCommand::inspect, resource);
  call->diagnostics = params.diagnostics;
  install_cancellation(call->handler, call);  // in the initiating call, as for acquire
  read_state(engine, resource, [call](error_code ec, Inspection state) {
    call->complete(ec, std::move(state.info), std::move(state.detail));
  });
}

void start_op(Engine& engine, ForceReleaseParams params, BoolHandler handler) {
  auto& resource = params.resource;
  if (!engine.alive()) return;
  if (auto broken = engine.check_admin_call(resource)) {
    report_admin_refusal(engine, AdminCommand::force_release, std::move(resource), broken,
                         params.diagnostics);
    return deliver(engine.executor(), Defer::yes, std::move(handler), broken.error, false);
  }
  auto op = std::make_shared<AdminOp>();
  op->service = engine.shared_from_this();
  op->keys = engine.keys_of(resource);
  op->slot = engine.slot_of(op->keys.lease());
  op->sets = engine.keys_of(resource, AcquireKind::shared);
  op->notify = engine.notify_of(op->slot);
  op->announce = engine.announce_of(resource);
  op->set(scripts::ForceRelease{.lease = op->keys.lease(),
                                .queue = op->keys.queue(),
                                .queue_expiry = op->keys.queue_expiry(),
                                .fence = op->keys.fence(),
                                .info = op->keys.info(),
                                .sets_queue = op->sets.queue(),
                                .sets_queue_expiry = op->sets.queue_expiry(),
                                .notify = op->notify,
                                .announce = op->announce});
  auto call = std::make_shared<CancellableCall<BoolHandler, bool>>(
      engine.shared_from_this(), std::move(handler), AdminCommand::force_release, resource);
  call->diagnostics = params.diagnostics;
  install_cancellation(call->handler, call);  // in the initiating call, as for acquire
  op->done = [self = op->service, call](error_code ec, Reply reply) {
    bool released = false;
    std::string detail;
    if (!ec && reply.is_error()) {
      ec = self->server_error(reply);
      detail = std::move(reply.str);
    } else if (!ec) {
      const auto read = replies::read_compare(reply);  // 1: somebody held it, 0: nobody
      if (read == replies::Compare::malformed) ec = error::unexpected_reply;
      released = read == replies::Compare::done;
    }
    call->complete(ec, released, std::move(detail));
  };
  engine.on_strand([op = std::move(op)]() mutable {
    auto& service = *op->service;
    service.send(std::move(op));
  });
}

}  // namespace redis_lock::detail
