// SPDX-License-Identifier: MIT
// rediss:// against a real redis-server with a TLS port and a CA the harness generated:
// locks, waiting and renewal over TLS; the server's certificate and name are verified; mutual
// TLS; every refusal is a distinct error within the connect deadline and leaves nothing locked.
#include "live.hpp"
#include "tls_material.hpp"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <initializer_list>

using namespace redis_lock;
using namespace redis_lock::test;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

/// One acquire that must fail; checks it failed in time and that nothing got locked.
void expect_refused(const TlsRedisServer& tls, const ConnectionConfig& cfg,
                    std::initializer_list<error> expected) {
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto resource = unique_resource();
  const auto start = Clock::now();
  const auto r = acquire_once(locks, io, resource);
  EXPECT_TRUE(std::any_of(expected.begin(), expected.end(), [&](error e) { return r.ec == e; }))
      << r.ec.message();
  EXPECT_FALSE(r.owned);
  EXPECT_LT(Clock::now() - start, cfg.connect_timeout + 500ms);
  EXPECT_EQ(tls.server->command({"EXISTS", lease_key(resource)}), "0");
}

/// Counts the renewals a majority confirmed.
struct RenewalCount final : Observer {
  std::atomic<int> confirmed{0};
  void on_lease(const LeaseEvent& e) noexcept override {
    if (e.command == LeaseCommand::renewal && e.succeeded) ++confirmed;
  }
};

}  // namespace

TEST(Tls, LocksWaitingAndRenewalOverTls) {
  TlsRedisServer tls;
  asio::io_context io;
  LockManager first(io.get_executor(), tls.config());
  LockManager second(io.get_executor(), tls.config());
  const auto resource = unique_resource();
  run_co(
      io,
      [&]() -> asio::awaitable<void> {
        // Renewed every 100 ms: a renewal may run up to ~500 ms late on a loaded machine.
        auto held = co_await first.async_acquire(
            resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 100ms},
            asio::use_awaitable);
        CO_ASSERT_TRUE(held);
        EXPECT_GT(held.fencing_token(), 0u);
        // The lease is in the server, written over the TLS port.
        EXPECT_EQ(without_record(tls.server->command({"GET", lease_key(resource)})), held.token());
        co_await sleep_for(2s);  // three ttls: renewed over TLS
        EXPECT_FALSE(held.lost());
        // A waiter over TLS (its subscriber connection too) gets the lease handed over.
        bool handed_over = false;
        const auto held_fence = held.fencing_token();  // the release below empties `held`
        second.async_acquire(resource, {.ttl = 5s, .wait = 5s}, [&](error_code ec, LockGuard g) {
          EXPECT_FALSE(ec) << ec.message();
          EXPECT_TRUE(g.owns_lock());
          EXPECT_GT(g.fencing_token(), held_fence);
          handed_over = true;
        });
        co_await sleep_for(200ms);
        EXPECT_FALSE(handed_over);
        EXPECT_TRUE(co_await held.async_release(asio::use_awaitable));
        for (int i = 0; i < 100 && !handed_over; ++i) co_await sleep_for(10ms);
        EXPECT_TRUE(handed_over);
      },
      15s);
}

TEST(Tls, ServerNameIsVerified) {
  TlsRedisServer tls;
  asio::io_context io;
  auto by_name = tls.config();
  by_name.host = "localhost";  // in the certificate's SAN, like 127.0.0.1
  {
    LockManager locks(io.get_executor(), by_name);
    const auto r = acquire_once(locks, io, unique_resource());
    EXPECT_FALSE(r.ec) << r.ec.message();
    EXPECT_TRUE(r.owned);
  }
  auto override_name = tls.config();
  override_name.tls_server_name = "localhost";
  {
    LockManager locks(io.get_executor(), override_name);
    const auto r = acquire_once(locks, io, unique_resource());
    EXPECT_FALSE(r.ec) << r.ec.message();
  }
  auto wrong = tls.config();
  wrong.tls_server_name = "redis.example.com";
  expect_refused(tls, wrong, {error::tls_handshake_failed});
}

TEST(Tls, UntrustedCertificateIsRefused) {
  TlsRedisServer tls;
  auto cfg = tls.config();
  cfg.tls_ca_file = TlsMaterial::get().other_ca_cert;
  expect_refused(tls, cfg, {error::tls_handshake_failed});
  // The system's trust store does not know our test CA either.
  cfg.tls_ca_file.clear();
  expect_refused(tls, cfg, {error::tls_handshake_failed});
  // Verification off: encrypted, but with nobody checked (what tests and nothing else want).
  cfg.tls_verify = false;
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto r = acquire_once(locks, io, unique_resource());
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.owned);
}

TEST(Tls, MutualTls) {
  TlsRedisServer tls(/*require_client_cert=*/true);
  const auto& m = TlsMaterial::get();
  auto cfg = tls.config();
  cfg.connect_timeout = 2s;
  expect_refused(tls, cfg, {error::tls_handshake_failed});  // no client certificate
  cfg.tls_cert_file = m.other_client_cert;  // signed by a CA the server does not trust
  cfg.tls_key_file = m.other_client_key;
  expect_refused(tls, cfg, {error::tls_handshake_failed});
  cfg.tls_cert_file = m.client_cert;
  cfg.tls_key_file = m.client_key;
  asio::io_context io;
  LockManager locks(io.get_executor(), cfg);
  const auto r = acquire_once(locks, io, unique_resource());
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.owned);
}

TEST(Tls, KeyThatDoesNotMatchItsCertificate) {
  TlsRedisServer tls;
  const auto& m = TlsMaterial::get();
  auto cfg = tls.config();
  cfg.tls_cert_file = m.client_cert;
  cfg.tls_key_file = m.other_client_key;
  expect_refused(tls, cfg, {error::tls_config_invalid});
}

TEST(Tls, TlsClientAgainstAPlainPortAndTheReverse) {
  TlsRedisServer tls;
  auto cfg = tls.config();
  cfg.port = tls.server->port();  // speaks plain RESP: it waits for the end of a line
  cfg.connect_timeout = 300ms;
  cfg.command_timeout = 300ms;
  expect_refused(tls, cfg, {error::connect_timeout, error::timeout});
  // A plain client on the TLS port: the server never answers in RESP.
  ConnectionConfig plain;
  plain.port = tls.tls_port;
  plain.connect_timeout = 300ms;
  expect_refused(tls, plain, {error::connect_failed, error::connect_timeout, error::timeout});
}

TEST(Tls, UrlWithTlsParameters) {
  TlsRedisServer tls;
  const auto& m = TlsMaterial::get();
  auto cfg = ConnectionConfig::from_url("rediss://localhost:" + std::to_string(tls.tls_port) +
                                        "?tls_ca_file=" + m.ca_cert);
  ASSERT_TRUE(cfg);
  asio::io_context io;
  LockManager locks(io.get_executor(), *cfg);
  const auto r = acquire_once(locks, io, unique_resource());
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.owned);
}

TEST(Tls, RedlockOverTlsFromARedissRedlockUrl) {
  // README: `rediss+redlock://` is Redlock with every master reached over TLS (the same
  // TLS settings for all). Three TLS masters; the URL carries the CA.
  std::vector<std::unique_ptr<TlsRedisServer>> masters;
  std::string hosts;
  for (int i = 0; i < 3; ++i) {
    masters.push_back(std::make_unique<TlsRedisServer>());
    hosts += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(masters.back()->tls_port);
  }
  const auto url = "rediss+redlock://" + hosts + "/3?tls_ca_file=" + TlsMaterial::get().ca_cert;
  const auto cfg = ConnectionConfig::from_url(url);
  ASSERT_TRUE(cfg) << url;
  EXPECT_EQ(cfg->topology, Topology::redlock);
  EXPECT_TRUE(cfg->tls);
  EXPECT_EQ(cfg->database, 3);
  ASSERT_EQ(cfg->nodes.size(), 3u);
  asio::io_context io;
  auto renewals = std::make_shared<RenewalCount>();
  LockManager locks(io.get_executor(), *cfg, {.observer = renewals});
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    // Renewed every 100 ms: a renewal may run up to ~500 ms late on a loaded machine.
    auto held = co_await locks.async_acquire(
        resource, {.ttl = 600ms, .auto_renew = true, .renew_every = 100ms}, asio::use_awaitable);
    CO_ASSERT_TRUE(held);
    const auto first_valid_until = held.valid_until();
    // Renewed over TLS: wait (bounded) for eight confirmed renewals. Each is sent at least
    // 75 ms after the one before (renew_every less the watchdog's 25 ms grid) and the first
    // as long after the acquire, so the eighth left after the acquire's 600 ms lease had
    // expired on every master: a master that still holds the lease below was renewed.
    for (const auto until = Clock::now() + 10s;
         renewals->confirmed.load() < 8 && !held.lost() && Clock::now() < until;) {
      co_await sleep_for(10ms);
    }
    EXPECT_GE(renewals->confirmed.load(), 8) << "renewals over TLS were not confirmed";
    EXPECT_FALSE(held.lost());
    EXPECT_GT(held.valid_until(), first_valid_until);
    int holding = 0;
    for (auto& m : masters) {
      // (On the harness's plain port, in database 3.)
      holding +=
          m->server->command({"EVAL", "redis.call('SELECT', 3) return redis.call('GET', KEYS[1])",
                              "1", lease_key(resource)}) == held.token();
    }
    EXPECT_EQ(holding, 3) << "the lease is not on every master's database 3";
    EXPECT_TRUE(co_await held.async_release(asio::use_awaitable));
  }());
  // Plain redis+redlock:// to the same TLS ports does not get through.
  auto plain = ConnectionConfig::from_url("redis+redlock://" + hosts);
  ASSERT_TRUE(plain);
  plain->connect_timeout = 300ms;
  plain->command_timeout = 300ms;
  LockManager refused(io.get_executor(), *plain);
  const auto r = acquire_once(refused, io, resource);
  EXPECT_TRUE(r.ec) << "plain text reached TLS ports";
  EXPECT_FALSE(r.owned);
}

TEST(Tls, SentinelOverTlsFromARedissSentinelUrl) {
  // README: `rediss+sentinel://` reaches the sentinels and the master they name over TLS
  // (the same TLS settings for all). A TLS master and two sentinels listening on TLS ports.
  const auto& m = TlsMaterial::get();
  TlsRedisServer master;
  const std::vector<std::string> tls_lines = {
      "tls-cert-file " + m.server_cert, "tls-key-file " + m.server_key,
      "tls-ca-cert-file " + m.ca_cert, "tls-auth-clients no",
      "tls-replication yes"};  // the sentinels talk TLS to the instances they monitor
  std::vector<std::unique_ptr<RedisServer>> sentinels;
  std::vector<std::uint16_t> sentinel_tls_ports;
  for (int i = 0; i < 2; ++i) {
    auto conf = tls_lines;
    sentinel_tls_ports.push_back(free_port());
    conf.push_back("tls-port " + std::to_string(sentinel_tls_ports.back()));
    conf.push_back("sentinel monitor tls-master 127.0.0.1 " + std::to_string(master.tls_port) +
                   " 1");
    sentinels.push_back(RedisServer::sentinel(conf));
  }
  std::string url = "rediss+sentinel://";
  for (std::size_t i = 0; i < sentinels.size(); ++i) {
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinel_tls_ports[i]);
  }
  const auto cfg = ConnectionConfig::from_url(url + "/tls-master?tls_ca_file=" + m.ca_cert);
  ASSERT_TRUE(cfg) << url;
  EXPECT_EQ(cfg->topology, Topology::sentinel);
  EXPECT_TRUE(cfg->tls);
  asio::io_context io;
  LockManager locks(io.get_executor(), *cfg);
  const auto resource = unique_resource();
  run_co(io, [&]() -> asio::awaitable<void> {
    auto held = co_await locks.async_acquire(resource, {.ttl = 5s}, asio::use_awaitable);
    CO_ASSERT_TRUE(held);
    EXPECT_EQ(without_record(master.server->command({"GET", lease_key(resource)})), held.token());
    EXPECT_TRUE(co_await held.async_release(asio::use_awaitable));
  }());
  // The sentinels' TLS ports do not speak plain text.
  auto plain = ConnectionConfig::from_url(
      "redis+sentinel://127.0.0.1:" + std::to_string(sentinel_tls_ports[0]) + "/tls-master");
  ASSERT_TRUE(plain);
  plain->connect_timeout = 300ms;
  plain->command_timeout = 300ms;
  LockManager refused(io.get_executor(), *plain);
  const auto r = acquire_once(refused, io, unique_resource());
  EXPECT_TRUE(r.ec) << "plain text reached a TLS sentinel";
  EXPECT_FALSE(r.owned);
}
