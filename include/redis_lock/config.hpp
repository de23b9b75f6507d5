// SPDX-License-Identifier: MIT
// Where the lock server is (ConnectionConfig) and how a lock is taken (LockOptions).
#pragma once

#include <redis_lock/export.hpp>

#include <boost/system/result.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace redis_lock {

class Observer;  // <redis_lock/observer.hpp>

/// What kind of deployment holds the locks (see docs/safety.md for what each guarantees).
enum class Topology {
  standalone,  ///< one server: `host:port` or `unix_socket`
  cluster,     ///< Redis Cluster: `nodes` are seeds (any node will do), slots are discovered
  sentinel,    ///< master/replicas under Sentinel: `nodes` are the sentinels
  redlock,     ///< Redlock: `nodes` are N >= 3 independent masters; a majority holds the lock
};

/// One server address.
struct Endpoint {
  std::string host;           ///< name or IP address
  std::uint16_t port = 6379;  ///< TCP port
  /// Same host (as written) and port.
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

/// Where the lock server is and how to talk to it.
struct ConnectionConfig {
  std::string host = "127.0.0.1";  ///< name (resolved at each connect) or IP address
  std::uint16_t port = 6379;       ///< TCP port
  std::string unix_socket;         ///< non-empty: connect to this Unix socket instead of host:port
  std::string username;            ///< ACL user; empty with a password: `AUTH password` alone
  std::string password;            ///< sent only in AUTH; never in an error message
  int database = 0;                ///< SELECT; 0 sends nothing
  bool tls = false;  ///< rediss://: TLS over TCP, server certificate and host name verified
  std::chrono::milliseconds connect_timeout{1000};  ///< connect + handshake deadline
  std::chrono::milliseconds command_timeout{1000};  ///< per-command reply deadline

  // TLS (only with `tls = true`). Files are PEM and are read once, when the LockManager is
  // made; a file that cannot be used fails every acquire with `error::tls_config_invalid`.
  std::string tls_ca_file;      ///< CAs to trust; empty: the system's default trust store
  std::string tls_cert_file;    ///< client certificate (with tls_key_file) for mutual TLS
  std::string tls_key_file;     ///< private key of tls_cert_file (unencrypted PEM)
  std::string tls_server_name;  ///< SNI and the name verified; empty: `host`
  /// Verify the server's certificate chain and name. Turning it off makes TLS encrypt
  /// without knowing whom it talks to: for tests only.
  bool tls_verify = true;

  /// The deployment. Every node of a Cluster or Sentinel set is reached with the same
  /// credentials, database, TLS settings and timeouts as above.
  Topology topology = Topology::standalone;
  /// Cluster: seed nodes; Sentinel: the sentinels (empty: `host:port` is the only one);
  /// Redlock: the independent masters, at least 3.
  std::vector<Endpoint> nodes;
  std::string sentinel_master;    ///< Sentinel: the name the sentinels monitor the master by
  std::string sentinel_username;  ///< Sentinel: AUTH user for the sentinels (not the data nodes)
  std::string sentinel_password;  ///< Sentinel: AUTH password for the sentinels

  /// Parses `redis://[user[:password]@]host[:port][/db]`, `rediss://...` and
  /// `unix:///path.sock[?db=N]`. User and password are percent-decoded; IPv6 hosts are
  /// written in brackets. Query parameters: `db`, `connect_timeout`, `command_timeout`
  /// (milliseconds); with rediss:// also `tls_ca_file`, `tls_cert_file`, `tls_key_file`,
  /// `tls_server_name` (percent-decoded) and `tls_verify` (`true`/`false`).
  ///
  /// Several servers: `redis+cluster://[user[:password]@]h1:p1,h2:p2` (seed nodes, database
  /// 0 only) and `redis+sentinel://[user[:password]@]s1:p1,s2:p2/master-name[/db]` with
  /// query parameters `sentinel_username` and `sentinel_password`; `rediss+cluster://` and
  /// `rediss+sentinel://` with TLS; `redis+redlock://h1:p1,h2:p2,h3:p3[/db]` (and
  /// `rediss+redlock://`) for Redlock. Anything else fails with `error::invalid_argument`.
  REDIS_LOCK_EXPORT static boost::system::result<ConnectionConfig> from_url(std::string_view url);

  /// from_url, and on failure a one-line reason in `why` naming the part of the URL that is
  /// wrong (the scheme, the user name or password's percent-escapes, the host, the port, the
  /// database index, a query parameter, the unix socket path, the host list, the Sentinel
  /// master name) and what is accepted there, e.g. `port is out of range 1..65535`. The
  /// reason never quotes the URL (which may hold a password): it may be printed or logged.
  /// `why` is cleared on success.
  REDIS_LOCK_EXPORT static boost::system::result<ConnectionConfig> from_url(std::string_view url,
                                                                            std::string& why);
};

/// How one lock is taken.
struct LockOptions {
  std::chrono::milliseconds ttl{10000};  ///< lease length, > 0
  /// Keep trying this long; 0 = one attempt. Within the wait, an unreachable or failing-over
  /// server (connect_failed, connect_timeout, connection_lost, read_only) is retried with
  /// backoff; if the wait runs out during such an outage, the last of those errors is the
  /// result instead of an empty guard. (Redlock: its majority decides each attempt.)
  std::chrono::milliseconds wait{0};
  bool auto_renew = false;  ///< the manager's watchdog extends the lease while held
  std::chrono::milliseconds renew_every{0};  ///< with auto_renew: 0 = every ttl / 3
  std::chrono::milliseconds max_hold{0};  ///< with auto_renew: stop renewing after this; 0 = never
  /// After taking the lease, WAIT until this many replicas have it, for at most
  /// `replication_timeout`; fewer: the lease is released and the acquire fails with
  /// `error::not_replicated`. Renewals and async_extend wait the same way: an extension that
  /// too few replicas confirmed does not count (async_extend fails with `not_replicated`,
  /// valid_until() stays, and an auto-renewed lease is lost at valid_until()). So a
  /// failover to a replica that acknowledged cannot hand the lock to a second holder while
  /// the guard still reports it valid (WAIT is not consensus: see docs/safety.md).
  int min_replicas = 0;
  std::chrono::milliseconds replication_timeout{100};  ///< how long that WAIT may take
};

/// Settings of one LockManager that are not about the connection.
struct ManagerOptions {
  std::string key_prefix = "lock:";        ///< lease key of resource R is `<prefix>{R}`
  std::string client_name = "redis_lock";  ///< CLIENT SETNAME; empty sends nothing
  /// Stored with each mutex lease this manager takes, for LockManager::async_inspect (and
  /// `redis-lock status`) to say who holds it, e.g. `host:pid`. Empty: none. At most 128
  /// printable ASCII characters (spaces allowed). Anyone who can read the keys reads it:
  /// never put a secret in it.
  std::string holder_label{};
  /// Metrics and log hooks (see observer.hpp); null: none, at the cost of one branch.
  std::shared_ptr<Observer> observer{};
  /// Use a lock server that evicts keys (`maxmemory` above 0 with a `maxmemory-policy` other
  /// than `noeviction`: every `volatile-*` policy evicts keys with a ttl first, which every
  /// lease and queue place has, and every `allkeys-*` policy may). Such a server can drop a
  /// held lease under memory pressure and let another holder in, and nobody is told; only
  /// a store that checks fencing tokens stays safe. False (the default): each connect to a
  /// lock server reads its `INFO memory` and fails with `error::server_evicts` when it
  /// evicts. True: the connect goes on, and the policy found is reported once
  /// (`Observer::on_server_notice`, `LockManager::last_server_error()`). See docs/safety.md.
  bool accept_evicting_server = false;
  /// Call the lock scripts as a Redis Functions library: each connection's handshake asks
  /// whether the server has this build's library (and loads it where it is missing and the
  /// user may), and every script runs with `FCALL`, whose functions the server defines once
  /// per load instead of once per call (about 9% less server time per acquire and release:
  /// docs/benchmarks.md). Where the user may not load or call functions (the recommended
  /// ACL leaves `function|load` out: docs/security.md), the scripts go with `EVALSHA` as
  /// before, with nothing to configure. The server keeps each build's library (a few tens
  /// of KB) until `FUNCTION DELETE` (docs/operations.md). False: `EVALSHA` only.
  bool use_functions = true;
  /// Keep the subscriber connections (one per master: hand-off messages to this manager's
  /// waiters, an election's announcements to its observers) open after the last wait or
  /// watch ends, for the next one. False (the default): each closes as soon as nobody waits
  /// or watches, so an idle manager holds one connection per master (a fleet of them does
  /// not hold twice its size against `maxclients`), and the next wait connects and
  /// subscribes again (a handshake and a SUBSCRIBE; its waiters poll until the subscription
  /// is confirmed, then look again, so no hand-off is missed). True: a manager that waits
  /// often saves that (docs/capacity.md).
  bool keep_subscriber_connection = false;
};

}  // namespace redis_lock
