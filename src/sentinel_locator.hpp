// SPDX-License-Identifier: MIT
// Layer 3 (topology): where the sentinels say the master is.
#pragma once

#include "connection.hpp"

#include <memory>
#include <string>
#include <vector>

namespace redis_lock::detail {

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
  void ask(std::size_t tried, boost::system::error_code refused, Connection::LocateDone done);

  std::string master_;
  std::vector<std::shared_ptr<Connection>> sentinels_;
  std::size_t preferred_ = 0;  // the sentinel that answered last is asked first
};

}  // namespace redis_lock::detail
