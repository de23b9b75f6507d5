// SPDX-License-Identifier: MIT
// docs/guide.md's C++ blocks, run against a live server: each test checks what the guide
// says its block does. The fragment is wrapped in a request handler that provides what it
// uses (`io`, `config`, `id`, and the handler's own replies and work, as test doubles).
#include "snippets.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/as_tuple.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace redis_lock::test;
using boost::system::error_code;

namespace {

// ---- "The shape of a locked section" -------------------------------------------------------
namespace guide_locked_section {

std::vector<std::uint64_t> work;  // do_the_work's fencing tokens
std::function<void()> while_working;

std::string unavailable(error_code ec) { return "503 " + ec.message(); }
std::string conflict() { return "409"; }
asio::awaitable<void> do_the_work(std::uint64_t fencing_token) {
  work.push_back(fencing_token);
  if (while_working) while_working();
  co_return;
}

asio::awaitable<std::string> handle(asio::io_context& io, const redis_lock::ConnectionConfig& config,
                                    std::string id) {
  //[guide_locked_section
  // Once, at startup (`config` from ConnectionConfig::from_url, after checking its result):
  redis_lock::LockManager locks(io.get_executor(), config);

  // In each request handler:
  auto [ec, guard] = co_await locks.async_acquire("order:" + id, {.ttl = 10s, .auto_renew = true},
                                                  asio::as_tuple(asio::use_awaitable));
  if (ec)     co_return unavailable(ec);   // Redis unreachable, refused, misconfigured
  if (!guard) co_return conflict();        // someone else holds it: not an error
  co_await do_the_work(guard.fencing_token());
  co_await guard.async_release(asio::use_awaitable);   // or let the destructor post it
  //]
  co_return "200";
}

}  // namespace guide_locked_section

class Guide : public Snippet {
 protected:
  void SetUp() override {
    Snippet::SetUp();
    guide_locked_section::work.clear();
    guide_locked_section::while_working = nullptr;
  }
  std::string handle(const redis_lock::ConnectionConfig& cfg, const std::string& id) {
    std::optional<std::string> reply;
    run_co(io, [&]() -> asio::awaitable<void> {
      reply = co_await guide_locked_section::handle(io, cfg, id);
    }());
    return reply.value_or("no reply");
  }
  asio::io_context io;
};

}  // namespace

TEST_F(Guide, LockedSectionDoesTheWorkUnderTheLease) {
  guide_locked_section::while_working = [&] {
    EXPECT_EQ(command({"EXISTS", lease_key("order:17")}), "1") << "working without the lock";
  };
  EXPECT_EQ(handle(config(), "17"), "200");
  ASSERT_EQ(guide_locked_section::work.size(), 1u);
  EXPECT_GT(guide_locked_section::work[0], 0u);
  EXPECT_EQ(command({"EXISTS", lease_key("order:17")}), "0") << "not released";
}

// "someone else holds it: not an error".
TEST_F(Guide, LockedSectionAnswersConflictWhenHeldElsewhere) {
  hold_elsewhere("order:17");
  EXPECT_EQ(handle(config(), "17"), "409");
  EXPECT_TRUE(guide_locked_section::work.empty());
}

// "Redis unreachable, refused, misconfigured": an error code, not an exception.
TEST_F(Guide, LockedSectionAnswersUnavailableWhenRedisIsDown) {
  const auto down = redis_lock::ConnectionConfig::from_url(down_url()).value();
  EXPECT_EQ(handle(down, "17"),
            "503 " + make_error_code(redis_lock::error::connect_failed).message());
  EXPECT_TRUE(guide_locked_section::work.empty());
}
