// SPDX-License-Identifier: MIT
#include "tls_material.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace redis_lock::test {

namespace {

void run(const std::string& command) {
  const std::string quiet = command + " >/dev/null 2>&1";
  if (std::system(quiet.c_str()) != 0) throw std::runtime_error("failed: " + command);
}

// A key and a certificate signed by `ca` (self-signed when `ca` is empty).
void make_cert(const std::string& dir, const std::string& name, const std::string& subject,
               const std::string& ca, const std::string& extensions) {
  const auto base = dir + "/" + name;
  run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + base +
      ".key -out " + base + ".csr -subj " + subject);
  std::ofstream(base + ".ext") << extensions << "\n";
  if (ca.empty()) {
    run("openssl x509 -req -days 2 -in " + base + ".csr -signkey " + base + ".key -out " + base +
        ".crt -extfile " + base + ".ext");
  } else {
    run("openssl x509 -req -days 2 -in " + base + ".csr -CA " + dir + "/" + ca + ".crt -CAkey " +
        dir + "/" + ca + ".key -CAcreateserial -out " + base + ".crt -extfile " + base + ".ext");
  }
}

}  // namespace

const TlsMaterial& TlsMaterial::get() {
  static const TlsMaterial material = [] {
    char tmpl[] = "/tmp/redis_lock_tls_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    TlsMaterial m;
    m.dir = tmpl;
    const std::string ca_ext = "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign,cRLSign";
    make_cert(m.dir, "ca", "/CN=redis_lock-test-ca", "", ca_ext);
    make_cert(m.dir, "other-ca", "/CN=someone-else-ca", "", ca_ext);
    make_cert(m.dir, "server", "/CN=localhost", "ca",
              "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth");
    make_cert(m.dir, "client", "/CN=locker", "ca", "extendedKeyUsage=clientAuth");
    make_cert(m.dir, "other-client", "/CN=locker", "other-ca", "extendedKeyUsage=clientAuth");
    m.ca_cert = m.dir + "/ca.crt";
    m.server_cert = m.dir + "/server.crt";
    m.server_key = m.dir + "/server.key";
    m.client_cert = m.dir + "/client.crt";
    m.client_key = m.dir + "/client.key";
    m.other_ca_cert = m.dir + "/other-ca.crt";
    m.other_client_cert = m.dir + "/other-client.crt";
    m.other_client_key = m.dir + "/other-client.key";
    static const std::string cleanup_dir = m.dir;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(cleanup_dir, ignored);
    });
    return m;
  }();
  return material;
}

TlsRedisServer::TlsRedisServer(bool require_client_cert) {
  const auto& m = TlsMaterial::get();
  // The TLS port is chosen with the plain one, again on each start attempt.
  server = std::make_unique<RedisServer>(std::vector<std::string>{
      "--tls-port", RedisServer::free_port_arg, "--tls-cert-file", m.server_cert, "--tls-key-file",
      m.server_key, "--tls-ca-cert-file", m.ca_cert, "--tls-auth-clients",
      require_client_cert ? "yes" : "no"});
  tls_port = server->extra_port();
}

ConnectionConfig TlsRedisServer::config() const {
  ConnectionConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = tls_port;
  cfg.tls = true;
  cfg.tls_ca_file = TlsMaterial::get().ca_cert;
  return cfg;
}

}  // namespace redis_lock::test
