// SPDX-License-Identifier: MIT
#include "router.hpp"

#include "keys.hpp"
#include "redirect.hpp"

#include <redis_lock/error.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace redis_lock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

std::string address_of(const Endpoint& e) { return e.host + ":" + std::to_string(e.port); }

}  // namespace

Router::Router(Connection::Strand strand, ConnectionConfig config, Routing routing,
               std::string client_name, std::shared_ptr<asio::ssl::context> tls)
    : strand_(std::move(strand)),
      config_(std::move(config)),
      routing_(routing),
      client_name_(std::move(client_name)),
      tls_(std::move(tls)) {
  if (many_nodes()) {
    if (cluster()) map_.emplace(min_refresh_interval);
    if (config_.nodes.empty()) config_.nodes.push_back({config_.host, config_.port});
    // (Redlock masters are distinct: check(config) refuses duplicates.)
    for (const auto& node : config_.nodes) add_node(node);
  } else {
    // One server: standalone (host:port or a Unix socket) or the master Sentinel names.
    nodes_.push_back(Node{{config_.host, config_.port}, {}, {}});
    if (routing_.located) {
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
  const auto owner = map_->owner(slot);
  if (owner != SlotMap::unknown) return static_cast<std::size_t>(owner);
  refresh();
  return map_->fallback();  // if it is not the owner, its MOVED tells us who is
}

std::size_t Router::node_at(std::string_view address, std::size_t from) {
  Endpoint endpoint;
  if (!redirect::parse_address(address, endpoint)) return from;
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
      slot->set_locator(
          [weak = std::weak_ptr<SentinelLocator>(locator_)](Connection::LocateDone done) {
            if (auto locator = weak.lock()) locator->locate(std::move(done));
          });
    }
    if (pool == Pool::commands || pool == Pool::durable) {
      slot->set_preload(preload_);
      slot->set_functions(function_library_, function_probe_);
    }
    // The server's version and eviction policy are the command connections' to check: a
    // subscriber stores nothing, and a fleet's waits each open one (Waiters closes it when
    // idle), so its handshake stays short (SETNAME, and ROLE behind sentinels).
    slot->check_server_version(pool != Pool::subscriber);
    slot->accept_evicting_server(accept_evicting_);
    slot->set_refusal_handler(on_refused_);
    slot->set_notice_handler(on_notice_);
    if (pool == Pool::subscriber && setup_) setup_(*slot, node);
  }
  return *slot;
}

namespace {

/// A command pinned to one node, with its own bytes.
// The handler is only ever move-constructed: in Boost 1.81, move-assigning an
// any_completion_handler recurses until the stack overflows.
struct Pinned final : Routed {
  explicit Pinned(Connection::Callback d) : done(std::move(d)) {}
  std::shared_ptr<const OwnedCommand> owned;
  Connection::Callback done;
  std::shared_ptr<LateReplies> late;
  void on_reply(error_code ec, Reply reply) override { std::move(done)(ec, std::move(reply)); }
  std::shared_ptr<LateReplies> late_replies() override { return late; }
};

}  // namespace

/// A map query's reply that came after its timeout (a large map read by a loaded machine,
/// a slow link): the map is still worth applying, unless a later one was meanwhile
/// (Router::take_map). Nothing else waits for it: the refresh went on without it.
class Router::LateMap final : public LateReplies {
 public:
  LateMap(std::weak_ptr<Router> router, std::size_t node, std::uint64_t query)
      : router_(std::move(router)), node_(node), query_(query) {}
  void on_late_reply(error_code ec, const Reply& reply) override {
    auto router = router_.lock();
    if (ec || !router || router->shut_down_) return;
    // (The load went on without it: nothing follows from a late map, but whatever the map
    // says to do is done.)
    if (const auto act = router->take_map(reply, node_, query_)) router->follow(*act);
  }

 private:
  std::weak_ptr<Router> router_;
  std::size_t node_;
  std::uint64_t query_;
};

void Router::send(std::shared_ptr<Routed> op, std::size_t ask_node) {
  if (shut_down_) return;  // dropped, as Asio drops pending handlers
  const bool asking = ask_node != no_node;
  if (!asking && op->pinned == no_node && cluster() && map_->before_first_map() &&
      map_->owner(op->slot) == SlotMap::unknown) {
    // No map yet: wait for the one being fetched rather than send to a seed that may answer
    // MOVED, and keep a connection open there for nothing (a fleet's managers each held one
    // on the first seed). Only for the first query: after it, whatever its outcome, the
    // seed it is.
    // (One query for them all: refresh() again while one is under way would ask for a
    // second after it.)
    if (!map_->loading()) refresh();
    if (map_->loading()) {
      awaiting_map_.push_back(std::move(op));
      return;
    }
  }
  op->node = asking ? ask_node : op->pinned != no_node ? op->pinned : node_for(op->slot);
  Connection& target = connection(op->node, op->durable ? Pool::durable : Pool::commands);
  if (asking) {
    // ASK: the slot is being moved and this key is already at the target, which serves it
    // only to a client that says ASKING first, on the same connection, for one command.
    static constexpr std::string_view asking_command[] = {"ASKING"};
    target.execute(asking_command, Connection::Callback([](error_code, Reply) {}));
  }
  auto late = op->late_replies();
  const auto command = op->command();
  target.execute(command,
                 Connection::Callback([weak = weak_from_this(), op = std::move(op)](
                                          error_code ec, Reply reply) mutable {
                   const auto self = weak.lock();
                   if (!self || self->shut_down_) return;
                   if (!ec && reply.is_error()) {
                     if (self->resent(op, reply)) return;
                   } else if (ec && self->cluster()) {
                     // The node may have failed over: look at the map again (the op itself
                     // fails; whoever retries it finds the new master).
                     self->refresh();
                   }
                   op->on_reply(ec, std::move(reply));
                 }),
                 std::move(late));
}

bool Router::resent(std::shared_ptr<Routed>& op, const Reply& reply) {
  using Kind = redirect::Step::Kind;
  const auto action = redirect::read(reply.str);
  const auto step =
      redirect::decide(action, cluster(), op->sent_body, !op->script_body.empty(), op->tries,
                       Clock::now(), config_.command_timeout, op->patience);
  switch (step.kind) {
    case Kind::final:
      return false;
    case Kind::with_body:
      // The script cache was flushed (or this is a new server): send the body, once.
      op->sent_body = true;
      op->words()[0] = "EVAL";
      op->words()[1] = op->script_body;
      send(std::move(op));
      return true;
    case Kind::ask: {
      const auto node = node_at(action.address, op->node);
      send(std::move(op), node);
      return true;
    }
    case Kind::moved:
      moved(op->slot, node_at(action.address, op->node));
      send(std::move(op));
      return true;
    case Kind::later: {
      // TRYAGAIN: a multi-key command in a slot being moved whose keys are split between the
      // two nodes for a moment. CLUSTERDOWN: the slot has no master yet (failover under
      // way). Both pass: retried for a command timeout (or the op's patience), backing off.
      if (action.kind == redirect::Action::Kind::cluster_down) refresh();
      auto timer = std::make_shared<asio::steady_timer>(strand_, step.delay);
      timer->async_wait([timer, weak = weak_from_this(), op = std::move(op)](error_code) mutable {
        if (auto self = weak.lock()) self->send(std::move(op));
      });
      return true;
    }
  }
  return false;
}

void Router::send_to(std::size_t node, std::shared_ptr<const OwnedCommand> command,
                     std::string_view script_body, Connection::Callback done,
                     std::shared_ptr<LateReplies> late) {
  auto op = std::make_shared<Pinned>(std::move(done));
  op->argc = std::min(command->args.size(), op->argv.size());
  for (std::size_t i = 0; i < op->argc; ++i) op->argv[i] = command->args[i];
  op->script_body = script_body;
  op->pinned = node;
  op->owned = std::move(command);
  op->late = std::move(late);
  send(std::move(op));
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
  map_->moved(slot, node);
  refresh();
}

void Router::refresh() {
  if (!cluster() || shut_down_) return;
  follow(map_->refresh(Clock::now(), nodes_.size()));
}

void Router::follow(const SlotMap::Action& act) {
  switch (act.kind) {
    case SlotMap::Action::Kind::none:
      break;
    case SlotMap::Action::Kind::query:
      query_slots(act.node, act.query);
      break;
    case SlotMap::Action::Kind::wait:
      if (!refresh_timer_) refresh_timer_ = std::make_unique<asio::steady_timer>(strand_);
      refresh_timer_->expires_at(act.until);
      refresh_timer_->async_wait([weak = weak_from_this()](error_code ec) {
        auto self = weak.lock();
        if (!self || ec || self->shut_down_) return;
        self->follow(self->map_->timer_over(Clock::now(), self->nodes_.size()));
      });
      break;
  }
  if (act.release) {
    // (Sent again through send: routed by the map, or to the seed if no node gave one.)
    auto waited = std::exchange(awaiting_map_, {});
    for (auto& op : waited) send(std::move(op));
  }
}

void Router::query_slots(std::size_t node, std::uint64_t query) {
  const std::string_view command[] = {"CLUSTER", "SLOTS"};
  connection(node, Pool::topology)
      .execute(
          command,
          Connection::Callback([weak = weak_from_this(), node, query](error_code ec, Reply reply) {
            auto self = weak.lock();
            if (!self || self->shut_down_) return;
            // Answered or not, this node's map connection has nothing more to do until
            // the next refresh (a MOVED, a failed node), so none is kept open for it (a
            // fleet's managers each held one on the seed master, for good; one still in
            // its handshake after a timeout too). Closed once this handler, which its
            // connection runs, has returned.
            asio::post(self->strand_, [weak, node] {
              const auto router = weak.lock();
              if (!router || router->shut_down_) return;
              router->connection(node, Pool::topology).close_if_idle();
            });
            auto taken = ec ? std::nullopt : self->take_map(reply, node, query);
            self->follow(taken ? *taken
                               : self->map_->failed(query, Clock::now(), self->nodes_.size()));
          }),
          std::make_shared<LateMap>(weak_from_this(), node, query));
}

std::optional<SlotMap::Action> Router::take_map(const Reply& reply, std::size_t from,
                                                std::uint64_t query) {
  const auto ranges = SlotMap::read(reply);
  if (!ranges) return std::nullopt;
  std::vector<SlotMap::Owned> owned;
  if (map_->fresh(query)) {  // (a stale map adds no nodes)
    owned.reserve(ranges->size());
    for (const auto& range : *ranges) {
      Endpoint master = range.master;
      // An empty host means the node we asked.
      if (master.host.empty()) master.host = nodes_[from].endpoint.host;
      owned.push_back({range.first, range.last, add_node(std::move(master))});
    }
  }
  return map_->applied(query, from, owned, Clock::now(), nodes_.size());
}

bool Router::write_now(std::size_t node, std::optional<Pool> only,
                       std::span<const std::string_view> command) noexcept {
  if (shut_down_ || node >= nodes_.size()) return false;
  for (const auto p : {Pool::commands, Pool::durable}) {
    if (only && p != *only) continue;
    const auto& c = nodes_[node].pools[static_cast<std::size_t>(p)];
    if (c && c->write_now(command)) return true;
  }
  return false;
}

void Router::shutdown() noexcept {
  shut_down_ = true;
  if (locator_) locator_->shutdown();
  refresh_timer_.reset();
  awaiting_map_.clear();
  for (auto& node : nodes_) {
    for (auto& c : node.pools) {
      if (c) c->shutdown();
      c.reset();
    }
  }
}

}  // namespace redis_lock::detail
