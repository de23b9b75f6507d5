// SPDX-License-Identifier: MIT
// How a call of one of our scripts is sent: EVALSHA, or FCALL of its function in the
// library, and the restating of commands queued before a handshake decided.
#include "script_call.hpp"
#include "redis_lock_scripts.hpp"
#include "resp.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

using namespace redis_lock::detail;

namespace {

std::string encoded(std::initializer_list<std::string_view> words) {
  std::string out;
  append_command(out, words);
  return out;
}

TEST(ScriptCall, EachScriptHasAFunctionOfTheLibraryNamedForItsText) {
  std::set<std::string_view> names;
  for (const auto* s : all_scripts) {
    SCOPED_TRACE(s->name);
    EXPECT_EQ(function_of(s->sha1), s->function);
    EXPECT_EQ(sha1_of(s->function), s->sha1);
    // rl_<the library's hash>_<name>, registered in the library's text
    EXPECT_EQ(s->function,
              "rl_" + std::string(function_library_name.substr(11)) + "_" + std::string(s->name));
    EXPECT_NE(function_library.find("function_name = '" + std::string(s->function) + "'"),
              std::string_view::npos);
    names.insert(s->function);
  }
  EXPECT_EQ(names.size(), std::size(all_scripts));
  EXPECT_TRUE(
      function_library.starts_with("#!lua name=" + std::string(function_library_name) + "\n"));
  EXPECT_NE(function_library.find(function_probe), std::string_view::npos);
  EXPECT_TRUE(function_of("0000000000000000000000000000000000000000").empty());
  EXPECT_TRUE(sha1_of("rl_000000000000_acquire").empty());
}

TEST(ScriptCall, AnEvalshaOfOursGoesAsTheFcallOfItsFunction) {
  const std::string_view call[] = {"EVALSHA", acquire_script.sha1, "2", "k1", "k2", "a1"};
  std::string out = "kept";
  append_script_call(out, call, true);
  EXPECT_EQ(out, "kept" + encoded({"FCALL", acquire_script.function, "2", "k1", "k2", "a1"}));
  out.clear();
  append_script_call(out, call, false);
  EXPECT_EQ(out, encoded({"EVALSHA", acquire_script.sha1, "2", "k1", "k2", "a1"}));
  // Not ours, or not a script call: as it is.
  const std::string_view other[] = {"EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"};
  out.clear();
  append_script_call(out, other, true);
  EXPECT_EQ(out, encoded({"EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"}));
  const std::string_view get[] = {"GET", acquire_script.sha1};
  out.clear();
  append_script_call(out, get, true);
  EXPECT_EQ(out, encoded({"GET", acquire_script.sha1}));
  // More than 16 words (a group acquire).
  std::vector<std::string_view> long_call = {"EVALSHA", acquire_group_script.sha1, "20"};
  for (int i = 0; i < 20; ++i) long_call.push_back("k");
  out.clear();
  append_script_call(out, long_call, true);
  long_call[0] = "FCALL";
  long_call[1] = acquire_group_script.function;
  std::string expected;
  append_command(expected, std::span<const std::string_view>(long_call));
  EXPECT_EQ(out, expected);
}

TEST(ScriptCall, QueuedCommandsAreRestatedEitherWayAndTheirSizesFollow) {
  const std::vector<std::string> evalsha = {
      encoded({"EVALSHA", release_script.sha1, "1", "lease", "token"}),
      encoded({"PING"}),
      encoded({"EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"}),
      encoded({"EVALSHA", extend_script.sha1, "1", "lease", std::string(300, 'x'), "9"}),
  };
  const std::vector<std::string> fcall = {
      encoded({"FCALL", release_script.function, "1", "lease", "token"}),
      evalsha[1],
      evalsha[2],
      encoded({"FCALL", extend_script.function, "1", "lease", std::string(300, 'x'), "9"}),
  };
  auto joined = [](const std::vector<std::string>& v) {
    std::string all;
    for (const auto& c : v) all += c;
    return all;
  };
  auto sizes_of = [](const std::vector<std::string>& v) {
    std::vector<std::size_t> sizes;
    for (const auto& c : v) sizes.push_back(c.size());
    return sizes;
  };
  std::string bytes = joined(evalsha);
  auto sizes = sizes_of(evalsha);
  EXPECT_TRUE(restate_script_calls(bytes, sizes, true));
  EXPECT_EQ(bytes, joined(fcall));
  EXPECT_EQ(sizes, sizes_of(fcall));
  EXPECT_FALSE(restate_script_calls(bytes, sizes, true));  // nothing left to restate
  EXPECT_TRUE(restate_script_calls(bytes, sizes, false));
  EXPECT_EQ(bytes, joined(evalsha));
  EXPECT_EQ(sizes, sizes_of(evalsha));
  std::string none;
  std::vector<std::size_t> no_sizes;
  EXPECT_FALSE(restate_script_calls(none, no_sizes, true));
}

}  // namespace
