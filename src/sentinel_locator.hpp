// SPDX-License-Identifier: MIT
// Layer 3 (topology): where the sentinels say the master is.
#pragma once

#include "connection.hpp"

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace redis_lock::detail {

/// One search for the master, without I/O: the sentinels asked in turn, from the one that
/// answered last, until one names the master (tests/unit/sentinel_resolve_test.cpp).
///
/// | event                                  | action                                     |
/// |----------------------------------------|--------------------------------------------|
/// | `start`                                | ask the preferred sentinel                 |
/// | `answered` with an address             | found: that master (the sentinel preferred)|
/// | `answered` otherwise, sentinels left   | ask the next one                           |
/// | `answered` otherwise, all asked        | failed: master_not_found, or the refusal (1)|
///
/// (1) A sentinel that refused our credentials (auth_failed, not_authenticated,
/// no_permission) is worth reporting if nobody names the master: the last such refusal.
class SentinelResolve {
 public:
  struct Action {
    enum class Kind { ask, found, failed };
    Kind kind = Kind::failed;
    std::size_t sentinel = 0;           ///< ask: its index; found: who named it
    Endpoint master;                    ///< found
    boost::system::error_code error{};  ///< failed
  };
  SentinelResolve(std::size_t sentinels, std::size_t preferred) noexcept
      : count_(sentinels), preferred_(preferred) {}
  Action start() noexcept;
  /// The answer of the sentinel asked last: `ec`, or SENTINEL GET-MASTER-ADDR-BY-NAME's reply.
  Action answered(boost::system::error_code ec, const Reply& reply);
  /// The master's address in such a reply (a host and a port), or none (no such master: nil).
  static std::optional<Endpoint> read(const Reply& reply);

 private:
  Action ask() noexcept;

  std::size_t count_;
  std::size_t preferred_;
  std::size_t tried_ = 0;
  boost::system::error_code refused_;
};

/// Sentinel: asks the sentinels, in turn, where the master named `sentinel_master` is.
/// Each sentinel has one connection (its own AUTH: sentinel_username/sentinel_password),
/// idle between questions. All member functions must be called on the strand.
class SentinelLocator : public std::enable_shared_from_this<SentinelLocator> {
 public:
  SentinelLocator(Connection::Strand strand, const ConnectionConfig& config,
                  const std::string& client_name, std::shared_ptr<boost::asio::ssl::context> tls);
  /// Calls back exactly once: the master's address, or master_not_found (no sentinel
  /// named one), or the sentinels' AUTH error if they refused us.
  void locate(Connection::LocateDone done);
  void shutdown() noexcept;

 private:
  void follow(std::shared_ptr<SentinelResolve> resolve, const SentinelResolve::Action& act,
              Connection::LocateDone done);

  std::string master_;
  std::vector<std::shared_ptr<Connection>> sentinels_;
  std::size_t preferred_ = 0;  // the sentinel that answered last is asked first
};

}  // namespace redis_lock::detail
