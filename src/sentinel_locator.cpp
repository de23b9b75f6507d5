// SPDX-License-Identifier: MIT
#include "sentinel_locator.hpp"

#include "redirect.hpp"

#include <redis_lock/error.hpp>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

SentinelLocator::SentinelLocator(Connection::Strand strand, const ConnectionConfig& config,
                                 const std::string& client_name,
                                 std::shared_ptr<asio::ssl::context> tls)
    : master_(config.sentinel_master) {
  auto nodes = config.nodes;
  if (nodes.empty()) nodes.push_back({config.host, config.port});
  for (const auto& sentinel : nodes) {
    ConnectionConfig c = config;
    c.topology = Topology::standalone;
    c.nodes.clear();
    c.host = sentinel.host;
    c.port = sentinel.port;
    c.username = config.sentinel_username;
    c.password = config.sentinel_password;
    c.sentinel_master.clear();
    c.sentinel_username.clear();
    c.sentinel_password.clear();
    c.database = 0;
    sentinels_.push_back(std::make_shared<Connection>(
        strand, std::move(c), client_name.empty() ? client_name : client_name + ":sentinel", tls));
  }
}

void SentinelLocator::locate(Connection::LocateDone done) {
  ask(0, error::master_not_found, std::move(done));
}

void SentinelLocator::ask(std::size_t tried, error_code refused, Connection::LocateDone done) {
  if (sentinels_.empty()) return;  // shut down: dropped, as Asio drops pending handlers
  if (tried >= sentinels_.size()) return done(refused, Endpoint{});
  const auto index = (preferred_ + tried) % sentinels_.size();
  const std::string_view command[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_};
  sentinels_[index]->execute(
      command, Connection::Callback([weak = weak_from_this(), tried, index, refused,
                                     done = std::move(done)](error_code ec, Reply reply) mutable {
        const auto self = weak.lock();
        if (!self) return;
        // A sentinel refusing our credentials is worth reporting if nobody answers.
        if (ec == error::auth_failed || ec == error::not_authenticated ||
            ec == error::no_permission) {
          refused = ec;
        }
        Endpoint at;
        if (!ec && reply.type == Reply::Type::array && reply.elements.size() == 2 &&
            reply.elements[0].type == Reply::Type::string &&
            reply.elements[1].type == Reply::Type::string &&
            redirect::parse_address(reply.elements[0].str + ":" + reply.elements[1].str, at) &&
            !at.host.empty()) {
          self->preferred_ = index;
          return done({}, std::move(at));
        }
        self->ask(tried + 1, refused, std::move(done));
      }));
}

void SentinelLocator::shutdown() noexcept {
  for (auto& c : sentinels_) c->shutdown();
  sentinels_.clear();
}

}  // namespace redis_lock::detail
