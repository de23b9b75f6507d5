// SPDX-License-Identifier: MIT
#include "quorum_call.hpp"

#include "decimal.hpp"
#include "quorum.hpp"
#include "replies.hpp"
#include "script_table.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/steady_timer.hpp>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// One call fanned out to every master, until its merged reply is given (and, for an
/// acquire, until late answers are given back).
struct QuorumCall : std::enable_shared_from_this<QuorumCall> {
  // Weakly, as Router::send holds itself: a call must not keep the topology (its strand,
  // its TLS context) alive past the context's shutdown.
  std::weak_ptr<Router> router;
  std::shared_ptr<Routed> op;
  std::optional<QuorumAcquire> acquire;  // set for an acquire
  quorum::Tally tally;
  std::vector<long long> fences;  // acquire: each granting master's fencing counter, else -1
  long long pttl = -1;            // acquire: the shortest remaining lease among refusals
  error_code first_error;
  // Masters refused at connect as unfit to hold locks (older than 7.0, evicting keys), and
  // the first such refusal.
  std::size_t unfit = 0;
  error_code unfit_error;
  Clock::time_point started = Clock::now();
  bool decided = false;
  bool completed = false;  // the op has its reply (decided, and the write-back is done)
  bool succeeded = false;
  // Fencing write-back (acquire only): masters confirmed at or above the minted token.
  quorum::Mint minted;
  std::size_t raising = 0;
  std::string token_text;
  std::unique_ptr<asio::steady_timer> deadline;  // acquires whose ttl is below the timeout

  std::size_t size() const noexcept { return fences.size(); }

  void on_node_reply(std::size_t node, error_code ec, const Reply& reply);
  void decide();
  void mint();
  void raised(error_code ec, const Reply& reply);
  void finish_mint();
  /// The acquire failed: give back whatever was (or may yet be) taken, on every master
  /// where the script may have taken the lease: not where it was refused (it ran and took
  /// nothing), nor where it never left the queue (a connect failure) or was refused as a
  /// command (an error reply).
  void give_back() const {
    for (std::size_t i = 0; i < size(); ++i) {
      const auto& r = op->node_results[i];
      // (A timeout is not here: a command that timed out after it was written has a late
      // handler, which gives back what its reply says; one that timed out in the queue
      // never ran.)
      const bool may_hold =
          r.outcome == NodeOutcome::granted || r.outcome == NodeOutcome::no_answer ||
          (r.outcome == NodeOutcome::failed &&
           (replies::may_have_run(r.error) || r.error == error::unexpected_reply));
      if (may_hold) acquire->give_back(i);
    }
  }
  void complete(error_code ec, Reply reply) {
    decided = true;
    completed = true;
    if (deadline) deadline->cancel();
    for (auto& r : op->node_results) {
      if (r.outcome == NodeOutcome::no_answer) r.latency = Clock::now() - started;
    }
    op->on_reply(ec, std::move(reply));  // `op` stays: late grants are given back through it
  }
  /// A master's answer after the vote: a grant (or a reply lost with its link, which may
  /// have been one) that is not part of the lease is given back on that master. Not part of
  /// the lease: any answer to an attempt that failed, and an answer that came after its
  /// command timed out (it counted as a failure in the vote, whatever the outcome). Each
  /// attempt has its own token, so this cannot touch a later attempt's lease.
  void late_answer(std::size_t node, error_code ec, const Reply& reply, bool timed_out) const {
    if (!acquire) return;
    if (!ec && reply.is_error()) return;  // it never ran
    if (!ec && !replies::may_have_granted(reply)) return;
    if (!timed_out && !(completed && !succeeded)) return;  // part of the lease (or deciding)
    acquire->give_back(node);
  }
};

/// The reply to an acquire that timed out on one master, arriving later (or never).
struct LateAcquire final : LateReplies {
  // Strong: the call's own callbacks are gone by now (they completed with the timeout).
  // The connection holds this only until the late reply or the end of its drain period.
  std::shared_ptr<QuorumCall> call;
  std::size_t node = 0;
  void on_late_reply(error_code ec, const Reply& reply) override {
    call->late_answer(node, ec, reply, /*timed_out=*/true);
  }
};

void QuorumCall::on_node_reply(std::size_t node, error_code ec, const Reply& reply) {
  if (decided) {
    // Answered after the decision. A grant to an attempt that failed is given back. (A
    // failed link after the decision: the give-back of a failed attempt is resent until
    // it runs; a timeout: the late reply decides.)
    if (!ec) late_answer(node, ec, reply, /*timed_out=*/false);
    return;
  }
  auto& result = op->node_results[node];
  result.latency = Clock::now() - started;
  const auto answer = acquire ? quorum::read_acquire(ec, reply) : quorum::read_compare(ec, reply);
  switch (answer.kind) {
    case quorum::Answer::Kind::failed:
      result.outcome = NodeOutcome::failed;
      result.error = answer.error;
      if (!first_error) first_error = answer.error;
      if (answer.error == error::server_unsupported || answer.error == error::server_evicts) {
        if (unfit++ == 0) unfit_error = answer.error;
      }
      break;
    case quorum::Answer::Kind::granted:
      result.outcome = NodeOutcome::granted;
      if (acquire) fences[node] = answer.fence;
      break;
    case quorum::Answer::Kind::refused:
      result.outcome = NodeOutcome::refused;
      if (answer.pttl > 0 && (pttl < 0 || answer.pttl < pttl)) pttl = answer.pttl;
      break;
  }
  tally.count(answer);
  decide();
}

void QuorumCall::decide() {
  switch (quorum::decide(tally)) {
    case quorum::Verdict::undecided:
      return;
    case quorum::Verdict::majority:
      if (acquire) return mint();
      succeeded = true;
      return complete({}, replies::integer_reply(1));
    case quorum::Verdict::contention:
      if (acquire) {
        give_back();
        return complete({}, replies::acquire_reply(0, pttl));
      }
      return complete({}, replies::integer_reply(0));
    case quorum::Verdict::no_quorum:
      if (acquire) give_back();
      // Masters unfit to hold locks (too old, evicting keys) are no outage: say so (with
      // the first refusal's code), rather than "no quorum", when they are why a majority
      // was out of reach. (A minority of them is outvoted, as any failed master; each
      // node's own error is in the observer's per-node results.)
      if (unfit > 0 && tally.failed - unfit <= tally.masters - quorum::majority(tally.masters)) {
        return complete(unfit_error, Reply{});
      }
      return complete(error::no_quorum, Reply{});
  }
}

// Fencing across masters as a max-register: the token is the largest counter among the
// majority that granted; then at least a majority must hold a counter >= token before it is
// handed out, so that any later majority (which overlaps this one) mints a larger token.
// Usually every master is at the same value and this costs nothing (the acquire script
// raises a counter to the clock only when it is fresh: its Redlock mode); a master that missed
// acquisitions (it was down) or lost its counter is raised in a second round trip.
void QuorumCall::mint() {
  decided = true;  // later grants only add masters to the lease
  minted = quorum::mint(fences);
  if (minted.durable(size())) return finish_mint();
  token_text = to_decimal(minted.token);
  const auto topology = router.lock();
  if (!topology) return;  // the context shut down: dropped, as Asio drops handlers
  for (const std::size_t i : minted.to_raise) {
    ++raising;
    const scripts::RaiseFence raise{.fence = acquire->fence_key, .token = token_text};
    std::array<std::string_view, scripts::max_words<scripts::RaiseFence>> argv;
    const auto words = scripts::encode(raise, argv);
    topology->send_to(i, std::make_shared<const OwnedCommand>(std::span(argv.data(), words)),
                      scripts::RaiseFence::script.body,
                      Connection::Callback([self = shared_from_this()](error_code ec, Reply reply) {
                        --self->raising;
                        self->raised(ec, reply);
                      }));
  }
}

void QuorumCall::raised(error_code ec, const Reply& reply) {
  if (completed) return;
  if (quorum::raised_to(ec, reply, minted.token)) ++minted.at_token;
  if (!ec && reply.is_error()) ec = error_from_reply(reply.str);
  if (ec && !first_error) first_error = ec;
  finish_mint();
}

void QuorumCall::finish_mint() {
  if (minted.durable(size())) {
    // Validity: the lock is worth something only if it still has time left once the
    // majority is in (ttl - elapsed - drift, the guard's valid_until()).
    if (!quorum::still_valid(acquire->attempt_started, acquire->ttl, Clock::now())) {
      give_back();
      return complete({}, replies::acquire_reply(0, -2));
    }
    succeeded = true;
    return complete({}, replies::acquire_reply(1, minted.token));
  }
  if (raising == 0) {
    give_back();  // the token could not be made durable on a majority
    complete(first_error ? first_error : error_code(error::no_quorum), Reply{});
  }
}

}  // namespace

void fan_out(std::shared_ptr<Router> router, const Connection::Strand& strand, std::size_t masters,
             milliseconds command_timeout, std::shared_ptr<Routed> op,
             std::optional<QuorumAcquire> acquire) {
  auto call = std::make_shared<QuorumCall>();
  call->router = router;
  call->tally.masters = masters;
  call->fences.assign(masters, -1);
  op->node_results.assign(masters, NodeResult{});
  for (std::size_t i = 0; i < masters; ++i) op->node_results[i].node = i;
  if (acquire) {
    // Past the ttl (less the drift margin) no answer can make a valid lock: decide then.
    const auto usable = acquire->ttl - drift_margin(acquire->ttl);
    if (usable < command_timeout) {
      call->deadline =
          std::make_unique<asio::steady_timer>(strand, std::max(usable, milliseconds(1)));
      call->deadline->async_wait([weak = std::weak_ptr<QuorumCall>(call)](error_code ec) {
        auto c = weak.lock();
        if (ec || !c || c->decided) return;
        c->give_back();
        c->complete(error::no_quorum, Reply{});
      });
    }
  }
  call->acquire = std::move(acquire);
  call->op = std::move(op);
  const auto command = std::make_shared<const OwnedCommand>(call->op->command());
  for (std::size_t i = 0; i < masters; ++i) {
    std::shared_ptr<LateReplies> late;
    if (call->acquire) {
      auto l = std::make_shared<LateAcquire>();
      l->call = call;
      l->node = i;
      late = std::move(l);
    }
    router->send_to(i, command, call->op->script_body,
                    Connection::Callback([call, i](error_code ec, Reply reply) {
                      call->on_node_reply(i, ec, reply);
                    }),
                    std::move(late));
  }
}

}  // namespace redis_lock::detail
