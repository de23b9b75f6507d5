// SPDX-License-Identifier: MIT
// libFuzzer target: option validation. Arbitrary LockOptions, ConnectionConfig (with every
// topology) and ManagerOptions (numbers at every extreme, arbitrary strings) go through a real
// LockManager pointed at nothing: each acquire completes exactly once, never with a lock,
// and bad values are refused as invalid_argument before anything is sent.
#include <redis_lock/redis_lock.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Input {
  const std::uint8_t* data;
  std::size_t size;
  template <class T>
  T take() {
    T v{};
    const std::size_t n = std::min(sizeof v, size);
    std::memcpy(&v, data, n);
    data += n;
    size -= n;
    return v;
  }
  std::string text() {
    const std::size_t n = std::min<std::size_t>(take<std::uint8_t>() % 24, size);
    std::string s(reinterpret_cast<const char*>(data), n);
    data += n;
    size -= n;
    return s;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in{data, size};
  using std::chrono::milliseconds;
  redis_lock::LockOptions opts;
  opts.ttl = milliseconds(in.take<std::int64_t>());
  opts.wait = milliseconds(in.take<std::int64_t>() % 50);  // never wait long here
  opts.auto_renew = in.take<std::uint8_t>() & 1;
  opts.renew_every = milliseconds(in.take<std::int64_t>());
  opts.max_hold = milliseconds(in.take<std::int64_t>());
  opts.min_replicas = in.take<int>();
  opts.replication_timeout = milliseconds(in.take<std::int64_t>());
  redis_lock::ConnectionConfig cfg;
  cfg.port = 1;  // nothing listens: a valid request fails fast with connect_failed
  cfg.database = in.take<int>();
  cfg.connect_timeout = milliseconds(in.take<std::int16_t>());
  cfg.command_timeout = milliseconds(in.take<std::int16_t>());
  const auto flags = in.take<std::uint8_t>();
  cfg.tls = flags & 1;
  cfg.tls_verify = !(flags & 2);
  if (flags & 4) cfg.tls_server_name = in.text();
  if (flags & 8) cfg.unix_socket = "/nonexistent/" + in.text();
  // Topologies, with nodes on ports where nothing listens (a valid request fails fast).
  cfg.topology = static_cast<redis_lock::Topology>((flags >> 4) & 3);
  const auto node_count = in.take<std::uint8_t>() % 6;
  for (unsigned i = 0; i < node_count; ++i) {
    cfg.nodes.push_back({"127.0.0.1", static_cast<std::uint16_t>(1 + in.take<std::uint8_t>() % 4)});
  }
  if (flags & 64) cfg.sentinel_master = in.text();
  if (flags & 128) cfg.sentinel_password = in.text();
  redis_lock::ManagerOptions mopts;
  mopts.key_prefix = in.text();
  mopts.client_name = in.text();
  const std::string resource = in.text();

  boost::asio::io_context io;
  redis_lock::LockManager locks(io.get_executor(), cfg, mopts);
  int calls = 0;
  boost::system::error_code result;
  locks.async_acquire(resource, opts, [&](boost::system::error_code ec, redis_lock::LockGuard g) {
    ++calls;
    result = ec;
    if (g) std::abort();  // nothing listens: a lock cannot have been taken
  });
  io.run_for(std::chrono::seconds(5));
  if (calls != 1) std::abort();
  const bool obviously_bad = resource.empty() || opts.ttl.count() <= 0 ||
                             cfg.connect_timeout.count() <= 0 || cfg.command_timeout.count() <= 0;
  if (obviously_bad && result != redis_lock::error::invalid_argument) std::abort();
  return 0;
}
