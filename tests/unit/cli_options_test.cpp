// SPDX-License-Identifier: MIT
// redis-lock's command line: what it accepts, what it refuses (exit 2, nothing sent).
#include "options.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace redis_lock::cli;
using namespace std::chrono_literals;

namespace {

std::map<std::string, std::string> fake_env;
const char* from_fake_env(const char* name) {
  auto it = fake_env.find(name);
  return it == fake_env.end() ? nullptr : it->second.c_str();
}

Parsed parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  fake_env = std::move(env);
  args.insert(args.begin(), "redis-lock");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data(), from_fake_env);
}

Options run_options(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  auto p = parse(std::move(args), std::move(env));
  EXPECT_EQ(p.action, Parsed::Action::run) << p.text;
  return p.options;
}

std::string usage_error(std::vector<std::string> args) {
  auto p = parse(std::move(args));
  EXPECT_EQ(p.action, Parsed::Action::usage_error);
  return p.text;
}

}  // namespace

TEST(CliOptions, Durations) {
  EXPECT_EQ(parse_duration("30"), 30s);
  EXPECT_EQ(parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("0.5m"), 30s);
  EXPECT_EQ(parse_duration("2h"), 7200s);
  EXPECT_EQ(parse_duration("0"), 0ms);
  EXPECT_EQ(parse_duration(".25s"), 250ms);
  for (const char* bad : {"", "s", "-1s", "1x", "1.5.2s", "nan", "inf", "1e3s", "100000h", " 1s"}) {
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(parse_duration("87600h"), std::chrono::milliseconds(315'360'000'000));  // 10 years
}

TEST(CliOptions, TheCommandIsEverythingAfterTheFirstDoubleDash) {
  const auto o = run_options({"--ttl", "2s", "job", "--", "sh", "-c", "x", "--", "--ttl"});
  EXPECT_EQ(o.resource, "job");
  EXPECT_EQ(o.command, (std::vector<std::string>{"sh", "-c", "x", "--", "--ttl"}));
  EXPECT_EQ(o.ttl, 2s);
}

TEST(CliOptions, ShortAndLongFormsWithAttachedValues) {
  const auto o =
      run_options({"-w", "1.5", "--ttl=3s", "--kill-after=250ms", "--max-hold", "1m", "-E", "75",
                   "-v", "--json", "--print-token", "--no-renew", "r", "-c", "echo hi"});
  EXPECT_EQ(o.wait, 1500ms);
  EXPECT_EQ(o.ttl, 3s);
  EXPECT_EQ(o.kill_after, 250ms);
  EXPECT_EQ(o.max_hold, 60s);
  EXPECT_EQ(o.conflict_exit_code, 75);
  EXPECT_TRUE(o.verbose && o.json && o.print_token);
  EXPECT_FALSE(o.renew);
  EXPECT_EQ(o.command, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  const auto sticky = run_options({"-w5s", "-E3", "r", "--", "true"});
  EXPECT_EQ(sticky.wait, 5s);
  EXPECT_EQ(sticky.conflict_exit_code, 3);
}

TEST(CliOptions, UrlAndPasswordSources) {
  EXPECT_EQ(run_options({"r", "--", "true"}).url, "redis://127.0.0.1:6379");
  EXPECT_EQ(run_options({"r", "--", "true"}, {{"REDIS_LOCK_URL", "redis://h:1"}}).url,
            "redis://h:1");
  const auto flag =
      run_options({"--url", "redis://f:2", "r", "--", "true"}, {{"REDIS_LOCK_URL", "redis://h:1"}});
  EXPECT_EQ(flag.url, "redis://f:2");
  EXPECT_TRUE(flag.url_from_flag);
  EXPECT_EQ(run_options({"r", "--", "true"}, {{"REDIS_LOCK_PASSWORD", "pw"}}).password, "pw");
  char path[] = "/tmp/redis_lock_pw_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << "from-file\r\nsecond line\n";
  EXPECT_EQ(
      run_options({"--password-file", path, "r", "--", "true"}, {{"REDIS_LOCK_PASSWORD", "pw"}})
          .password,
      "from-file");
  std::ofstream(path) << "\n";
  EXPECT_NE(usage_error({"--password-file", path, "r", "--", "true"}).find("no password"),
            std::string::npos);
  std::remove(path);
  EXPECT_NE(usage_error({"--password-file", path, "r", "--", "true"}).find("cannot read"),
            std::string::npos);
}

TEST(CliOptions, RefusedWithAClearMessage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"r"}, "COMMAND"},
      {{"--", "true"}, "RESOURCE"},
      {{"r", "extra", "--", "true"}, "put COMMAND after --"},
      {{"--ttl", "soon", "r", "--", "true"}, "bad duration for --ttl"},
      {{"--ttl", "100000h", "r", "--", "true"}, "at most 10 years"},
      {{"--ttl", "1ms", "r", "--", "true"}, "at least 1s"},
      {{"--ttl", "999ms", "r", "--", "true"}, "at least 1s"},
      {{"--max-hold", "0", "r", "--", "true"}, "--max-hold"},
      {{"-E", "256", "r", "--", "true"}, "0 to 255"},
      {{"-E", "x", "r", "--", "true"}, "0 to 255"},
      {{"-n", "-w", "1s", "r", "--", "true"}, "exclude"},
      {{"-c", "true", "r", "--", "true"}, "exclude"},
      {{"--no", "r", "--", "true"}, "--no"},  // no guessing of abbreviations
      {{"--bogus", "r", "--", "true"}, "--bogus"},
      {{"--ttl", "r", "--", "true"}, "bad duration"},
      {{"--ttl", "1s", "--ttl", "2s", "r", "--", "true"}, "more than once"},
      {{"", "--", "true"}, "RESOURCE"},
      {{"--permits", "0", "r", "--", "true"}, "1 to 4294967295"},
      {{"--permits", "-1", "r", "--", "true"}, "1 to 4294967295"},
      {{"--permits", "4294967296", "r", "--", "true"}, "1 to 4294967295"},
      {{"--permits", "3x", "r", "--", "true"}, "1 to 4294967295"},
      {{"--permits", "3", "--shared", "r", "--", "true"}, "exclude"},
  };
  for (const auto& [args, expected] : cases) {
    const auto text = usage_error(args);
    EXPECT_NE(text.find(expected), std::string::npos)
        << "'" << text << "' lacks '" << expected << "'";
    EXPECT_EQ(text.rfind("redis-lock: ", 0), 0u) << text;
  }
}

TEST(CliOptions, PermitsAndSharedChooseTheKindOfLock) {
  const auto mutex = run_options({"r", "--", "true"});
  EXPECT_EQ(mutex.permits, 0u);
  EXPECT_FALSE(mutex.shared);
  EXPECT_EQ(run_options({"--permits", "3", "r", "--", "true"}).permits, 3u);
  EXPECT_EQ(run_options({"--permits=4294967295", "r", "--", "true"}).permits, 4294967295u);
  EXPECT_TRUE(run_options({"--shared", "r", "--", "true"}).shared);
}

TEST(CliOptions, HelpAndVersionPrintAndExit) {
  auto help = parse({"--help"});
  EXPECT_EQ(help.action, Parsed::Action::print_and_exit);
  EXPECT_NE(help.text.find("--conflict-exit-code"), std::string::npos);
  auto version = parse({"-V"});
  EXPECT_EQ(version.action, Parsed::Action::print_and_exit);
  EXPECT_EQ(version.text.rfind("redis-lock ", 0), 0u);
}

TEST(CliOptions, SubcommandsAreTheFirstPositionalArgument) {
  const auto status = run_options({"--url", "redis://h:1", "status", "orders:42", "--json"});
  EXPECT_EQ(status.mode, Mode::status);
  EXPECT_EQ(status.resource, "orders:42");
  EXPECT_TRUE(status.json);
  EXPECT_EQ(run_options({"force-release", "r"}).mode, Mode::force_release);
  const auto elect = run_options({"--ttl", "5s", "elect", "web", "--value", "10.0.0.1:80", "-n",
                                  "--", "serve", "--port", "80"});
  EXPECT_EQ(elect.mode, Mode::elect);
  EXPECT_EQ(elect.name, "web");
  EXPECT_EQ(elect.resource, "election:web");
  EXPECT_EQ(elect.value, "10.0.0.1:80");
  EXPECT_TRUE(elect.nonblock);
  EXPECT_EQ(elect.command, (std::vector<std::string>{"serve", "--port", "80"}));
  const auto observe = run_options({"observe", "web"});
  EXPECT_EQ(observe.mode, Mode::observe);
  EXPECT_EQ(observe.name, "web");
  EXPECT_EQ(observe.resource, "election:web");
  // A lock named like a subcommand: --resource; a subcommand's name later is a name.
  const auto named = run_options({"--resource", "status", "--", "true"});
  EXPECT_EQ(named.mode, Mode::run);
  EXPECT_EQ(named.resource, "status");
  EXPECT_EQ(run_options({"status", "elect"}).resource, "elect");
  EXPECT_EQ(run_options({"status", "--resource", "-dashed"}).resource, "-dashed");
  EXPECT_EQ(run_options({"status", "--resource=-n"}).resource, "-n");
  EXPECT_EQ(run_options({"elect", "e", "-c", "x"}).command,
            (std::vector<std::string>{"/bin/sh", "-c", "x"}));
  EXPECT_EQ(run_options({"elect", "e", "--value", std::string(1024, 'v'), "--", "x"}).value.size(),
            1024u);
}

TEST(CliOptions, SubcommandsRefuseWhatDoesNotApplyToThem) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"status"}, "status needs a RESOURCE"},
      {{"observe"}, "observe needs a NAME"},
      {{"elect", "--", "true"}, "elect needs a NAME"},
      {{"elect", "e"}, "COMMAND"},
      {{"elect", "e", "x", "--", "true"}, "put COMMAND after -- (redis-lock elect NAME"},
      {{"status", "a", "b"}, "status takes one RESOURCE"},
      {{"status", "r", "--", "true"}, "--resource status"},
      {{"force-release", "r", "-c", "true"}, "--command does not apply to force-release"},
      {{"status", "r", "--ttl", "5s"}, "--ttl does not apply to status"},
      {{"observe", "n", "-n"}, "--nonblock does not apply to observe"},
      {{"elect", "e", "--no-renew", "--", "true"}, "--no-renew does not apply to elect"},
      {{"elect", "e", "--permits", "2", "--", "true"}, "--permits does not apply to elect"},
      {{"elect", "e", "--shared", "--", "true"}, "--shared does not apply to elect"},
      {{"--value", "v", "r", "--", "true"}, "--value applies to a subcommand only (elect)"},
      {{"elect", "e", "--value", std::string(1025, 'v'), "--", "x"}, "at most 1024"},
      {{"status", ""}, "RESOURCE must not be empty"},
      {{"observe", "--resource", ""}, "NAME must not be empty"},
      {{"--resource", "r", "s", "--", "true"}, "--resource names the RESOURCE already"},
      {{"--positional", "r", "--", "true"}, "unrecognised option '--positional'"},
  };
  for (const auto& [args, expected] : cases) {
    const auto text = usage_error(args);
    EXPECT_NE(text.find(expected), std::string::npos)
        << "'" << text << "' lacks '" << expected << "'";
  }
  auto help = parse({"status", "--help"});
  EXPECT_EQ(help.action, Parsed::Action::print_and_exit);
  EXPECT_NE(help.text.find("force-release RESOURCE"), std::string::npos);
}

TEST(CliOptions, AcceptEvictingServerInEveryMode) {
  // Every mode connects to the lock server, so every mode may accept one that evicts keys;
  // the default refuses it.
  EXPECT_FALSE(run_options({"r", "--", "true"}).accept_evicting_server);
  EXPECT_TRUE(run_options({"--accept-evicting-server", "r", "--", "true"}).accept_evicting_server);
  EXPECT_TRUE(run_options({"status", "r", "--accept-evicting-server"}).accept_evicting_server);
  EXPECT_TRUE(
      run_options({"force-release", "--accept-evicting-server", "r"}).accept_evicting_server);
  EXPECT_TRUE(
      run_options({"elect", "e", "--accept-evicting-server", "--", "x"}).accept_evicting_server);
  EXPECT_TRUE(run_options({"observe", "e", "--accept-evicting-server"}).accept_evicting_server);
  EXPECT_NE(usage_error({"--accept-evicting-server=yes", "r", "--", "true"}).find("accept"),
            std::string::npos)
      << "a switch takes no value";
  EXPECT_NE(parse({"--help"}).text.find("--accept-evicting-server"), std::string::npos);
}
