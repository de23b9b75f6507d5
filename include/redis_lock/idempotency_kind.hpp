// SPDX-License-Identifier: MIT
// What an idempotent request's run tells its caller (RunResult::Kind), apart from the rest of
// <redis_lock/idempotency_types.hpp>: the observer's IdempotencyEvent needs only this, and
// every file that includes <redis_lock/observer.hpp> then stays clear of the component's
// options and values (a change to them recompiles only the component's users).
#pragma once

#include <redis_lock/export.hpp>

namespace redis_lock {

/// What IdempotentRequests::async_run (or one look of the reconciler) tells its caller; also
/// spelt RunResult::Kind.
enum class RunKind {
  executed,      ///< this run learnt the decision (its work, or a resolve): `response`
  replayed,      ///< decided before: the stored `response`; nothing ran
  busy,          ///< another caller holds the key (no wait, or the wait ran out): nothing ran
  mismatch,      ///< the key is known with another fingerprint: nothing ran (HTTP 422)
  pending,       ///< the outcome is unknown: it is looked up later; ask again after
                 ///< `retry_after` (HTTP 202)
  not_executed,  ///< the attempt did not happen: nothing took effect; safe to retry
  escalated,     ///< unknown for too long: an operator decides (nothing is sent again)
  absent,        ///< the reconciler found nothing to look at (no record, or a void one)
};

/// The word for a RunResult kind ("executed", "replayed", ...): for logs and metric labels.
REDIS_LOCK_EXPORT const char* run_result_name(RunKind kind) noexcept;

}  // namespace redis_lock
