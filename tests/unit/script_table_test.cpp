// SPDX-License-Identifier: MIT
// The table of scripts (src/script_table.hpp) held to the scripts' own text: each entry's
// keys, arguments and flags are its Lua header's, each index its code reads is declared, the
// commands it may call are the ones its text names; and the encoder's words, per call.
#include "script_table.hpp"
#include "topology.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace redis_lock::detail::scripts {
namespace {

std::string read_lua(std::string_view name) {
  std::ifstream in(std::string(REDIS_LOCK_SCRIPTS_DIR) + "/" + std::string(name) + ".lua");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The value of the header line `-- <what>: ...` ("" when the line is bare), or nullopt.
std::optional<std::string> header_line(const std::string& lua, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(lua, m, std::regex("(^|\n)-- " + what + ":( ([^\n]*))?\n"))) {
    return std::nullopt;
  }
  return m[3].str();
}

std::string_view flags_word(Flags f) {
  switch (f) {
    case Flags::writes:
      return "";
    case Flags::allow_oom:
      return "allow-oom";
    case Flags::no_writes:
      return "no-writes";
  }
  return "?";
}

/// The highest `<array>[n]` the script's own code (not its comments) reads.
int highest_index(const std::string& lua, const std::string& array) {
  std::string code;
  std::istringstream lines(lua);
  for (std::string line; std::getline(lines, line);) {
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line.compare(first, 2, "--") == 0) continue;
    code += line + "\n";
  }
  int highest = 0;
  const std::regex index(array + R"(\[(\d+)\])");
  for (std::sregex_iterator it(code.begin(), code.end(), index), end; it != end; ++it) {
    highest = std::max(highest, std::stoi((*it)[1].str()));
  }
  return highest;
}

TEST(ScriptTable, EveryEmbeddedScriptHasOneEntry) {
  std::set<std::string_view> named;
  for (const auto& e : table()) {
    EXPECT_TRUE(named.insert(e.script.name).second) << e.script.name << " twice";
  }
  std::set<std::string_view> embedded;
  for (const Script* s : all_scripts) embedded.insert(s->name);
  EXPECT_EQ(named, embedded);
}

TEST(ScriptTable, KeysArgumentsAndFlagsAreTheLuaHeaders) {
  for (const auto& e : table()) {
    SCOPED_TRACE(e.script.name);
    const auto lua = read_lua(e.script.name);
    ASSERT_FALSE(lua.empty()) << "not found in " << REDIS_LOCK_SCRIPTS_DIR;
    EXPECT_EQ(header_line(lua, "KEYS"), std::string(e.layout.keys));
    EXPECT_EQ(header_line(lua, "ARGV"), std::string(e.layout.args));
    EXPECT_EQ(header_line(lua, "flags").value_or(""), flags_word(e.layout.flags));
  }
}

TEST(ScriptTable, TheCodeReadsNoKeyOrArgumentItDoesNotDeclare) {
  for (const auto& e : table()) {
    SCOPED_TRACE(e.script.name);
    const auto lua = read_lua(e.script.name);
    if (e.layout.keys.find("...") == std::string_view::npos) {
      EXPECT_EQ(highest_index(lua, "KEYS"), static_cast<int>(names_in(e.layout.keys)));
    }
    EXPECT_EQ(highest_index(lua, "ARGV"), static_cast<int>(names_in(e.layout.args)));
  }
}

TEST(ScriptTable, CommandsAreTheOnesItsTextMayCall) {
  // As the server gets it (first.lua's and shared.lua's functions included, comments out).
  const std::regex call(R"(redis\.p?call\(\s*'([A-Za-z]+)')");
  const std::regex publish(R"('(S?PUBLISH)')");  // the one command computed: PUBLISH or SPUBLISH
  for (const auto& e : table()) {
    SCOPED_TRACE(e.script.name);
    const std::string body(e.script.body);
    std::set<std::string> found;
    for (const auto* re : {&call, &publish}) {
      for (std::sregex_iterator it(body.begin(), body.end(), *re), end; it != end; ++it) {
        auto name = (*it)[1].str();
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        found.insert(name);
      }
    }
    std::string joined;
    for (const auto& name : found) joined += (joined.empty() ? "" : " ") + name;
    EXPECT_EQ(joined, e.layout.commands);
  }
}

template <class Call>
std::vector<std::string_view> words_of(const Call& call) {
  std::array<std::string_view, max_words<Call>> out;
  return {out.begin(), out.begin() + encode(call, out)};
}

TEST(ScriptTable, AnAcquireLeavesOutTheInfoOnRedlockAndTheAnnouncementButForACandidate) {
  const Acquire mutex{.lease = "l",
                      .fence = "f",
                      .queue = "q",
                      .queue_expiry = "e",
                      .info = "i",
                      .token = "t",
                      .ttl_ms = "500",
                      .mode = Acquire::Mode::claim,
                      .place_ms = "1200",
                      .member_suffix = "m"};
  EXPECT_EQ(words_of(mutex),
            (std::vector<std::string_view>{"EVALSHA", acquire_script.sha1, "5", "l", "f", "q", "e",
                                           "i", "t", "500", "2", "1200", "m"}));
  auto redlock = mutex;
  redlock.info.reset();
  redlock.mode = Acquire::Mode::redlock;
  EXPECT_EQ(words_of(redlock),
            (std::vector<std::string_view>{"EVALSHA", acquire_script.sha1, "4", "l", "f", "q", "e",
                                           "t", "500", "R", "1200", "m"}));
  auto candidate = mutex;
  candidate.mode = Acquire::Mode::queue;
  candidate.announce = "Pch";
  const auto words = words_of(candidate);
  ASSERT_EQ(words.size(), 14u);
  EXPECT_EQ(words[10], "1");
  EXPECT_EQ(words[13], "Pch");
}

TEST(ScriptTable, AnEmptyWordThatIsPresentIsSent) {
  // An idempotent request's payload may be empty: '' is kept, unlike no payload at all.
  IdemBegin begin{.record = "r",
                  .due = "d",
                  .fingerprint = "",
                  .key = "k",
                  .fence = "7",
                  .first_look_ms = "100",
                  .mode = "run",
                  .payload = std::string()};
  auto words = words_of(begin);
  ASSERT_EQ(words.size(), 3u + 2 + 6);
  EXPECT_EQ(words[2], "2");
  EXPECT_EQ(words[5], "");
  EXPECT_EQ(words.back(), "");
  begin.payload.reset();
  EXPECT_EQ(words_of(begin).size(), 3u + 2 + 5);
}

TEST(ScriptTable, ALeaseSetAcquireSaysWhetherItJoinsTheQueue) {
  AcquireSet call{.lease = "l",
                  .fence = "f",
                  .queue = "q",
                  .queue_expiry = "e",
                  .mutex_queue = "mq",
                  .token = "t",
                  .ttl_ms = "9",
                  .joins = true,
                  .place_ms = "1200",
                  .member_suffix = "m",
                  .marker = "#S3"};
  EXPECT_EQ(words_of(call)[10], "1");
  call.joins = false;
  const auto words = words_of(call);
  EXPECT_EQ(words[10], "0");
  EXPECT_EQ(words.back(), "#S3");
  EXPECT_EQ(words[1], acquire_set_script.sha1);
}

TEST(ScriptTable, AGroupAcquireRepeatsEachResourcesKeys) {
  const std::vector<ResourceKeys> keys{make_keys("p:", "a"), make_keys("p:", "b")};
  std::string count;
  std::vector<std::string_view> words;
  encode(AcquireGroup{.fence = keys[0].fence(),
                      .resources = keys,
                      .token = "t",
                      .ttl_ms = "5",
                      .data = "label",
                      .key_count = &count},
         words);
  ASSERT_EQ(words.size(), 3u + 7 + 3);
  EXPECT_EQ(words[2], "7");
  EXPECT_EQ(words[3], keys[0].fence());
  EXPECT_EQ(words[4], keys[0].lease());
  EXPECT_EQ(words[7], keys[1].lease());
  EXPECT_EQ(words[9], keys[1].info());
  EXPECT_EQ(words.back(), "label");
}

std::set<std::string_view> preloaded_on(const redis_lock::detail::Shape& shape) {
  std::set<std::string_view> names;
  for (const auto& e : table()) {
    if (shape.preloads(e.layout.preload)) names.insert(e.script.name);
  }
  return names;
}

TEST(ScriptTable, EachConnectionLoadsTheScriptsItsLocksUseOnEveryAcquireAndRelease) {
  using namespace redis_lock::detail;
  const std::set<std::string_view> one_master{
      "acquire", "acquire_group", "acquire_set", "extend", "extend_set", "release", "release_set"};
  EXPECT_EQ(preloaded_on(standalone_shape()), one_master);
  EXPECT_EQ(preloaded_on(cluster_shape()), one_master);
  EXPECT_EQ(preloaded_on(sentinel_shape()), one_master);
  EXPECT_EQ(preloaded_on(redlock_shape()),
            (std::set<std::string_view>{"acquire", "extend", "raise_fence", "release"}));
}

TEST(ScriptTable, NamesAndRequiredNamesAreCountedFromALayoutLine) {
  static_assert(names_in("lease fence queue queue_expiry [info]") == 5);
  static_assert(required_in("lease fence queue queue_expiry [info]") == 4);
  static_assert(names_in("") == 0);
  static_assert(required_in("token") == 1);
  SUCCEED();
}

}  // namespace
}  // namespace redis_lock::detail::scripts
