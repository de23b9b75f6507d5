// SPDX-License-Identifier: MIT
// Layer 5 (public API): IdempotentRequests: its calls check their arguments, then start a run
// (RunOp, idempotency_op.hpp), a reconciler's round or an operator's call on the store.
#include <redis_lock/idempotency.hpp>

#include "completion.hpp"
#include "idempotency_op.hpp"
#include "idempotency_run.hpp"
#include "idempotency_store.hpp"
#include "lock_service.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/post.hpp>

#include <charconv>
#include <mutex>

namespace redis_lock {

namespace asio = boost::asio;
using boost::system::error_code;
using detail::Done;
using detail::ensure_store;
using detail::RunOp;
using detail::start_run;
using detail::idempotency::StoreReply;

const char* run_result_name(RunResult::Kind kind) noexcept {
  switch (kind) {
    case RunResult::Kind::executed:
      return "executed";
    case RunResult::Kind::replayed:
      return "replayed";
    case RunResult::Kind::busy:
      return "busy";
    case RunResult::Kind::mismatch:
      return "mismatch";
    case RunResult::Kind::pending:
      return "pending";
    case RunResult::Kind::not_executed:
      return "not_executed";
    case RunResult::Kind::escalated:
      return "escalated";
    case RunResult::Kind::absent:
      return "absent";
  }
  return "unknown";
}

const char* request_state_name(RequestRecord::State state) noexcept {
  switch (state) {
    case RequestRecord::State::none:
      return "none";
    case RequestRecord::State::running:
      return "running";
    case RequestRecord::State::unsent:
      return "unsent";
    case RequestRecord::State::decided:
      return "decided";
    case RequestRecord::State::escalated:
      return "escalated";
  }
  return "unknown";
}

// RunOp::report (idempotency_op.hpp) is defined here: it reaches the lock manager's observer
// through the facade (lock_service.hpp), which idempotency_op.cpp may not include.
void detail::RunOp::report(error_code ec) {
  auto& locks = *shared->locks;
  if (!locks.observer() || !locks.alive()) return;
  IdempotencyEvent e{};
  e.reconciler = fsm.settings().reconcile;
  if (!ec && fsm.result().kind == RunResult::Kind::pending) {
    e.looks = fsm.result().looks;
    e.retry_after = fsm.result().retry_after;
  }
  e.result = fsm.result().kind;
  e.error = ec;
  e.attempt = ec ? fsm.attempt() : fsm.result().attempt;
  e.works = works;
  e.resolves = resolves;
  e.timed_out = timed_out;
  e.latency = std::chrono::steady_clock::now() - started;
  // On the lock manager's strand, as its own events (one call at a time per manager).
  locks.on_strand([service = shared->locks, e, key = fsm.key(),
                   resource = shared->options.lock_prefix + fsm.key()]() mutable {
    if (auto* observer = service->observer()) {
      e.key = key;
      e.resource = resource;
      observer->on_idempotency(e);
    }
  });
}

namespace {

/// A request key a call may name: 1..max_key_bytes, no '/' (downstream keys `<key>/<n>` of
/// `A-1` and `A-10` must stay apart), on a component whose options are valid.
bool valid_key(const detail::IdempotencyShared& shared, const std::string& key) {
  return shared.options_ok && !key.empty() && key.size() <= shared.options.max_key_bytes &&
         key.find('/') == std::string::npos;
}

bool valid_options(const IdempotencyOptions& o) {
  return o.lease > o.margin && o.margin.count() >= 0 && o.wait.count() >= 0 &&
         o.retention.count() >= 0 && o.first_look.count() >= 0 && o.look_cap.count() > 0 &&
         o.escalate_after.count() > 0 && o.max_key_bytes > 0 && o.shards >= 1 && o.shards <= 1024 &&
         !o.lock_prefix.empty() && o.store_replicas >= 0 &&
         (o.max_hold.count() == 0 || o.max_hold > o.margin) && o.max_hold.count() >= 0 &&
         (o.store_replicas == 0 || o.store_replication_timeout.count() > 0);
}

}  // namespace

IdempotentRequests::IdempotentRequests(LockManager& locks, LockManager& store,
                                       AttemptFunction resolve, IdempotencyOptions options)
    : shared_(std::make_shared<Shared>()) {
  auto& s = *shared_;
  s.locks = locks.service_;
  s.io = locks.executor_;
  s.alive = locks.context_alive_;
  s.store = store.service_;
  s.resolve = std::move(resolve);
  s.options = std::move(options);
  s.options_ok = valid_options(s.options) && s.locks && s.store &&
                 s.store->shape().refuses(detail::Feature::idempotency).empty();
  if (s.store) {
    s.calls.emplace(s.store, s.options.shards,
                    detail::idempotency::Replicas{s.options.store_replicas,
                                                  s.options.store_replication_timeout});
  }
}

IdempotentRequests::IdempotentRequests(LockManager& locks, AttemptFunction resolve,
                                       IdempotencyOptions options)
    : IdempotentRequests(locks, locks, std::move(resolve), std::move(options)) {}

IdempotentRequests::~IdempotentRequests() = default;

std::string IdempotentRequests::store_problem() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->store_problem;
}

void IdempotentRequests::run_impl(std::shared_ptr<Shared> shared, std::string key,
                                  std::string fingerprint, AttemptFunction work, RunHandler handler,
                                  std::optional<std::string> payload) {
  const auto& o = shared->options;
  const bool bad = !valid_key(*shared, key) || fingerprint.size() > o.max_fingerprint_bytes ||
                   !work || (payload && payload->size() > o.max_payload_bytes) ||
                   (payload && o.max_payload_bytes == 0);
  const auto io = shared->io;
  if (bad) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), RunResult{});
  }
  auto h = std::make_shared<RunHandler>(std::move(handler));
  auto op = std::make_shared<RunOp>(
      std::move(shared), std::move(key), std::move(fingerprint), std::move(work), false,
      [io, h](error_code ec, RunResult result) {
        detail::deliver(io, detail::Defer::no, std::move(*h), ec, std::move(result));
      },
      std::move(payload));
  start_run(op);
}

namespace {

/// One reconciler's round: the shards one after the other, each shard's due keys one after
/// the other (a round is background work: it need not be fast, only never overlap itself
/// on a key, which the key's lock ensures across processes anyway).
struct Round : std::enable_shared_from_this<Round> {
  std::shared_ptr<detail::IdempotencyShared> shared;
  std::function<void(error_code, ReconcileReport)> done;
  AttemptFunction resend;  // none: the round sends nothing
  ReconcileReport report;
  error_code first_error;
  unsigned shard = 0;
  std::vector<std::string> keys;
  std::size_t at = 0;

  void next_shard() {
    if (shard == shared->options.shards) return done(first_error, report);
    // Claimed for a first look's time: a key this round cannot settle (held by a request, a
    // failure) comes back after it, and lets the keys behind it through meanwhile.
    shared->calls->due(
        shard++, 256, shared->settings(true).first_look_ms,
        [self = shared_from_this()](error_code ec, detail::idempotency::DueKeys due) {
          if (ec && !self->first_error) self->first_error = ec;
          self->keys = std::move(due.keys);
          self->at = 0;
          self->next_key();
        });
  }
  void next_key() {
    if (at == keys.size()) return next_shard();
    auto op = std::make_shared<RunOp>(shared, keys[at++], std::string(), resend, true, Done{});
    // (Called from the op's own completion: `look` is alive.)
    op->done = [self = shared_from_this(), look = op.get()](error_code ec, RunResult r) {
      auto& rep = self->report;
      ++rep.looked;
      rep.sent += static_cast<std::size_t>(look->works);
      if (ec) {
        ++rep.failed;
      } else {
        switch (r.kind) {
          case RunResult::Kind::executed:
          case RunResult::Kind::replayed:
            ++rep.decided;
            break;
          case RunResult::Kind::not_executed:
          case RunResult::Kind::absent:
            ++rep.voided;
            break;
          case RunResult::Kind::pending:
            ++rep.pending;
            break;
          case RunResult::Kind::escalated:
            ++rep.escalated;
            break;
          case RunResult::Kind::busy:
          case RunResult::Kind::mismatch:
            ++rep.busy;
            break;
        }
      }
      self->next_key();
    };
    asio::post(op->strand, [op] { op->act(op->fsm.start()); });
  }
};

}  // namespace

void IdempotentRequests::escalated_impl(std::shared_ptr<Shared> shared, KeysHandler handler) {
  const auto io = shared->io;
  if (!shared->options_ok) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), std::vector<std::string>{});
  }
  struct Listing {
    std::shared_ptr<Shared> shared;
    std::shared_ptr<KeysHandler> handler;
    std::vector<std::string> keys;
    error_code first_error;
    unsigned left = 0;
  };
  auto listing = std::make_shared<Listing>();
  listing->handler = std::make_shared<KeysHandler>(std::move(handler));
  listing->left = shared->options.shards;
  listing->shared = shared;
  ensure_store(shared, [listing](error_code checked) {
    const auto& it = listing->shared;
    if (checked) {
      // (Deferred: a refusal kept from before answers from inside the initiating call.)
      return detail::deliver(it->io, detail::Defer::yes, std::move(*listing->handler), checked,
                             std::vector<std::string>{});
    }
    // Every shard at once; the answers come on the store's strand, one at a time.
    for (unsigned shard = 0; shard < it->options.shards; ++shard) {
      it->calls->escalated(shard, 1000, [listing](error_code ec, detail::idempotency::DueKeys in) {
        if (ec && !listing->first_error) listing->first_error = ec;
        for (auto& k : in.keys) listing->keys.push_back(std::move(k));
        if (--listing->left > 0) return;
        auto keys = listing->first_error ? std::vector<std::string>{} : std::move(listing->keys);
        detail::deliver(listing->shared->io, detail::Defer::no, std::move(*listing->handler),
                        listing->first_error, std::move(keys));
      });
    }
  });
}

void IdempotentRequests::settle_impl(std::shared_ptr<Shared> shared, std::string key,
                                     std::optional<StoredResponse> response,
                                     OperatorHandler handler) {
  const auto& o = shared->options;
  const auto io = shared->io;
  const bool bad =
      !valid_key(*shared, key) ||
      (response && response->body.size() + response->external_id.size() > o.max_response_bytes);
  if (bad) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), false);
  }
  auto h = std::make_shared<OperatorHandler>(std::move(handler));
  ensure_store(shared, [shared, key = std::move(key), response = std::move(response), io,
                        h](error_code checked) mutable {
    auto done = [io, h](error_code ec, StoreReply reply) {
      detail::deliver(io, detail::Defer::no, std::move(*h), ec, !ec && reply.word == "done");
    };
    if (checked) {
      // (Deferred: a refusal kept from before answers from inside the initiating call.)
      return detail::deliver(io, detail::Defer::yes, std::move(*h), checked, false);
    }
    if (response) {
      return shared->calls->settle(key, response->status, response->body, response->external_id,
                                   shared->options.retention.count(), std::move(done));
    }
    shared->calls->reopen(key, std::move(done));
  });
}

void IdempotentRequests::check_impl(std::shared_ptr<Shared> shared, CheckHandler handler) {
  const auto io = shared->io;
  if (!shared->options_ok) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument));
  }
  auto h = std::make_shared<CheckHandler>(std::move(handler));
  ensure_store(shared, [io, h](error_code ec) {
    // Deferred: a check that passed before answers from inside this call.
    detail::deliver(io, detail::Defer::yes, std::move(*h), ec);
  });
}

void IdempotentRequests::lookup_impl(std::shared_ptr<Shared> shared, std::string key,
                                     LookupHandler handler) {
  const auto io = shared->io;
  if (!valid_key(*shared, key)) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), RequestRecord{});
  }
  auto h = std::make_shared<LookupHandler>(std::move(handler));
  ensure_store(shared, [shared, key = std::move(key), io, h](error_code checked) {
    if (checked) {
      // (Deferred: a refusal kept from before answers from inside the initiating call.)
      return detail::deliver(io, detail::Defer::yes, std::move(*h), checked, RequestRecord{});
    }
    shared->calls->look(key, [io, h](error_code ec, StoreReply reply) {
      RequestRecord out;
      if (!ec) {
        using S = RequestRecord::State;
        using detail::idempotency::State;
        const auto& r = reply.record;
        switch (r.state) {
          case State::none:
            out.state = S::none;
            break;
          case State::running:
            out.state = S::running;
            break;
          case State::void_:
            out.state = S::unsent;
            break;
          case State::decided:
            out.state = S::decided;
            break;
          case State::escalated:
            out.state = S::escalated;
            break;
        }
        out.fingerprint = r.fingerprint;
        out.attempt = r.attempt;
        out.downstream_key = r.downstream_key;
        out.fencing_token = r.fence;
        out.began = std::chrono::system_clock::time_point(std::chrono::milliseconds(r.began_ms));
        out.looks = r.looks;
        out.payload_kept = r.payload.has_value();
        if (r.state == State::decided) out.response = {r.status, r.body, r.external_id};
        std::int64_t ttl = -1;
        const auto& x = reply.extra;
        if (std::from_chars(x.data(), x.data() + x.size(), ttl).ec == std::errc{} && ttl >= 0) {
          out.expires_in = std::chrono::milliseconds(ttl);
        }
      }
      detail::deliver(io, detail::Defer::no, std::move(*h), ec, std::move(out));
    });
  });
}

void IdempotentRequests::reconcile_impl(std::shared_ptr<Shared> shared, ReconcileHandler handler,
                                        AttemptFunction resend) {
  const auto io = shared->io;
  if (!shared->options_ok) {
    return detail::deliver(io, detail::Defer::yes, std::move(handler),
                           error_code(error::invalid_argument), ReconcileReport{});
  }
  auto h = std::make_shared<ReconcileHandler>(std::move(handler));
  auto round = std::make_shared<Round>();
  round->shared = std::move(shared);
  round->resend = std::move(resend);
  round->done = [io, h](error_code ec, ReconcileReport report) {
    detail::deliver(io, detail::Defer::no, std::move(*h), ec, report);
  };
  ensure_store(round->shared, [round, io, h](error_code checked) {
    // (Deferred: a refusal kept from before answers from inside the initiating call.)
    if (checked) {
      return detail::deliver(io, detail::Defer::yes, std::move(*h), checked, ReconcileReport{});
    }
    round->next_shard();
  });
}

}  // namespace redis_lock
