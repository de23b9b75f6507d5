// SPDX-License-Identifier: MIT
// Test harness: a throw-away PKI made with the openssl tool, and redis-servers speaking TLS.
#pragma once

#include "redis_server.hpp"

#include <memory>
#include <string>

namespace redis_lock::test {

/// Two CAs and the certificates the TLS tests need, generated once per test process into a
/// temporary directory (removed at exit).
struct TlsMaterial {
  std::string dir;
  std::string ca_cert;      ///< the CA that signed server and client certificates
  std::string server_cert;  ///< CN=localhost, SAN DNS:localhost, IP:127.0.0.1
  std::string server_key;
  std::string client_cert;  ///< CN=locker, signed by ca_cert
  std::string client_key;
  std::string other_ca_cert;      ///< a CA that signed nothing we use
  std::string other_client_cert;  ///< signed by other_ca_cert
  std::string other_client_key;

  static const TlsMaterial& get();
};

/// A redis-server with a TLS port beside its plain one (the plain one is for the harness).
struct TlsRedisServer {
  /// `require_client_cert`: the server asks for a client certificate signed by the CA.
  explicit TlsRedisServer(bool require_client_cert = false);
  std::uint16_t tls_port = 0;
  std::unique_ptr<RedisServer> server;
  /// rediss://127.0.0.1:<tls port> trusting the test CA.
  ConnectionConfig config() const;
};

}  // namespace redis_lock::test
