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

SentinelResolve::Action SentinelResolve::start() noexcept {
  tried_ = 0;
  refused_ = error::master_not_found;
  return ask();
}

SentinelResolve::Action SentinelResolve::ask() noexcept {
  if (tried_ >= count_) return {.kind = Action::Kind::failed, .master = {}, .error = refused_};
  return {.kind = Action::Kind::ask, .sentinel = (preferred_ + tried_) % count_, .master = {}};
}

SentinelResolve::Action SentinelResolve::answered(error_code ec, const Reply& reply) {
  const auto asked = (preferred_ + tried_) % count_;
  if (ec == error::auth_failed || ec == error::not_authenticated || ec == error::no_permission) {
    refused_ = ec;
  }
  if (!ec) {
    if (auto master = read(reply)) {
      return {.kind = Action::Kind::found, .sentinel = asked, .master = std::move(*master)};
    }
  }
  ++tried_;
  return ask();
}

std::optional<Endpoint> SentinelResolve::read(const Reply& reply) {
  Endpoint at;
  if (reply.type == Reply::Type::array && reply.elements.size() == 2 &&
      reply.elements[0].type == Reply::Type::string &&
      reply.elements[1].type == Reply::Type::string &&
      redirect::parse_address(reply.elements[0].str + ":" + reply.elements[1].str, at) &&
      !at.host.empty()) {
    return at;
  }
  return std::nullopt;
}

void SentinelLocator::locate(Connection::LocateDone done) {
  auto resolve = std::make_shared<SentinelResolve>(sentinels_.size(), preferred_);
  const auto first = resolve->start();
  follow(std::move(resolve), first, std::move(done));
}

void SentinelLocator::follow(std::shared_ptr<SentinelResolve> resolve,
                             const SentinelResolve::Action& act, Connection::LocateDone done) {
  if (sentinels_.empty()) return;  // shut down: dropped, as Asio drops pending handlers
  switch (act.kind) {
    case SentinelResolve::Action::Kind::found:
      preferred_ = act.sentinel;
      return done({}, act.master);
    case SentinelResolve::Action::Kind::failed:
      return done(act.error, Endpoint{});
    case SentinelResolve::Action::Kind::ask:
      break;
  }
  const std::string_view command[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_};
  sentinels_[act.sentinel]->execute(
      command, Connection::Callback([weak = weak_from_this(), resolve = std::move(resolve),
                                     done = std::move(done)](error_code ec, Reply reply) mutable {
        const auto self = weak.lock();
        if (!self) return;
        const auto next = resolve->answered(ec, reply);
        self->follow(std::move(resolve), next, std::move(done));
      }));
}

void SentinelLocator::shutdown() noexcept {
  for (auto& c : sentinels_) c->shutdown();
  sentinels_.clear();
}

}  // namespace redis_lock::detail
