// SPDX-License-Identifier: MIT
// The "redis_lock" error category.
#include <redis_lock/error.hpp>

#include <string>

namespace redis_lock {
namespace {

class Category final : public boost::system::error_category {
 public:
  // A fixed id lets codes compare equal across shared-library copies of the category.
  Category() noexcept : boost::system::error_category(0x72656469735f6c6bULL) {}
  const char* name() const noexcept override { return "redis_lock"; }
  std::string message(int ev) const override { return describe(ev); }
  char const* message(int ev, char*, std::size_t) const noexcept override { return describe(ev); }

 private:
  static const char* describe(int ev) noexcept {
    switch (static_cast<error>(ev)) {
      case error::invalid_argument:
        return "invalid argument";
      case error::timeout:
        return "command timed out";
      case error::connect_timeout:
        return "connecting to the server timed out";
      case error::connect_failed:
        return "could not connect to the server";
      case error::connection_lost:
        return "connection to the server lost";
      case error::protocol_error:
        return "the server sent an invalid RESP reply";
      case error::server_error:
        return "the server returned an error";
      case error::wrong_type:
        return "WRONGTYPE: the resource is in use as another kind of lock (a mutex, a semaphore or "
               "a read-write lock), or its key holds another type";
      case error::not_authenticated:
        return "NOAUTH Authentication required";
      case error::auth_failed:
        return "WRONGPASS invalid username-password pair or user is disabled";
      case error::no_permission:
        return "NOPERM this user has no permissions to run a lock command";
      case error::out_of_memory:
        return "OOM command not allowed when used memory > 'maxmemory'";
      case error::read_only:
        return "READONLY You can't write against a read only replica";
      case error::lock_lost:
        return "the lock was lost";
      case error::shutdown:
        return "the execution context is shutting down";
      case error::unexpected_reply:
        return "the server sent a reply of an unexpected shape";
      case error::not_replicated:
        return "too few replicas confirmed the write in time (an acquire's lease is released)";
      case error::not_acquired:
        return "the lock was held elsewhere; the work did not run";
      case error::tls_config_invalid:
        return "a TLS CA, certificate or key file cannot be read or used";
      case error::tls_handshake_failed:
        return "TLS handshake failed (untrusted certificate, host name mismatch, or client "
               "certificate refused)";
      case error::cluster_down:
        return "the Redis Cluster cannot serve this key's slot now (down, failing over or "
               "resharding)";
      case error::master_not_found:
        return "no sentinel named a reachable master for this name";
      case error::no_quorum:
        return "too few Redlock masters answered for a majority decision";
      case error::limit_mismatch:
        return "the semaphore is held or waited for with another limit";
      case error::server_unsupported:
        return "the lock server is older than redis_lock needs (Redis >= 7.0 or Valkey); "
               "last_server_error() names the version found";
      case error::server_evicts:
        return "the lock server evicts keys (maxmemory with a policy other than noeviction), so "
               "a held lease could vanish; last_server_error() names the policy found";
      case error::store_not_durable:
        return "the idempotent requests' store may lose a record (it needs appendonly yes, "
               "appendfsync always, noeviction and the replicas asked for); store_problem() "
               "names what it found";
    }
    return "unknown redis_lock error";
  }
};

}  // namespace

const char* error_name(error e) noexcept {
  switch (e) {
#define REDIS_LOCK_ERROR_NAME(x) \
  case error::x:                 \
    return #x;
    REDIS_LOCK_ERROR_NAME(invalid_argument)
    REDIS_LOCK_ERROR_NAME(timeout)
    REDIS_LOCK_ERROR_NAME(connect_timeout)
    REDIS_LOCK_ERROR_NAME(connect_failed)
    REDIS_LOCK_ERROR_NAME(connection_lost)
    REDIS_LOCK_ERROR_NAME(protocol_error)
    REDIS_LOCK_ERROR_NAME(server_error)
    REDIS_LOCK_ERROR_NAME(wrong_type)
    REDIS_LOCK_ERROR_NAME(not_authenticated)
    REDIS_LOCK_ERROR_NAME(auth_failed)
    REDIS_LOCK_ERROR_NAME(no_permission)
    REDIS_LOCK_ERROR_NAME(out_of_memory)
    REDIS_LOCK_ERROR_NAME(read_only)
    REDIS_LOCK_ERROR_NAME(lock_lost)
    REDIS_LOCK_ERROR_NAME(shutdown)
    REDIS_LOCK_ERROR_NAME(unexpected_reply)
    REDIS_LOCK_ERROR_NAME(not_replicated)
    REDIS_LOCK_ERROR_NAME(not_acquired)
    REDIS_LOCK_ERROR_NAME(tls_config_invalid)
    REDIS_LOCK_ERROR_NAME(tls_handshake_failed)
    REDIS_LOCK_ERROR_NAME(cluster_down)
    REDIS_LOCK_ERROR_NAME(master_not_found)
    REDIS_LOCK_ERROR_NAME(no_quorum)
    REDIS_LOCK_ERROR_NAME(limit_mismatch)
    REDIS_LOCK_ERROR_NAME(server_unsupported)
    REDIS_LOCK_ERROR_NAME(server_evicts)
    REDIS_LOCK_ERROR_NAME(store_not_durable)
#undef REDIS_LOCK_ERROR_NAME
  }
  return "unknown";
}

const boost::system::error_category& error_category() noexcept {
  static const Category instance;
  return instance;
}

}  // namespace redis_lock
