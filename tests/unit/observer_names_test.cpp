// SPDX-License-Identifier: MIT
// Every value of the observer's event enums has a name of its own (to_string, observer.hpp),
// which logs and PrometheusObserver's labels use; a value it does not know has none.
#include <redis_lock/observer.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace {

/// The names of E's values 0..count-1, checked to be there, distinct and in snake case; and
/// the next value has none.
template <class E>
void names_of(int count, std::set<std::string_view> want) {
  std::set<std::string_view> seen;
  for (int i = 0; i < count; ++i) {
    const auto name = redis_lock::to_string(static_cast<E>(i));
    EXPECT_FALSE(name.empty()) << i;
    EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_"), std::string_view::npos)
        << name;
    EXPECT_TRUE(seen.insert(name).second) << name << " twice";
  }
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(redis_lock::to_string(static_cast<E>(count)).empty());
}

}  // namespace

TEST(ObserverNames, EachEventEnumsValuesHaveTheirNames) {
  using namespace redis_lock;
  names_of<AcquireKind>(5, {"mutex", "permit", "shared", "exclusive", "election"});
  names_of<AcquireOutcome>(4, {"acquired", "not_acquired", "failed", "cancelled"});
  names_of<NodeOutcome>(4, {"granted", "refused", "failed", "no_answer"});
  names_of<HoldEnd>(2, {"released", "lost"});
  names_of<LeaseCommand>(4, {"release", "extend", "renewal", "touch"});
  names_of<AdminCommand>(4, {"inspect", "force_release", "leader", "observe"});
  names_of<ServerNoticeKind>(2, {"evicting_policy", "policy_unknown"});
  static_assert(to_string(LeaseCommand::touch) == "touch", "usable at compile time");
}
