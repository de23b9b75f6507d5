// SPDX-License-Identifier: MIT
#include "idempotency_run.hpp"

#include <redis_lock/error.hpp>

#include <charconv>

namespace redis_lock::detail::idempotency {

Action RunFsm::start() {
  waiting_for_ = settings_.reconcile ? Step::lock : Step::look;
  return {waiting_for_};
}

Action RunFsm::tell(const Record& r, RunResult::Kind kind) {
  // A mismatch is told nothing of the other request's record: not its response, not its
  // attempt.
  if (kind == RunResult::Kind::mismatch) return finish(kind);
  result_.attempt = r.attempt;
  result_.downstream_key = r.downstream_key;
  if (kind == RunResult::Kind::replayed) {
    result_.response = StoredResponse{r.status, r.body, r.external_id};
  }
  return finish(kind);
}

Action RunFsm::finish(RunResult::Kind kind) {
  result_.kind = kind;
  if (result_.attempt == 0 && kind != RunResult::Kind::mismatch) {
    result_.attempt = record_.attempt;
    result_.downstream_key = record_.downstream_key;
  }
  waiting_for_ = Step::finish;
  return {Step::finish};
}

Action RunFsm::fail(boost::system::error_code ec) {
  error_ = ec;
  waiting_for_ = Step::finish;
  return {Step::finish};
}

Action RunFsm::looked(boost::system::error_code ec, const StoreReply& reply) {
  if (ec) return fail(ec);
  const Record& r = reply.record;
  // As the begin will: a mismatch first, then a decision or an escalation, all without the
  // lock (a replay is one round trip).
  if (r.state != State::none && r.fingerprint != fingerprint_) {
    return tell(r, RunResult::Kind::mismatch);
  }
  if (r.state == State::decided) return tell(r, RunResult::Kind::replayed);
  if (r.state == State::escalated) return tell(r, RunResult::Kind::escalated);
  waiting_for_ = Step::lock;
  return {Step::lock};
}

Action RunFsm::locked(boost::system::error_code ec, bool acquired, std::uint64_t fence) {
  if (ec) return fail(ec);
  if (!acquired) return finish(RunResult::Kind::busy);
  holding_ = true;
  fence_ = fence;
  waiting_for_ = Step::begin;
  return {Step::begin};
}

Action RunFsm::begun(boost::system::error_code ec, const StoreReply& reply) {
  const auto& w = reply.word;
  if (ec == error::not_replicated && (w == "created" || w == "restarted")) {
    return void_unconfirmed(ec, reply);
  }
  if (ec) return fail(ec);  // nothing was sent downstream (a refused begin wrote nothing)
  if (w == "mismatch") return tell(reply.record, RunResult::Kind::mismatch);
  if (w == "replay") return tell(reply.record, RunResult::Kind::replayed);
  if (w == "escalated") return tell(reply.record, RunResult::Kind::escalated);
  if (w == "none" || w == "void") return tell(reply.record, RunResult::Kind::absent);
  // A lower fencing token than the one that began the attempt: this holder is not the
  // latest (its lease lapsed while the begin was on its way).
  if (w == "stale") return fail(error::lock_lost);
  record_ = reply.record;
  store_now_ms_ = reply.now_ms;
  // The reconciler knows no fingerprint (nor payload): the record's is the one a decision
  // rebuilds a lost record with (and the one it resends).
  if (settings_.reconcile) {
    fingerprint_ = record_.fingerprint;
    payload_ = record_.payload;
  }
  if (w == "created" || w == "restarted") {
    waiting_for_ = Step::work;
    return {Step::work};
  }
  if (w == "resumed") {
    waiting_for_ = Step::resolve;
    return {Step::resolve};
  }
  return fail(error::unexpected_reply);
}

Action RunFsm::void_unconfirmed(boost::system::error_code ec, const StoreReply& reply) {
  // The master began an attempt that too few replicas confirmed: nothing is sent under it.
  // It is marked void (under this holder's fence; best effort, the replicas may miss that
  // too), so that the next request sends it at once instead of resolving it first. The run
  // fails with `ec` whatever the void says.
  record_ = reply.record;
  store_now_ms_ = reply.now_ms;
  unconfirmed_ = ec;
  waiting_for_ = Step::void_;
  return {Step::void_};
}

Action RunFsm::unknown_outcome() {
  const bool too_old = store_now_ms_ - record_.began_ms >= settings_.escalate_after_ms;
  waiting_for_ = too_old ? Step::escalate : Step::defer;
  return {waiting_for_};
}

Action RunFsm::learnt(const AttemptOutcome& outcome) {
  const bool from_work = waiting_for_ == Step::work;
  switch (outcome.kind) {
    case AttemptOutcome::Kind::decided:
      response_ = outcome.response;
      waiting_for_ = Step::decide;
      return {Step::decide};
    case AttemptOutcome::Kind::not_executed:
      // Nothing happened under this attempt's key. Its holder sends it (again) now (a
      // request; the reconciler with a resend and the request's payload), or, with nothing
      // to send (the work's own refusal, a reconciler without them), marks it void.
      if (!from_work && (!settings_.reconcile || (reconciler_sends() && settings_.resend_unsent))) {
        waiting_for_ = Step::work;
        return {Step::work};
      }
      waiting_for_ = Step::void_;
      return {Step::void_};
    case AttemptOutcome::Kind::key_spent:
      // Only a resolve knows that nothing happened under any attempt: the work's "key used"
      // says nothing of what the key's first use did.
      if (from_work) {
        waiting_for_ = Step::resolve;
        return {Step::resolve};
      }
      waiting_for_ = Step::next;
      return {Step::next};
    case AttemptOutcome::Kind::unknown:
      break;
  }
  return unknown_outcome();
}

Action RunFsm::stored(boost::system::error_code ec, const StoreReply& reply) {
  const Step what = waiting_for_;
  const auto& w = reply.word;
  switch (what) {
    case Step::decide:
      // Too few replicas confirmed what the master did: what it did still says what the
      // caller is told (a decision recorded before stands; another attempt is live).
      if (ec == error::not_replicated && w == "already") {
        result_.recorded = false;  // (its log line: too few replicas confirmed)
        return tell(reply.record, RunResult::Kind::replayed);
      }
      if (ec == error::not_replicated && w == "refused") {
        result_.retry_after = std::chrono::milliseconds(settings_.first_look_ms);
        return finish(RunResult::Kind::pending);
      }
      if (ec) {
        // The decision is known but not recorded: the caller is told it (the truth), and
        // the record stays running until a resolve records it.
        result_.response = response_;
        result_.recorded = false;
        return finish(RunResult::Kind::executed);
      }
      if (w == "recorded") {
        result_.response = response_;
        return finish(RunResult::Kind::executed);
      }
      if (w == "already") return tell(reply.record, RunResult::Kind::replayed);
      // Refused: another attempt is live (the record moved on while this one was out).
      result_.retry_after = std::chrono::milliseconds(settings_.first_look_ms);
      return finish(RunResult::Kind::pending);
    case Step::void_:
      if (unconfirmed_) return fail(unconfirmed_);
      if (ec) return fail(ec);
      if (w != "done") return fail(error::lock_lost);
      return finish(RunResult::Kind::not_executed);
    case Step::next:
      if (ec == error::not_replicated && w == "done") return void_unconfirmed(ec, reply);
      if (ec) return fail(ec);
      if (w != "done") return fail(error::lock_lost);
      record_ = reply.record;
      store_now_ms_ = reply.now_ms;
      // A reconciler that cannot send leaves the new attempt void for the next request.
      waiting_for_ = settings_.reconcile && !reconciler_sends() ? Step::void_ : Step::work;
      return {waiting_for_};
    case Step::escalate:
      if (!ec && w == "done") return finish(RunResult::Kind::escalated);
      if (!ec && w == "too_young") {
        waiting_for_ = Step::defer;
        return {Step::defer};
      }
      result_.retry_after = std::chrono::milliseconds(settings_.first_look_ms);
      return finish(RunResult::Kind::pending);
    case Step::defer: {
      std::int64_t at = 0;
      const auto& extra = reply.extra;
      if (!ec && w == "done" &&
          std::from_chars(extra.data(), extra.data() + extra.size(), at).ec == std::errc{}) {
        result_.retry_after =
            std::chrono::milliseconds(std::max<std::int64_t>(0, at - reply.now_ms));
        result_.looks = reply.record.looks;
      } else {
        result_.retry_after = std::chrono::milliseconds(settings_.first_look_ms);
      }
      return finish(RunResult::Kind::pending);
    }
    default:
      return fail(error::unexpected_reply);
  }
}

}  // namespace redis_lock::detail::idempotency
