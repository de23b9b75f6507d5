// SPDX-License-Identifier: MIT
// Error codes of redis_lock and their category, named "redis_lock".
#pragma once

#include <redis_lock/export.hpp>

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace redis_lock {

/// Everything redis_lock itself reports. Asio/system errors are mapped to these where the
/// caller must react differently (e.g. `timeout` vs `connection_lost`).
enum class error {
  invalid_argument = 1,  ///< bad input, rejected before anything is sent
  timeout,               ///< a command got no reply within `command_timeout`
  connect_timeout,       ///< connecting (and the handshake) exceeded `connect_timeout`
  connect_failed,        ///< the server could not be reached (refused, unresolvable, ...)
  connection_lost,       ///< the connection broke while a command was in flight
  protocol_error,        ///< the server sent bytes that are not valid RESP
  server_error,          ///< any other error reply (see `LockManager::last_server_error()`)
  wrong_type,            ///< WRONGTYPE: the lock key holds another type, or the resource is in
                         ///< use as another kind of lock (mutex, semaphore, read-write lock)
  not_authenticated,     ///< NOAUTH: the server requires a password and none was given
  auth_failed,           ///< WRONGPASS / AUTH rejected: bad user name or password
  no_permission,         ///< NOPERM: the ACL user may not run the lock commands
  out_of_memory,         ///< OOM: maxmemory reached with a no-eviction policy
  read_only,             ///< READONLY: connected to a replica
  lock_lost,             ///< the lease expired or passed to another holder
  shutdown,              ///< the io_context is shutting down
  unexpected_reply,      ///< a reply of a shape the library does not expect
  not_replicated,        ///< fewer replicas than LockOptions::min_replicas confirmed the lease
  not_acquired,          ///< with_lock: held elsewhere until the wait ran out (work not run)
  tls_config_invalid,    ///< a TLS CA, certificate or key file cannot be read or used
  tls_handshake_failed,  ///< TLS failed: untrusted certificate, wrong host name, refused client
  cluster_down,          ///< the Cluster cannot serve the key's slot now (CLUSTERDOWN, resharding)
  master_not_found,      ///< no sentinel named a reachable master (or it was not a master)
  no_quorum,             ///< Redlock: too few masters answered to decide (nothing is left held)
  limit_mismatch,        ///< the semaphore is held or waited for with another limit
  server_unsupported,    ///< the lock server is older than 7.0 (at connect; see
                         ///< `LockManager::last_server_error()` for the version found)
  server_evicts,         ///< the lock server may evict keys (maxmemory with a policy other
                         ///< than noeviction), so a held lease could vanish (at connect; see
                         ///< `LockManager::last_server_error()` and
                         ///< `ManagerOptions::accept_evicting_server`)
  store_not_durable,     ///< IdempotentRequests: the store may lose a record (no
                         ///< `appendonly yes`, `appendfsync always` or `noeviction`; see
                         ///< `IdempotentRequests::store_problem()`)
};

/// The category of `redis_lock::error`; its name() is "redis_lock".
REDIS_LOCK_EXPORT const boost::system::error_category& error_category() noexcept;

/// The enumerator's name ("timeout", "connection_lost", ...): a short, stable word for logs
/// and metric labels; "unknown" for a value that is not an `error`.
REDIS_LOCK_EXPORT const char* error_name(error e) noexcept;

/// Makes `error_code`s from `redis_lock::error`, so `ec == redis_lock::error::timeout` works.
inline boost::system::error_code make_error_code(error e) noexcept {
  return {static_cast<int>(e), error_category()};
}

}  // namespace redis_lock

/// \cond INTERNAL
template <>
struct boost::system::is_error_code_enum<redis_lock::error> : std::true_type {};
template <>
struct std::is_error_code_enum<redis_lock::error> : std::true_type {};
/// \endcond
