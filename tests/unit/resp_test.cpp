// SPDX-License-Identifier: MIT
// RESP encoding (binary-safe) and incremental decoding of replies.
#include "resp.hpp"

#include <gtest/gtest.h>

using namespace redis_lock::detail;

TEST(Resp, EncodesBinarySafeArguments) {
  std::string out;
  append_command(out, {"SET", std::string_view("a\r\n\0b", 5), ""});
  EXPECT_EQ(out, std::string("*3\r\n$3\r\nSET\r\n$5\r\na\r\n\0b\r\n$0\r\n\r\n", 30));
}

TEST(Resp, AppendsSeveralCommands) {
  std::string out;
  append_command(out, {"PING"});
  append_command(out, {"PING"});
  EXPECT_EQ(out, "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n");
}

TEST(Resp, DecodesEveryType) {
  ReplyReader reader;
  const std::string wire =
      "+OK\r\n-ERR bad\r\n:42\r\n$3\r\nfoo\r\n$-1\r\n*2\r\n:1\r\n:-7\r\n*0\r\n";
  ASSERT_TRUE(reader.feed(wire.data(), wire.size()));
  bool failed = false;
  auto r = reader.next(failed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Reply::Type::status);
  EXPECT_EQ(r->str, "OK");
  r = reader.next(failed);
  ASSERT_TRUE(r && r->is_error());
  EXPECT_EQ(r->str, "ERR bad");
  r = reader.next(failed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->integer, 42);
  r = reader.next(failed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->str, "foo");
  r = reader.next(failed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, Reply::Type::nil);
  r = reader.next(failed);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->type, Reply::Type::array);
  ASSERT_EQ(r->elements.size(), 2u);
  EXPECT_EQ(r->elements[1].integer, -7);
  r = reader.next(failed);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->elements.empty());
  EXPECT_FALSE(reader.next(failed));
  EXPECT_FALSE(failed);
}

TEST(Resp, DecodesAcrossArbitrarySplits) {
  const std::string wire = "*2\r\n:1\r\n:123456789\r\n$5\r\na\r\nbc\r\n";
  for (std::size_t cut = 1; cut < wire.size(); ++cut) {
    ReplyReader reader;
    bool failed = false;
    std::vector<Reply> got;
    ASSERT_TRUE(reader.feed(wire.data(), cut));
    while (auto r = reader.next(failed)) got.push_back(std::move(*r));
    ASSERT_TRUE(reader.feed(wire.data() + cut, wire.size() - cut));
    while (auto r = reader.next(failed)) got.push_back(std::move(*r));
    ASSERT_FALSE(failed);
    ASSERT_EQ(got.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(got[0].elements[1].integer, 123456789);
    EXPECT_EQ(got[1].str, "a\r\nbc");
  }
}

TEST(Resp, RejectsGarbage) {
  ReplyReader reader;
  const std::string wire = "?what\r\n";
  reader.feed(wire.data(), wire.size());
  bool failed = false;
  EXPECT_FALSE(reader.next(failed));
  EXPECT_TRUE(failed);
}

TEST(Resp, HugeArrayHeaderIsRefusedNotAllocated) {
  // Regression test from the reply fuzzer: hiredis would allocate the element table first.
  ReplyReader reader;
  const std::string wire = "*6222222176\r\n:1\r\n";
  reader.feed(wire.data(), wire.size());
  bool failed = false;
  EXPECT_FALSE(reader.next(failed));
  EXPECT_TRUE(failed);
}

TEST(Resp, ArraysUpToTheLimitStillDecode) {
  ReplyReader reader;
  std::string wire = "*1024\r\n";
  for (int i = 0; i < 1024; ++i) wire += ":1\r\n";
  reader.feed(wire.data(), wire.size());
  bool failed = false;
  auto r = reader.next(failed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->elements.size(), 1024u);
}
