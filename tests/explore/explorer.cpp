// SPDX-License-Identifier: MIT
// The explorer's driver: today's scripts called through the table of scripts' typed calls
// and its one encoder (so there is no second copy of a calling convention), an earlier
// build's bodies called the way that build did, a subscriber that hears every hand-off
// message, the model each reply and message updates, and the search (sampling, enumeration,
// shrinking).
#include "explorer.hpp"

#include "keys.hpp"
#include "script_table.hpp"
#include "token.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace redis_lock::explore {

namespace {

namespace scripts = detail::scripts;
using State = Client::State;

constexpr std::string_view ttl_ms = "60000";  // leases and places: time passes only as events
constexpr std::string_view notify = "Px:notify:";
constexpr std::string_view phantom_id = "eeeeeeeeeeeeeeee";

struct FreeReply {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, FreeReply>;

std::string hex(std::uint32_t high, std::uint64_t low) {
  char text[33];
  std::snprintf(text, sizeof text, "%08x%024llx", high, static_cast<unsigned long long>(low));
  return text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("explorer: cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr std::array<std::string_view, 17> do_names = {
    "take",       "join",        "claim",         "give_up",      "release",       "extend",
    "walk_away",  "lapse_lease", "lapse_place",   "lose_counter", "force_release", "crowd",
    "lapse_hold", "lapse_queue", "clock_forward", "clock_back",   "take_all"};

constexpr std::array<Mutation, 1> claim_token_reuse = {Mutation{
    "acquire", "string.match(text, '^(%d+)@' .. token .. ' ')", "string.match(text, '^(%d+)@')"}};
constexpr std::array<Mutation, 1> purge_64 = {
    Mutation{"*",
             "for _ = 1, 10 do\n    local dead = redis.call('ZRANGEBYSCORE', expiry, '-inf', "
             "now, 'LIMIT', 0, 1000)",
             "for _ = 1, 1 do\n    local dead = redis.call('ZRANGEBYSCORE', expiry, '-inf', "
             "now, 'LIMIT', 0, 64)"}};

/// acquire_group.lua that looks at the leases only: a group overtakes a queue whose holder's
/// lease lapsed.
constexpr std::array<Mutation, 1> group_overtakes = {
    Mutation{"acquire_group",
             "redis.call('EXISTS', KEYS[3 * i]) == 1 or redis.call('EXISTS', KEYS[3 * i - 1]) == 1",
             "redis.call('EXISTS', KEYS[3 * i - 1]) == 1"}};

}  // namespace

std::string_view to_string(Build b) noexcept {
  switch (b) {
    case Build::signing:
      return "signing";
    case Build::folded:
      return "folded";
    case Build::b34e159:
      return "b34e159";
    case Build::p89ab635:
      return "89ab635";
    case Build::ec7000c:
      return "ec7000c";
  }
  return "?";
}

std::string_view to_string(Kind k) noexcept {
  switch (k) {
    case Kind::mutex:
      return "mutex";
    case Kind::permit:
      return "permit";
    case Kind::shared:
      return "shared";
    case Kind::exclusive:
      return "exclusive";
    case Kind::candidate:
      return "candidate";
  }
  return "?";
}

std::string to_string(const Event& e) {
  std::string out = e.client >= 0 ? "c" + std::to_string(e.client) : e.resource == 0 ? "w" : "ws";
  return out.append(".").append(do_names[static_cast<std::size_t>(e.what)]);
}

std::string to_string(std::span<const Event> events) {
  std::string out;
  for (const auto& e : events) out.append(out.empty() ? "" : " ").append(to_string(e));
  return out;
}

std::vector<Event> parse_events(std::string_view text) {
  std::vector<Event> out;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) {
    const auto dot = word.find('.');
    if (dot == std::string::npos) throw std::invalid_argument("explorer: no event in " + word);
    Event e;
    if (word[0] == 'w') {
      e.client = -1;
      e.resource = dot == 2 && word[1] == 's' ? 1 : 0;
      if (dot > 2 || (dot == 2 && word[1] != 's')) {
        throw std::invalid_argument("explorer: no world named " + word);
      }
    } else {
      e.client = std::stoi(word.substr(1, dot - 1));
    }
    const auto name = std::string_view(word).substr(dot + 1);
    const auto it = std::find(do_names.begin(), do_names.end(), name);
    if (it == do_names.end()) throw std::invalid_argument("explorer: no event " + word);
    e.what = static_cast<Do>(it - do_names.begin());
    out.push_back(e);
  }
  return out;
}

std::string holding_of(const std::string& token, int resource) {
  return resource == 0 ? token : token + "/s";
}

std::span<const Mutation> plant(std::string_view name) {
  if (name == "claim_token_reuse") return claim_token_reuse;
  if (name == "purge_64") return purge_64;
  if (name == "group_overtakes") return group_overtakes;
  if (name.empty()) return {};
  throw std::invalid_argument("explorer: no planted bug named " + std::string(name));
}

// ---------------------------------------------------------------------------------------
// A blocking connection

struct Explorer::Conn {
  redisContext* c = nullptr;
  explicit Conn(std::uint16_t port) {
    c = redisConnect("127.0.0.1", port);
    if (c == nullptr || c->err) throw std::runtime_error("explorer: cannot connect");
    const timeval limit{10, 0};
    redisSetTimeout(c, limit);
  }
  ~Conn() { redisFree(c); }
  void append(std::span<const std::string_view> words) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& w : words) {
      argv.push_back(w.data());
      lens.push_back(w.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  ReplyPtr read() {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) {
      throw std::runtime_error(std::string("explorer: the connection failed: ") + c->errstr);
    }
    return ReplyPtr(static_cast<redisReply*>(r));
  }
  ReplyPtr command(std::span<const std::string_view> words) {
    append(words);
    return read();
  }
  ReplyPtr command(std::initializer_list<std::string_view> words) {
    return command(std::span<const std::string_view>(words.begin(), words.size()));
  }
};

namespace {

std::string text_of(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
               r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : std::string();
}

/// An acquire's reply: granted (fence), or refused (place, 0 when not queued); nullopt and
/// `error` when it is neither.
struct Attempt {
  bool granted = false;
  std::uint64_t fence = 0;
  long long place = 0;
};
std::optional<Attempt> read_attempt(const redisReply* r, std::string& error) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
    error = r->type == REDIS_REPLY_ERROR ? text_of(r) : "a reply of another shape";
    return std::nullopt;
  }
  Attempt a;
  a.granted = r->element[0]->integer == 1;
  if (a.granted) a.fence = static_cast<std::uint64_t>(r->element[1]->integer);
  if (!a.granted && r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER) {
    a.place = r->element[2]->integer;
  }
  return a;
}

std::optional<long long> read_integer(const redisReply* r) {
  if (r->type != REDIS_REPLY_INTEGER) return std::nullopt;
  return r->integer;
}

/// A hand-off message: '<token>[ <fence> <place>[ <mac>]]'.
struct Message {
  std::string token;
  std::uint64_t fence = 0;
  long long place = 0;
  std::string mac, signed_by;
};
Message read_message(const std::string& text) {
  Message m;
  std::istringstream in(text);
  in >> m.token >> m.fence >> m.place >> m.mac;
  if (!m.mac.empty()) m.signed_by = text.substr(0, text.size() - m.mac.size() - 1);
  return m;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The explorer

Explorer::Explorer(std::uint16_t port, std::string plant_name)
    : port_(port), plant_(std::move(plant_name)) {
  conn_ = std::make_unique<Conn>(port);
  sub_ = std::make_unique<Conn>(port);
  const auto mutations = plant(plant_);
  std::vector<bool> applied(mutations.size(), false);
  for (const auto& entry : scripts::table()) {
    std::string body(entry.script.body);
    for (std::size_t i = 0; i < mutations.size(); ++i) {
      const auto& m = mutations[i];
      if (m.script != "*" && m.script != entry.script.name) continue;
      for (auto at = body.find(m.from); at != std::string::npos; at = body.find(m.from, at)) {
        body.replace(at, m.from.size(), m.to);
        at += m.to.size();
        applied[i] = true;
      }
    }
    auto r = conn_->command({"SCRIPT", "LOAD", body});
    if (r->type != REDIS_REPLY_STRING) throw std::runtime_error("explorer: " + text_of(r.get()));
    sha_[std::string(entry.script.name)] = text_of(r.get());
  }
  if (std::find(applied.begin(), applied.end(), false) != applied.end()) {
    throw std::runtime_error("explorer: the planted bug " + plant_ +
                             " no longer matches today's scripts");
  }
  for (const char* old : {"acquire_89ab635", "release_89ab635", "acquire_b34e159",
                          "release_b34e159", "release_ec7000c"}) {
    const auto body = read_file(std::string(REDIS_LOCK_OLD_SCRIPTS_DIR) + "/" + old + ".lua");
    auto r = conn_->command({"SCRIPT", "LOAD", body});
    if (r->type != REDIS_REPLY_STRING) throw std::runtime_error("explorer: " + text_of(r.get()));
    sha_[old] = text_of(r.get());
  }
  auto r = sub_->command({"PSUBSCRIBE", "x:notify:*", "x:leader:*"});
  if (r->type != REDIS_REPLY_ARRAY || sub_->read()->type != REDIS_REPLY_ARRAY) {
    throw std::runtime_error("explorer: PSUBSCRIBE failed");
  }
}

Explorer::~Explorer() = default;

template <class Call>
void Explorer::append_call(const Call& typed) {
  std::array<std::string_view, scripts::max_words<Call>> words{};
  const auto n = scripts::encode(typed, std::span<std::string_view>(words));
  words[1] = sha_.at(std::string(Call::script.name));  // the body we loaded (a planted bug's)
  conn_->append(std::span<const std::string_view>(words.data(), n));
}

void Explorer::append_call(const scripts::AcquireGroup& typed) {
  std::vector<std::string_view> words;  // its encoder takes any number of resources
  scripts::encode(typed, words);
  words[1] = sha_.at(std::string(scripts::AcquireGroup::script.name));
  conn_->append(words);
}

namespace {

/// The other resource: the first name "s<n>" whose keys hash to r's slot (so that the two
/// share a fencing counter and a group takes both at once, as for a user's hash tag).
std::string other_name() {
  const auto slot = detail::key_slot(detail::make_keys("x:", "r").lease());
  for (int n = 0;; ++n) {
    const std::string name = "s" + std::to_string(n);
    if (detail::key_slot(detail::make_keys("x:", name).lease()) == slot) return name;
  }
}
const std::string& name_of(int resource) {
  static const std::array<std::string, 2> names = {"r", other_name()};
  return names[static_cast<std::size_t>(resource)];
}
const detail::ResourceKeys& keys_of(int resource) {
  static const std::array<detail::ResourceKeys, 2> k = {detail::make_keys("x:", name_of(0)),
                                                        detail::make_keys("x:", name_of(1))};
  return k[static_cast<std::size_t>(resource)];
}
const detail::ResourceKeys& set_keys_of(int resource) {
  static const std::array<detail::ResourceKeys, 2> k = {detail::make_keys("x:", name_of(0), true),
                                                        detail::make_keys("x:", name_of(1), true)};
  return k[static_cast<std::size_t>(resource)];
}

/// A mutex's attempt (or an election candidate's, with `announce`) as today's build sends it.
scripts::Acquire mutex_attempt(const detail::ResourceKeys& k, std::string_view token,
                               std::string_view suffix, scripts::Acquire::Mode mode,
                               scripts::Optional announce) {
  return {.lease = k.lease(),
          .fence = k.fence(),
          .queue = k.queue(),
          .queue_expiry = k.queue_expiry(),
          .info = scripts::Optional(k.info()),
          .token = token,
          .ttl_ms = ttl_ms,
          .mode = mode,
          .place_ms = ttl_ms,
          .member_suffix = suffix,
          .announce = announce};
}

bool is_set(const Client& c) {
  return c.kind == Kind::permit || c.kind == Kind::shared || c.kind == Kind::exclusive;
}
bool candidate(const Client& c) { return c.kind == Kind::candidate; }
constexpr std::string_view announce = "Px:leader:r";  // the election's observers' channel
char letter_of(const Client& c) { return c.kind == Kind::exclusive ? 'x' : 's'; }

/// A client's member suffix, as its build writes it (waiters.cpp, append_member_suffix); a
/// lease set's holder names itself by manager id and mode alone (`queues` false).
std::string suffix_of(const Client& c, bool queues) {
  std::string s = c.id;
  if (is_set(c)) {
    s += letter_of(c);
    return queues ? s.append(ttl_ms) : s;
  }
  if (candidate(c)) return s.append("f").append(ttl_ms);  // a candidate queues with no secret
  switch (c.build) {
    case Build::signing:
      s += queues ? "g" + c.secret : "f";
      break;
    case Build::folded:
    case Build::b34e159:
      s += 'f';
      break;
    case Build::p89ab635:
    case Build::ec7000c:
      break;
  }
  return s.append(ttl_ms);
}

bool today(Build b) { return b == Build::signing || b == Build::folded; }

}  // namespace

std::string Explorer::next_token(int client) {
  return hex(0xc0de0000u + static_cast<std::uint32_t>(client), ++attempts_);
}

void Explorer::reset(const Setup& setup) {
  setup_ = setup;
  world_ = World{};
  world_.limit = setup.limit;
  pending_announce_.clear();
  pending_end_.clear();
  if (clock_) clock_->store(0);
  crowd_done_ = false;
  for (std::size_t i = 0; i < setup.builds.size(); ++i) {
    Client c;
    c.build = setup.builds[i];
    if (i < setup.kinds.size()) c.kind = setup.kinds[i];
    if (i < setup.resources.size()) c.resource = setup.resources[i];
    char id[17];
    std::snprintf(id, sizeof id, "%016llx", 0xa11ce00ULL + i);
    c.id = id;
    world_.clients.push_back(c);
    if (c.build == Build::ec7000c) world_.fairness_promised = false;
  }
  for (const auto& [first, second] : setup.groups) {
    world_.clients.at(static_cast<std::size_t>(first)).partner = second;
    world_.clients.at(static_cast<std::size_t>(first)).resource = 0;
    world_.clients.at(static_cast<std::size_t>(second)).resource = 1;
  }
  used_ = 1;
  for (const auto& c : world_.clients) {
    if (c.resource != 0 && c.kind != Kind::mutex) {
      throw std::invalid_argument("explorer: lease sets and candidates work on r");
    }
    used_ = std::max(used_, c.resource + 1);
  }
  conn_->command({"FLUSHALL"});
  // Whatever an earlier sequence published is read and dropped.
  sub_->append(std::array<std::string_view, 1>{"PING"});
  for (;;) {
    auto r = sub_->read();
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && text_of(r->element[0]) == "pong") {
      break;
    }
  }
  world_.keys = {};
  ++sequences_;
}

std::vector<Event> Explorer::enabled() const {
  std::vector<Event> out;
  const auto& cs = world_.clients;
  for (int i = 0; i < static_cast<int>(cs.size()); ++i) {
    // A 600 ms bare lease (an earlier build's hand-off) is claimed at once: time passes
    // only as events, and this one would pass by itself.
    if (cs[i].state == State::nudged && cs[i].handed_short) return {Event{Do::claim, i}};
  }
  for (int i = 0; i < static_cast<int>(cs.size()); ++i) {
    switch (cs[i].state) {
      case State::idle:
        out.insert(out.end(), {Event{Do::take, i}, Event{Do::join, i}});
        if (cs[i].partner >= 0 &&
            cs[static_cast<std::size_t>(cs[i].partner)].state == State::idle) {
          out.push_back(Event{Do::take_all, i});
        }
        break;
      case State::waiting:
        out.insert(out.end(), {Event{Do::join, i}, Event{Do::give_up, i}});
        if (cs[i].place_live) out.push_back(Event{Do::lapse_place, i});
        break;
      case State::nudged:
        out.insert(out.end(), {Event{Do::claim, i}, Event{Do::walk_away, i}});
        if (is_set(cs[i]) && cs[i].handed_live) out.push_back(Event{Do::lapse_hold, i});
        break;
      case State::holding:
        out.insert(out.end(), {Event{Do::release, i}, Event{Do::extend, i}});
        if (is_set(cs[i]) && !cs[i].ended) out.push_back(Event{Do::lapse_hold, i});
        break;
    }
  }
  for (int r = 0; r < used_; ++r) {
    const auto& keys = world_.keys[static_cast<std::size_t>(r)];
    if (keys.lease) {
      out.insert(out.end(), {Event{Do::lapse_lease, -1, r}, Event{Do::force_release, -1, r}});
      if (r == 0 && !crowd_done_ && setup_.crowd > 0) out.push_back(Event{Do::crowd, -1});
    } else if (keys.set) {
      out.push_back(Event{Do::force_release, -1, r});
    }
    // A queue whose waiters all left or died lives until its latest place's end.
    bool live_queue = false;
    for (const auto& c : cs) {
      live_queue = live_queue || (c.resource == r && c.state == State::waiting && c.place_live);
    }
    if (!live_queue && (!keys.queue.empty() || !keys.set_queue.empty())) {
      out.push_back(Event{Do::lapse_queue, -1, r});
    }
  }
  if (world_.max_fence > 0) out.push_back(Event{Do::lose_counter, -1});
  if (clock_ && setup_.clock_steps) {
    out.insert(out.end(), {Event{Do::clock_forward, -1}, Event{Do::clock_back, -1}});
  }
  return out;
}

namespace {

long long server_now(const redisReply* time) {
  return std::stoll(text_of(time->element[0])) * 1000 +
         std::stoll(text_of(time->element[1])) / 1000;
}

}  // namespace

void Explorer::expire_as_time_would(int resource, std::string_view key, double old_end) {
  auto expiry = read_integer(conn_->command({"PEXPIRETIME", key}).get());
  if (!expiry || *expiry < 0 || static_cast<double>(*expiry) > old_end + 5) return;
  const long long now = server_now(conn_->command({"TIME"}).get());
  const auto& k = keys_of(resource);
  const auto& s = set_keys_of(resource);
  const bool mutex_queue = key == k.queue() || key == k.queue_expiry();
  if (mutex_queue || key == s.queue() || key == s.queue_expiry()) {
    // A queue lives as long as its latest place.
    const auto places = mutex_queue ? k.queue_expiry() : s.queue_expiry();
    const auto queue = mutex_queue ? k.queue() : s.queue();
    auto last = conn_->command({"ZRANGE", places, "-1", "-1", "WITHSCORES"});
    const double latest = last->type == REDIS_REPLY_ARRAY && last->elements == 2
                              ? std::stod(text_of(last->element[1]))
                              : 0;
    if (latest <= static_cast<double>(now)) {
      conn_->command({"DEL", queue, places});
    } else {
      const auto at = std::to_string(static_cast<long long>(latest));
      conn_->command({"PEXPIREAT", queue, at});
      conn_->command({"PEXPIREAT", places, at});
    }
    // A lease set's key lives as long as its queue too.
    if (!mutex_queue) expire_as_time_would(resource, k.lease(), static_cast<double>(*expiry));
    return;
  }
  // A lease set: as long as its latest live hold and its queue.
  auto last =
      conn_->command({"ZREVRANGEBYSCORE", key, "(+inf", "-inf", "WITHSCORES", "LIMIT", "0", "1"});
  double latest = last->type == REDIS_REPLY_ARRAY && last->elements == 2
                      ? std::stod(text_of(last->element[1]))
                      : 0;
  const auto queue_end = read_integer(conn_->command({"PEXPIRETIME", s.queue()}).get());
  if (queue_end && *queue_end > 0) latest = std::max(latest, static_cast<double>(*queue_end));
  if (latest <= static_cast<double>(now)) {
    conn_->command({"DEL", key});
  } else {
    conn_->command({"PEXPIREAT", key, std::to_string(static_cast<long long>(latest))});
  }
}

std::optional<Violation> Explorer::step(const Event& e) {
  ++steps_;
  if (e.what == Do::take_all) return take_all(e);
  auto& w = world_;
  // The resource the event is on: its client's, or the world event's.
  const int resource = e.client >= 0 ? w.clients[e.client].resource : e.resource;
  std::vector<int> live_waiters;
  for (int i = 0; i < static_cast<int>(w.clients.size()); ++i) {
    const auto& c = w.clients[i];
    if (c.resource == resource && c.state == State::waiting && c.place_live) {
      live_waiters.push_back(i);
    }
  }
  std::sort(live_waiters.begin(), live_waiters.end(),
            [&](int a, int b) { return w.clients[a].joined < w.clients[b].joined; });
  const auto& k = keys_of(resource);
  const auto& sk = set_keys_of(resource);
  auto fail = [&](std::string invariant, std::string detail) {
    return Violation{std::move(invariant), std::move(detail)};
  };

  // Calls one of today's scripts through its typed call (the sha of the body we loaded).
  auto call = [&](const auto& typed) {
    append_call(typed);
    return conn_->read();
  };
  // An acquire in `mode` ('0', '1', '2') as client `c`'s build and kind send it.
  auto attempt = [&](Client& c, char mode) {
    const bool queues = mode != '0';
    const std::string suffix = suffix_of(c, queues || is_set(c));
    if (is_set(c)) {
      const std::string marker =
          c.kind == Kind::permit ? "#S" + std::to_string(w.limit) : std::string("#RW");
      return call(scripts::AcquireSet{.lease = k.lease(),
                                      .fence = k.fence(),
                                      .queue = sk.queue(),
                                      .queue_expiry = sk.queue_expiry(),
                                      .mutex_queue = k.queue(),
                                      .token = c.token,
                                      .ttl_ms = ttl_ms,
                                      .joins = queues,
                                      .place_ms = ttl_ms,
                                      .member_suffix = suffix,
                                      .marker = marker});
    }
    if (today(c.build)) {
      const auto m = mode == '0'   ? scripts::Acquire::Mode::alone
                     : mode == '1' ? scripts::Acquire::Mode::queue
                                   : scripts::Acquire::Mode::claim;
      return call(mutex_attempt(k, c.token, suffix, m,
                                candidate(c) ? scripts::Optional(announce) : scripts::Optional()));
    }
    // The builds before: '<mode><place ms> <member suffix>' in one argument, no claim mode.
    const std::string how =
        std::string(1, mode == '0' ? '0' : '1') + std::string(ttl_ms) + " " + suffix;
    const auto& sha = sha_.at(c.build == Build::b34e159 ? "acquire_b34e159" : "acquire_89ab635");
    return conn_->command({"EVALSHA", sha, "5", k.lease(), k.fence(), k.queue(), k.queue_expiry(),
                           k.info(), c.token, ttl_ms, how});
  };
  auto release = [&](Client& c) {
    const std::string suffix = suffix_of(c, c.state != State::holding);
    if (is_set(c)) {
      return call(scripts::ReleaseSet{.lease = k.lease(),
                                      .queue = sk.queue(),
                                      .queue_expiry = sk.queue_expiry(),
                                      .token = c.token,
                                      .member_suffix = suffix,
                                      .notify = notify});
    }
    if (today(c.build)) {
      return call(scripts::Release{
          .lease = k.lease(),
          .queue = k.queue(),
          .queue_expiry = k.queue_expiry(),
          .fence = k.fence(),
          .info = scripts::Optional(k.info()),
          .token = c.token,
          .member_suffix = suffix,
          .notify = notify,
          .announce = candidate(c) ? scripts::Optional(announce) : scripts::Optional()});
    }
    if (c.build == Build::ec7000c) {
      const std::string how = suffix + " " + std::string(notify);
      return conn_->command({"EVALSHA", sha_.at("release_ec7000c"), "4", k.lease(), k.queue(),
                             k.queue_expiry(), k.fence(), c.token, how});
    }
    const auto& sha = sha_.at(c.build == Build::b34e159 ? "release_b34e159" : "release_89ab635");
    return conn_->command({"EVALSHA", sha, "5", k.lease(), k.queue(), k.queue_expiry(), k.fence(),
                           k.info(), c.token, suffix, notify});
  };
  auto extend = [&](Client& c) {
    if (is_set(c)) {
      return call(scripts::ExtendSet{.lease = k.lease(),
                                     .holder = c.token + letter_of(c),
                                     .ttl_ms = ttl_ms,
                                     .place_ms = ttl_ms});
    }
    // The builds that keep the holder's record beside a bare lease (89ab635's acquire) sent
    // the record's key too, and extended both (89ab635's extend.lua did what today's does
    // for a bare lease); today's holders fold the record into the lease.
    const bool record_beside =
        c.build == Build::p89ab635 || c.build == Build::ec7000c || candidate(c);
    return call(scripts::Extend{
        .lease = k.lease(),
        .info = record_beside ? scripts::Optional(k.info()) : scripts::Optional(),
        .token = c.token,
        .ttl_ms = ttl_ms,
        .announce = candidate(c) ? scripts::Optional(announce) : scripts::Optional()});
  };
  auto end_holding = [&](const std::string& token) {
    const auto it = w.holdings.find(holding_of(token, resource));
    if (it != w.holdings.end()) it->second.second = false;
  };
  auto now_ms = [&] { return server_now(conn_->command({"TIME"}).get()); };

  bool released_live = false;
  if (e.client >= 0 && e.what != Do::lapse_place && e.what != Do::lapse_hold) {
    Client& c = w.clients[e.client];
    switch (e.what) {
      case Do::take:
      case Do::join:
      case Do::claim: {
        if (c.state == State::idle) {
          c.token = next_token(e.client);
          c.secret = hex(0x5ec00000u + static_cast<std::uint32_t>(e.client), attempts_);
        }
        const bool expect = must_grant(w, e.client);
        const bool other_kind = other_kind_present(w, e.client);
        const char mode = e.what == Do::take ? '0' : e.what == Do::join ? '1' : '2';
        auto r = attempt(c, mode);
        std::string error;
        const auto a = read_attempt(r.get(), error);
        if (!a && error.find("WRONGTYPE") != std::string::npos) {
          // FREE_FOR_ANY_KIND: "once no hold is live and nobody waits, the resource is free
          // for any kind".
          // (Not after a step back of the clock: a hold it revived keeps the kind.)
          if (!other_kind && !w.clock_went_back) {
            return fail("FREE_FOR_ANY_KIND",
                        to_string(e) + " found another kind where nothing of it is live: " + error);
          }
          if (c.state == State::nudged) end_holding(c.token);
          c.state = State::idle;  // the acquire fails with the kind's error
          c.place_live = c.continuous = c.handed_live = c.handed_short = false;
          break;
        }
        if (!a) return fail("SCRIPT_ERROR", to_string(e) + ": " + error);
        if (a->granted) {
          if (auto v = check_grant(w, holding_of(c), a->fence, c.build != Build::ec7000c)) {
            return v;
          }
          if (candidate(c)) pending_announce_.push_back({a->fence, e.client});
          c.state = State::holding;
          c.fence = a->fence;
          c.ended = false;
        } else {
          if (expect) {
            return fail("LIVE", to_string(e) + " refused although nothing live holds it and " +
                                    "nobody live waits before it");
          }
          if (c.state == State::nudged) end_holding(c.token);  // its handed lease is gone
          if (a->place > 0) {
            if (c.state != State::waiting) {
              c.joined = ++joins_;
              c.continuous = true;
            }
            c.state = State::waiting;
            c.place = a->place;
            c.place_live = true;
          } else {
            c.state = State::idle;
          }
        }
        c.handed_live = c.handed_short = false;
        break;
      }
      case Do::release:
      case Do::extend:
      case Do::walk_away:
      case Do::give_up: {
        const bool live = e.what == Do::walk_away ? c.handed_live
                          : e.what == Do::give_up ? false
                                                  : !c.ended;
        auto r = e.what == Do::extend ? extend(c) : release(c);
        const auto got = read_integer(r.get());
        if (!got) return fail("SCRIPT_ERROR", to_string(e) + ": " + text_of(r.get()));
        if (*got == 1 && !live) {
          // NO_REVIVAL: "no release, extension or touch of a lease that ended or went to
          // another".
          return fail("NO_REVIVAL", to_string(e) + " succeeded on a lease that had ended");
        }
        if (*got != 1 && live) {
          return fail("LIVE", to_string(e) + " refused on a live lease");
        }
        if (e.what == Do::give_up) {
          const auto queue = is_set(c) ? sk.queue() : k.queue();
          auto left = conn_->command({"ZSCORE", queue, c.token + suffix_of(c, true)});
          if (left->type != REDIS_REPLY_NIL) {
            return fail("GIVE_UP", to_string(e) + ": its member is still queued");
          }
        }
        if (e.what == Do::extend && *got == 1) break;
        if (candidate(c) && live && *got == 1 && e.what == Do::release) {
          pending_end_.push_back(c.fence);
        }
        released_live = live && e.what != Do::extend;
        end_holding(c.token);
        c.state = State::idle;
        c.place_live = c.continuous = c.handed_live = c.handed_short = false;
        break;
      }
      default:
        break;
    }
  } else {
    switch (e.what) {
      case Do::lapse_place: {
        Client& c = w.clients[e.client];
        const auto places = is_set(c) ? sk.queue_expiry() : k.queue_expiry();
        const auto member = c.token + suffix_of(c, true);
        auto old = conn_->command({"ZSCORE", places, member});
        conn_->command({"ZADD", places, "XX", std::to_string(now_ms() - 1), member});
        if (old->type == REDIS_REPLY_STRING)
          expire_as_time_would(resource, places, std::stod(text_of(old.get())));
        c.place_live = c.continuous = false;
        break;
      }
      case Do::lapse_hold: {
        Client& c = w.clients[e.client];
        const auto holder = c.token + letter_of(c);
        auto old = conn_->command({"ZSCORE", k.lease(), holder});
        conn_->command({"ZADD", k.lease(), "XX", std::to_string(now_ms() - 1), holder});
        if (old->type == REDIS_REPLY_STRING)
          expire_as_time_would(resource, k.lease(), std::stod(text_of(old.get())));
        if (c.state == State::holding) c.ended = true;
        c.handed_live = false;
        end_holding(c.token);
        break;
      }
      case Do::lapse_lease:
      case Do::force_release: {
        if (const auto& lease = w.keys[static_cast<std::size_t>(resource)].lease) {
          const std::string owner = lease->substr(0, 32);
          for (auto& c : w.clients) {
            if (c.token != owner || is_set(c) || c.resource != resource) continue;
            if (c.state == State::holding) c.ended = true;
            c.handed_live = false;
          }
          end_holding(owner);
        } else {
          // A lease set: every hold goes.
          for (auto& c : w.clients) {
            if (!is_set(c) || c.resource != resource) continue;
            if (c.state == State::holding) c.ended = true;
            if (c.handed_live) end_holding(c.token);
            c.handed_live = false;
            if (c.state == State::holding) end_holding(c.token);
          }
        }
        if (e.what == Do::lapse_lease) {
          // Its record (written with it, for the same ttl) lapses with it.
          auto lease_left = read_integer(conn_->command({"PTTL", k.lease()}).get());
          auto info_left = read_integer(conn_->command({"PTTL", k.info()}).get());
          conn_->command({"DEL", k.lease()});
          if (lease_left && info_left && *info_left >= 0 && *info_left <= *lease_left + 100) {
            conn_->command({"DEL", k.info()});
          }
        } else {
          const std::string announce = "Px:leader:" + name_of(resource);
          auto r = call(scripts::ForceRelease{.lease = k.lease(),
                                              .queue = k.queue(),
                                              .queue_expiry = k.queue_expiry(),
                                              .fence = k.fence(),
                                              .info = k.info(),
                                              .sets_queue = sk.queue(),
                                              .sets_queue_expiry = sk.queue_expiry(),
                                              .notify = notify,
                                              .announce = announce});
          const auto got = read_integer(r.get());
          if (!got) return fail("SCRIPT_ERROR", to_string(e) + ": " + text_of(r.get()));
          const auto& keys = w.keys[static_cast<std::size_t>(resource)];
          if (keys.lease && *got != 1) {
            return fail("LIVE", "force-release of a held lease returned 0");
          }
          released_live = keys.lease.has_value();  // a lease set's waiters are nudged only
        }
        break;
      }
      case Do::lose_counter:
        conn_->command({"DEL", k.fence()});
        w.counter_lost = true;
        w.fence_exempt = w.fence_exempt || w.clock_behind;
        break;
      case Do::clock_forward:
      case Do::clock_back: {
        // 25 s: no multiple of it lands within seconds of a 60 s ttl's end, so what a step
        // expires never depends on how long the run took.
        w.clock_offset_ms += e.what == Do::clock_forward ? 25000 : -25000;
        w.clock_high_ms = std::max(w.clock_high_ms, w.clock_offset_ms);
        w.clock_behind = w.clock_offset_ms < w.clock_high_ms;
        w.clock_went_back = w.clock_went_back || e.what == Do::clock_back;
        w.fence_exempt = w.fence_exempt || (w.clock_behind && w.counter_lost);
        clock_->store(w.clock_offset_ms);
        learn_what_the_clock_did(e.what == Do::clock_forward);
        break;
      }
      case Do::lapse_queue: {
        auto set_queue_end = read_integer(conn_->command({"PEXPIRETIME", sk.queue()}).get());
        conn_->command({"DEL", k.queue(), k.queue_expiry(), sk.queue(), sk.queue_expiry()});
        if (set_queue_end && *set_queue_end > 0) {
          expire_as_time_would(resource, k.lease(), static_cast<double>(*set_queue_end));
        }
        break;
      }
      case Do::crowd: {
        crowd_done_ = true;
        std::vector<std::string> members;
        for (std::size_t i = 0; i < setup_.crowd; ++i) {
          const std::string token = hex(0xdeadull, ++attempts_);
          w.phantoms.insert(token);
          const std::string suffix = std::string(phantom_id) + "f" + std::string(ttl_ms);
          members.push_back(token + suffix);
          append_call(mutex_attempt(k, token, suffix, scripts::Acquire::Mode::queue, std::nullopt));
        }
        long long latest = 0;
        for (std::size_t i = 0; i < setup_.crowd; ++i) {
          auto r = conn_->read();
          std::string error;
          const auto a = read_attempt(r.get(), error);
          if (!a) return fail("SCRIPT_ERROR", "the crowd's join: " + error);
          if (a->granted) return fail("MUTEX", "a crowd's waiter took a held lease");
          latest = std::max(latest, a->place);
        }
        // Then they die: every place lapses (as the places of waiters with a short place
        // life would).
        for (const auto& m : members) {
          const std::array<std::string_view, 5> words{"ZADD", k.queue_expiry(), "XX", "1", m};
          conn_->append(words);
        }
        for (std::size_t i = 0; i < members.size(); ++i) conn_->read();
        expire_as_time_would(resource, k.queue_expiry(), static_cast<double>(latest));
        break;
      }
      default:
        break;
    }
  }
  return after_step(e, released_live, live_waiters);
}

std::optional<Violation> Explorer::take_all(const Event& e) {
  auto& w = world_;
  Client& first = w.clients[static_cast<std::size_t>(e.client)];
  Client& second = w.clients[static_cast<std::size_t>(first.partner)];
  // One token for the group's leases, as GroupOp draws it.
  first.token = second.token = next_token(e.client);
  // "Taken only when every lease is free and nobody queues for it" (acquire_group.lua): the
  // keys say, and a live hold or a live waiter of either resource means it is refused.
  const auto occupied = [](const Snapshot& keys) {
    return keys.lease || keys.set || !keys.queue.empty() || !keys.set_queue.empty();
  };
  const bool vacant = !occupied(w.keys[0]) && !occupied(w.keys[1]);
  const bool live = live_on(w, 0) || live_on(w, 1);
  const auto before = w.keys;
  const auto written_before = everything_written();
  // In the library's taking order (by name: r first), with the slot's one fencing counter.
  const std::array<detail::ResourceKeys, 2> group = {keys_of(0), keys_of(1)};
  std::string count;
  append_call(scripts::AcquireGroup{.fence = group[0].fence(),
                                    .resources = group,
                                    .token = first.token,
                                    .ttl_ms = ttl_ms,
                                    .data = "group",
                                    .key_count = &count});
  auto reply = conn_->read();
  const auto* r = reply.get();
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    return Violation{"SCRIPT_ERROR", to_string(e) + ": " + text_of(r)};
  }
  if (r->element[0]->integer == 1) {
    if (r->elements != 3) return Violation{"SCRIPT_ERROR", to_string(e) + ": a grant's shape"};
    if (live) {
      // MUTEX catches a taken hold; this, a live waiter overtaken.
      return Violation{"FIFO", to_string(e) + " took both resources over a live holder or waiter"};
    }
    for (const auto& keys : before) {
      if (keys.lease || keys.set) {
        // Over a lease nobody live holds (a dead waiter's), or a lease set's key.
        return Violation{"MUTEX", to_string(e) + " took a resource whose lease key was there"};
      }
    }
    for (std::size_t i = 0; i < 2; ++i) {
      Client& c = i == 0 ? first : second;
      const auto fence = static_cast<std::uint64_t>(r->element[i + 1]->integer);
      if (auto v = check_grant(w, holding_of(c), fence, true)) return v;
      c.state = State::holding;
      c.fence = fence;
      c.ended = false;
    }
    ++groups_taken_;
  } else {
    ++groups_refused_;
    if (vacant) {  // (the keys were read from the server, after any step of its clock)
      return Violation{"LIVE", to_string(e) + " refused although both resources are free"};
    }
    // All or none: a refusal writes nothing (no key, no expiry, not the counter), and names
    // a resource held or waited for.
    const auto index = r->element[1]->integer;
    if (everything_written() != written_before) {
      return Violation{"ALL_OR_NONE", to_string(e) + " was refused and wrote"};
    }
    if (index < 1 || index > 2) {
      return Violation{"SCRIPT_ERROR", to_string(e) + ": refused at " + std::to_string(index)};
    }
    const auto& named = before[static_cast<std::size_t>(index - 1)];
    if (!named.lease && !named.set && named.queue.empty()) {
      return Violation{"ALL_OR_NONE", to_string(e) + " was refused at " + std::to_string(index) +
                                          ", which is neither held nor waited for"};
    }
  }
  return after_step(e, false, {});
}

std::vector<std::string> Explorer::everything_written() {
  std::vector<std::string_view> names = {keys_of(0).fence()};
  for (int r = 0; r < used_; ++r) {
    const auto& k = keys_of(r);
    const auto& sk = set_keys_of(r);
    names.insert(names.end(),
                 {k.lease(), k.queue(), k.queue_expiry(), k.info(), sk.queue(), sk.queue_expiry()});
  }
  for (const auto name : names) {
    conn_->append(std::array<std::string_view, 2>{"DUMP", name});
    conn_->append(std::array<std::string_view, 2>{"PEXPIRETIME", name});
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < 2 * names.size(); ++i) {
    auto r = conn_->read();
    out.push_back(r->type == REDIS_REPLY_INTEGER ? std::to_string(r->integer) : text_of(r.get()));
  }
  return out;
}

void Explorer::learn_what_the_clock_did(bool forward) {
  auto& w = world_;
  // Every key read once, so that what expired goes now (lazily) rather than whenever the
  // server's own expiry cycle samples it: a later step back would revive it otherwise.
  for (int r = 0; r < used_; ++r) {
    const auto& k = keys_of(r);
    const auto& sk = set_keys_of(r);
    conn_->command({"EXISTS", k.lease(), k.info(), k.queue(), k.queue_expiry(), sk.queue(),
                    sk.queue_expiry()});
  }
  read_keys();
  const double now = static_cast<double>(w.keys[0].now_ms);
  auto live_holding = [&](const Client& c, bool live) {
    if (auto it = w.holdings.find(holding_of(c)); it != w.holdings.end()) {
      it->second.second = live;
    }
  };
  for (auto& c : w.clients) {
    const bool set = is_set(c);
    const auto& keys = w.keys[static_cast<std::size_t>(c.resource)];
    const auto& k = keys_of(c.resource);
    const auto& sk = set_keys_of(c.resource);
    // Its lease or hold, live on the server?
    bool there = false;
    if (set) {
      const auto hold = keys.holds.find(c.token + letter_of(c));
      there = hold != keys.holds.end() && hold->second > now;
    } else {
      there = keys.lease && keys.lease->compare(0, 32, c.token) == 0;
    }
    if (forward) {
      if (c.state == State::holding && !c.ended && !there) {
        c.ended = true;  // its holder still believes it holds (its own clock did not move)
        ++ended_by_clock_;
        live_holding(c, false);
      }
      if (c.state == State::nudged && c.handed_live && !there) {
        c.handed_live = false;
        live_holding(c, false);
      }
    } else if (set && there) {
      // "every expiry already set moves D later on the server's new clock": a lease set's
      // hold that lapsed less than D ago, not yet purged, is live again (a mutex's lease key
      // went when it lapsed).
      if (c.state == State::holding && c.ended) {
        c.ended = false;
        ++revived_by_clock_;
        live_holding(c, true);
      }
      if (c.state == State::nudged && !c.handed_live) {
        c.handed_live = true;
        live_holding(c, true);
      }
    }
    if (c.state == State::waiting && c.place_live == forward) {
      auto place = conn_->command(
          {"ZSCORE", set ? sk.queue_expiry() : k.queue_expiry(), c.token + suffix_of(c, true)});
      const bool live = place->type == REDIS_REPLY_STRING && std::stod(text_of(place.get())) > now;
      if (forward && !live) c.place_live = c.continuous = false;
      if (!forward && live) {
        c.place_live = true;  // its place, lapsed less than D ago, is live again
        ++revived_by_clock_;
      }
    }
  }
}

void Explorer::read_keys() {
  // The resources' keys in one round trip (the other resource's only when a client uses it).
  for (int r = 0; r < used_; ++r) {
    const auto& k = keys_of(r);
    const auto& sk = set_keys_of(r);
    conn_->append(std::array<std::string_view, 2>{"GET", k.lease()});
    conn_->append(std::array<std::string_view, 5>{"ZRANGE", k.lease(), "0", "-1", "WITHSCORES"});
    conn_->append(std::array<std::string_view, 2>{"GET", k.info()});
    conn_->append(std::array<std::string_view, 4>{"ZRANGE", k.queue(), "0", "-1"});
    conn_->append(std::array<std::string_view, 4>{"ZRANGE", sk.queue(), "0", "-1"});
    conn_->append(std::array<std::string_view, 1>{"TIME"});
  }
  for (int r = 0; r < used_; ++r) {
    auto lease = conn_->read(), holds = conn_->read(), info = conn_->read(), queue = conn_->read(),
         set_queue = conn_->read(), time = conn_->read();
    auto& s = world_.keys[static_cast<std::size_t>(r)];
    s = {};
    if (lease->type == REDIS_REPLY_STRING) s.lease = text_of(lease.get());
    if (holds->type == REDIS_REPLY_ARRAY && holds->elements > 0) {
      s.set = true;
      for (std::size_t i = 0; i + 1 < holds->elements; i += 2) {
        const auto member = text_of(holds->element[i]);
        if (member[0] != '#') s.holds[member] = std::stod(text_of(holds->element[i + 1]));
      }
    }
    if (info->type == REDIS_REPLY_STRING) s.info = text_of(info.get());
    for (const auto* from : {queue.get(), set_queue.get()}) {
      if (from->type != REDIS_REPLY_ARRAY) continue;
      auto& to = from == queue.get() ? s.queue : s.set_queue;
      for (std::size_t i = 0; i < from->elements; ++i) to.push_back(text_of(from->element[i]));
    }
    s.now_ms = server_now(time.get());
  }
}

std::optional<Violation> Explorer::after_step(const Event& e, bool released_live,
                                              const std::vector<int>& live_waiters_before) {
  auto& w = world_;
  // Every message the step published: a PING's answer comes after them.
  std::vector<std::pair<std::string, std::string>> messages;  // channel, text
  sub_->append(std::array<std::string_view, 1>{"PING"});
  for (;;) {
    auto r = sub_->read();
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) continue;
    const auto kind = text_of(r->element[0]);
    if (kind == "pong") break;
    if (kind == "pmessage" && r->elements == 4) {
      messages.emplace_back(text_of(r->element[2]), text_of(r->element[3]));
    }
  }
  read_keys();
  bool handed = false;
  const bool promised = e.client < 0 || e.what == Do::lapse_place || e.what == Do::lapse_hold ||
                        w.clients[e.client].build != Build::ec7000c;
  w.begun_this_step.clear();
  w.ended_this_step.clear();
  for (const auto& [channel, text] : messages) {
    if (channel.rfind("x:leader:", 0) == 0) {  // an election's news: '<term> ...', '- <term>'
      std::istringstream in(text);
      std::string first;
      std::uint64_t term = 0;
      in >> first;
      if (first == "-") {
        in >> term;
        w.ended_this_step.push_back(term);
      } else {
        term = std::stoull(first);
        w.begun_this_step.push_back(term);
        w.announced.insert(term);
      }
    }
  }
  for (const auto& [channel, text] : messages) {
    if (channel.rfind("x:leader:", 0) == 0) continue;
    const auto id = channel.substr(channel.rfind(':') + 1);
    const auto m = read_message(text);
    if (id == phantom_id) {
      // An earlier build's release may (docs/design-notes.md: only mutual exclusion is
      // promised beside builds further back than the one before today's).
      if (promised && w.fairness_promised) {
        return Violation{"NO_LAPSED_HANDOFF", "a dead waiter was handed it"};
      }
      continue;
    }
    const auto it = std::find_if(w.clients.begin(), w.clients.end(),
                                 [&](const Client& c) { return c.id == id; });
    if (it == w.clients.end()) return Violation{"HAND_OFF", "a message to nobody: " + channel};
    const int to = static_cast<int>(it - w.clients.begin());
    Client& c = *it;
    if (m.token != c.token) {
      return Violation{"HAND_OFF", "a message for " + m.token + " to the waiter of " + c.token};
    }
    // A lease set's message is the token alone: a hold handed over (a release), or a nudge to
    // try again (a force-release); the keys say which.
    bool given = !is_set(c);
    if (is_set(c)) {
      const auto& keys = w.keys[static_cast<std::size_t>(c.resource)];
      const auto hold = keys.holds.find(c.token + letter_of(c));
      given = hold != keys.holds.end() && hold->second > static_cast<double>(keys.now_ms);
    }
    if (given) {
      handed = true;
      if (auto v = check_hand_off(w, to)) return v;
    } else if (c.state != State::waiting) {
      return Violation{"HAND_OFF", "a nudge to " + c.token + ", which does not wait"};
    } else {
      continue;  // a nudge to try again: it still waits, in its place
    }
    if (m.fence > 0 && promised) {
      if (auto v = check_grant(w, holding_of(c), m.fence, true)) return v;
      if (candidate(c)) pending_announce_.push_back({m.fence, to});
    } else if (m.fence > w.max_fence) {
      w.max_fence = m.fence;  // minted by an earlier build's release: the claim decides
    }
    const bool granted = c.build == Build::signing && !is_set(c) && !m.mac.empty() && m.fence > 0 &&
                         m.place == c.place && detail::hand_off_mac(c.secret, m.signed_by) == m.mac;
    c.fence = m.fence;
    if (given) c.place_live = c.continuous = false;
    if (granted) {
      c.state = State::holding;
      c.ended = false;
    } else {
      c.state = State::nudged;
      c.handed_live = given;
      c.handed_short = given && !is_set(c) && m.fence == 0;
    }
  }
  if (released_live && promised) {
    // (A release serves its own resource's waiters: `live_waiters_before` are those.)
    if (auto v = check_served(w, handed, live_waiters_before)) return v;
  }
  for (const auto& [term, who] : pending_announce_) {
    if (auto v = check_announced(w, term, "c" + std::to_string(who))) return v;
  }
  for (const auto term : pending_end_) {
    if (auto v = check_term_ended(w, term)) return v;
  }
  pending_announce_.clear();
  pending_end_.clear();
  states_.insert(state_hash());
  if (auto v = check_invariants(w)) return v;
  // What inspect.lua tells an operator, against the same model: of each resource.
  for (int at = 0; at < used_; ++at) {
    const auto& k = keys_of(at);
    const auto& sk = set_keys_of(at);
    append_call(scripts::Inspect{.lease = k.lease(),
                                 .info = k.info(),
                                 .queue_expiry = k.queue_expiry(),
                                 .sets_queue_expiry = sk.queue_expiry()});
  }
  std::array<ReplyPtr, 2> seen;
  for (int at = 0; at < used_; ++at) seen[static_cast<std::size_t>(at)] = conn_->read();
  for (int at = 0; at < used_; ++at) {
    const auto* r = seen[static_cast<std::size_t>(at)].get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
      return Violation{"SCRIPT_ERROR", "inspect: " + text_of(r)};
    }
    const Inspection what{text_of(r->element[0]), text_of(r->element[2]), r->element[3]->integer,
                          r->element[4]->integer};
    if (auto v = check_inspection(w, at, what)) return v;
  }
  return std::nullopt;
}

std::uint64_t Explorer::state_hash() const {
  // Who holds, who waits, in which order: the abstract state (no tokens, no clocks).
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  int at = 0;  // the resource whose keys are hashed
  auto owner = [&](std::string_view token) -> std::uint64_t {
    for (std::size_t i = 0; i < world_.clients.size(); ++i) {
      const auto& c = world_.clients[i];
      if (c.token == token && c.resource == at) return i + 1;
    }
    return world_.phantoms.count(std::string(token)) ? 100 : 200;
  };
  for (const auto& c : world_.clients) {
    mix(static_cast<std::uint64_t>(c.state) | static_cast<std::uint64_t>(c.kind) << 4 |
        static_cast<std::uint64_t>(c.resource) << 8);
    mix(c.ended | c.handed_live << 1 | c.place_live << 2 | c.continuous << 3);
  }
  for (; at < static_cast<int>(world_.keys.size()); ++at) {
    const auto& keys = world_.keys[static_cast<std::size_t>(at)];
    mix(keys.lease ? owner(std::string_view(*keys.lease).substr(0, 32)) : 0);
    mix(keys.info.has_value());
    for (const auto& [member, end] : keys.holds) {
      mix(owner(std::string_view(member).substr(0, 32)) << 1 |
          (end > static_cast<double>(keys.now_ms)));
    }
    std::uint64_t last = 0;
    for (const auto* queue : {&keys.queue, &keys.set_queue}) {
      mix(7);
      for (const auto& m : *queue) {
        const auto o = owner(std::string_view(m).substr(0, 32));
        if (o != last || o != 100) mix(o);  // a crowd counts once
        last = o;
      }
    }
  }
  return h;
}

// ---------------------------------------------------------------------------------------
// The search

std::optional<Violation> Explorer::play(const Setup& setup, std::span<const Event> events,
                                        std::vector<Event>* played) {
  reset(setup);
  if (played) played->clear();
  std::size_t index = 0;
  for (const auto& e : events) {
    const auto en = enabled();
    if (std::find(en.begin(), en.end(), e) == en.end()) continue;
    if (played) played->push_back(e);
    if (auto v = step(e)) {
      v->step = index;
      return v;
    }
    ++index;
  }
  return std::nullopt;
}

std::optional<Violation> Explorer::sample(const Setup& setup, std::uint64_t seed, std::size_t depth,
                                          std::vector<Event>& played) {
  reset(setup);
  played.clear();
  std::uint64_t state = seed;
  auto next = [&] {  // splitmix64: the same sequence on every platform
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (std::size_t i = 0; i < depth; ++i) {
    const auto en = enabled();
    if (en.empty()) break;
    const auto e = en[next() % en.size()];
    played.push_back(e);
    if (auto v = step(e)) {
      v->step = i;
      return v;
    }
  }
  return std::nullopt;
}

std::optional<Violation> Explorer::enumerate(const Setup& setup, std::size_t depth,
                                             std::vector<Event>& sequence) {
  // Depth first: each prefix replayed from a flushed server, its enabled events each tried.
  std::function<std::optional<Violation>(std::vector<Event>&)> visit =
      [&](std::vector<Event>& prefix) -> std::optional<Violation> {
    if (auto v = play(setup, prefix)) {
      sequence = prefix;
      return v;
    }
    if (prefix.size() == depth) return std::nullopt;
    const auto en = enabled();
    for (const auto& e : en) {
      prefix.push_back(e);
      if (auto v = visit(prefix)) return v;
      prefix.pop_back();
    }
    return std::nullopt;
  };
  std::vector<Event> prefix;
  return visit(prefix);
}

std::vector<Event> Explorer::shrink(const Setup& setup, std::vector<Event> events,
                                    const std::string& invariant) {
  for (bool smaller = true; smaller;) {
    smaller = false;
    for (std::size_t i = 0; i < events.size(); ++i) {
      auto fewer = events;
      fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
      std::vector<Event> played;
      if (auto v = play(setup, fewer, &played); v && v->invariant == invariant) {
        events = played;
        smaller = true;
        break;
      }
    }
  }
  return events;
}

}  // namespace redis_lock::explore
