// SPDX-License-Identifier: MIT
#include "router.hpp"

#include "keys.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/steady_timer.hpp>

#include <charconv>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

std::string address_of(const Endpoint& e) {
  return e.host + ":" + std::to_string(e.port);
}

// "host:port" (the host may be an IPv6 address, so the port follows the last colon).
bool parse_address(std::string_view text, Endpoint& out) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  const auto port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535) {
    return false;
  }
  out.host = std::string(text.substr(0, colon));
  out.port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace

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
            parse_address(reply.elements[0].str + ":" + reply.elements[1].str, at) &&
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

Router::Router(Connection::Strand strand, ConnectionConfig config, std::string client_name,
               std::shared_ptr<asio::ssl::context> tls)
    : strand_(std::move(strand)),
      config_(std::move(config)),
      client_name_(std::move(client_name)),
      tls_(std::move(tls)) {
  if (many_nodes()) {
    if (cluster()) slots_.assign(slot_count, -1);
    if (config_.nodes.empty()) config_.nodes.push_back({config_.host, config_.port});
    // (Redlock masters are distinct: validate() refuses duplicates.)
    for (const auto& node : config_.nodes) add_node(node);
  } else {
    // One server: standalone (host:port or a Unix socket) or the master Sentinel names.
    nodes_.push_back(Node{{config_.host, config_.port}, {}, {}});
    if (config_.topology == Topology::sentinel) {
      locator_ = std::make_shared<SentinelLocator>(strand_, config_, client_name_, tls_);
    }
  }
}

Router::~Router() = default;

std::size_t Router::add_node(Endpoint endpoint) {
  auto address = address_of(endpoint);
  if (auto it = by_address_.find(address); it != by_address_.end()) return it->second;
  const auto index = nodes_.size();
  by_address_.emplace(address, index);
  nodes_.push_back(Node{std::move(endpoint), std::move(address), {}});
  return index;
}

std::size_t Router::node_for(std::uint16_t slot) {
  if (!cluster()) return 0;
  const auto owner = slots_[slot];
  if (owner >= 0) return static_cast<std::size_t>(owner);
  refresh();
  return fallback_;  // if it is not the owner, its MOVED tells us who is
}

std::size_t Router::node_at(std::string_view address, std::size_t from) {
  Endpoint endpoint;
  if (!parse_address(address, endpoint)) return from;
  if (endpoint.host.empty() && from < nodes_.size()) endpoint.host = nodes_[from].endpoint.host;
  return add_node(std::move(endpoint));
}

Connection& Router::connection(std::size_t node, Pool pool) {
  if (locator_) verify_master();
  auto& slot = nodes_.at(node).pools[static_cast<std::size_t>(pool)];
  if (!slot) {
    ConnectionConfig config = config_;
    if (many_nodes()) {
      config.host = nodes_[node].endpoint.host;
      config.port = nodes_[node].endpoint.port;
    }
    config.nodes.clear();
    std::string name = client_name_;
    if (pool == Pool::subscriber && !name.empty()) name += ":sub";
    if (pool == Pool::topology && !name.empty()) name += ":topology";
    slot = std::make_shared<Connection>(strand_, std::move(config), std::move(name), tls_);
    // A slot map has one entry per range of slots: up to 16384 after slot-by-slot resharding.
    if (pool == Pool::topology) slot->set_reply_limits(ReplyLimits::slot_map());
    if (locator_) {
      slot->set_locator([weak = std::weak_ptr<SentinelLocator>(locator_)](
                            Connection::LocateDone done) {
        if (auto locator = weak.lock()) locator->locate(std::move(done));
      });
    }
    if (pool == Pool::commands || pool == Pool::durable) slot->set_preload(preload_);
    if (pool == Pool::subscriber && setup_) setup_(*slot, node);
  }
  return *slot;
}

void Router::verify_master() {
  const auto now = Clock::now();
  if (verifying_ || now < next_verify_ || shut_down_) return;
  verifying_ = true;
  next_verify_ = now + verify_interval;
  locator_->locate([weak = weak_from_this()](error_code ec, Endpoint master) {
    const auto self = weak.lock();
    if (!self || self->shut_down_) return;
    self->verifying_ = false;
    if (ec) return;  // the sentinels cannot tell: stay (errors on the data path move us)
    for (auto& c : self->nodes_[0].pools) {
      if (!c) continue;
      const auto at = c->located();
      if (at && *at != master) c->leave_server();
    }
  });
}

void Router::for_each_subscriber(const std::function<void(std::size_t, Connection&)>& fn) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (auto& c = nodes_[i].pools[static_cast<std::size_t>(Pool::subscriber)]) fn(i, *c);
  }
}

void Router::moved(std::uint16_t slot, std::size_t node) {
  if (!cluster()) return;
  slots_[slot] = static_cast<std::int32_t>(node);
  refresh();
}

void Router::refresh() {
  if (!cluster() || shut_down_) return;
  if (refreshing_) {
    refresh_again_ = true;
    return;
  }
  const auto now = Clock::now();
  const auto due = last_refresh_ + min_refresh_interval;
  if (last_refresh_ != Clock::time_point{} && now < due) {
    // Just loaded: load again when the interval is over (a failover is in progress, or a
    // burst of redirections all report the same change).
    if (refresh_timer_armed_) return;
    if (!refresh_timer_) refresh_timer_ = std::make_unique<asio::steady_timer>(strand_);
    refresh_timer_armed_ = true;
    refresh_timer_->expires_at(due);
    refresh_timer_->async_wait([weak = weak_from_this()](error_code ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      self->refresh_timer_armed_ = false;
      self->refresh();
    });
    return;
  }
  refreshing_ = true;
  last_refresh_ = now;
  query_slots(0);
}

void Router::query_slots(std::size_t tried) {
  if (shut_down_) return;
  if (tried >= nodes_.size()) return refresh_done();  // nobody answered; traffic retries
  // Ask the nodes in turn, starting after the one asked last, so a dead node is not
  // asked first every time.
  const auto node = next_candidate_++ % nodes_.size();
  const std::string_view command[] = {"CLUSTER", "SLOTS"};
  connection(node, Pool::topology)
      .execute(command, Connection::Callback([weak = weak_from_this(), node, tried](
                                                 error_code ec, Reply reply) {
        auto self = weak.lock();
        if (!self || self->shut_down_) return;
        if (ec || !self->apply_slots(reply, node)) return self->query_slots(tried + 1);
        self->fallback_ = node;
        self->refresh_done();
      }));
}

void Router::refresh_done() {
  refreshing_ = false;
  if (refresh_again_) {
    refresh_again_ = false;
    refresh();
  }
}

bool Router::apply_slots(const Reply& reply, std::size_t from) {
  // [[start, end, [host, port, id, ...], replica...], ...]
  if (reply.type != Reply::Type::array || reply.elements.empty()) return false;
  std::vector<std::int32_t> slots(slot_count, -1);
  for (const auto& range : reply.elements) {
    if (range.type != Reply::Type::array || range.elements.size() < 3) return false;
    const auto& start = range.elements[0];
    const auto& end = range.elements[1];
    const auto& master = range.elements[2];
    if (start.type != Reply::Type::integer || end.type != Reply::Type::integer ||
        master.type != Reply::Type::array || master.elements.size() < 2 ||
        master.elements[0].type != Reply::Type::string ||
        master.elements[1].type != Reply::Type::integer) {
      return false;
    }
    if (start.integer < 0 || end.integer >= slot_count || start.integer > end.integer) {
      return false;
    }
    Endpoint endpoint{master.elements[0].str, 0};
    if (endpoint.host == "?") continue;  // endpoint unknown: its slots stay unknown
    // An empty host means the node we asked.
    if (endpoint.host.empty()) endpoint.host = nodes_[from].endpoint.host;
    if (master.elements[1].integer <= 0 || master.elements[1].integer > 65535) return false;
    endpoint.port = static_cast<std::uint16_t>(master.elements[1].integer);
    const auto node = static_cast<std::int32_t>(add_node(std::move(endpoint)));
    for (auto s = start.integer; s <= end.integer; ++s) slots[static_cast<std::size_t>(s)] = node;
  }
  slots_ = std::move(slots);
  map_loaded_ = true;
  return true;
}

void Router::shutdown() noexcept {
  shut_down_ = true;
  if (locator_) locator_->shutdown();
  refresh_timer_.reset();
  for (auto& node : nodes_) {
    for (auto& c : node.pools) {
      if (c) c->shutdown();
      c.reset();
    }
  }
}

}  // namespace redis_lock::detail
