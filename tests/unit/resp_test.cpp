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

// Issue 12 item 4: caps per reply kind. A slot map has one top-level entry per slot range,
// up to 16384; everything nested stays small, and lock replies stay small throughout.
namespace {

std::string slot_map_wire(int ranges) {
  std::string wire = "*" + std::to_string(ranges) + "\r\n";
  for (int i = 0; i < ranges; ++i) {
    const auto slot = std::to_string(i);
    wire +=
        "*3\r\n:" + slot + "\r\n:" + slot + "\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n";
  }
  return wire;
}

bool decodes(ReplyReader& reader, const std::string& wire, std::size_t* elements = nullptr) {
  reader.feed(wire.data(), wire.size());
  bool failed = false;
  auto r = reader.next(failed);
  if (r && elements != nullptr) *elements = r->elements.size();
  return r.has_value() && !failed;
}

std::string nested_wire(int outer, int inner) {
  std::string wire = "*" + std::to_string(outer) + "\r\n";
  for (int i = 0; i < outer; ++i) {
    wire += "*" + std::to_string(inner) + "\r\n";
    for (int j = 0; j < inner; ++j) wire += ":1\r\n";
  }
  return wire;
}

}  // namespace

TEST(Resp, SlotMapOfSixteenThousandRangesDecodesOnATopologyReader) {
  ReplyReader reader(ReplyLimits::slot_map());
  std::size_t n = 0;
  ASSERT_TRUE(decodes(reader, slot_map_wire(16384), &n));
  EXPECT_EQ(n, 16384u);
}

TEST(Resp, SlotMapOfSixteenThousandRangesIsRefusedOnALockReader) {
  ReplyReader reader;  // lock commands: small replies only
  EXPECT_FALSE(decodes(reader, slot_map_wire(16384)));
  ReplyReader at_cap;
  EXPECT_TRUE(decodes(at_cap, slot_map_wire(1024)));
  ReplyReader over;
  EXPECT_FALSE(decodes(over, slot_map_wire(1025)));
}

TEST(Resp, TopologyReaderRefusesMoreThanSixteenThousandEntries) {
  ReplyReader reader(ReplyLimits::slot_map());
  const std::string wire = "*16385\r\n:1\r\n";  // refused at the header, nothing allocated
  reader.feed(wire.data(), wire.size());
  bool failed = false;
  EXPECT_FALSE(reader.next(failed));
  EXPECT_TRUE(failed);
}

TEST(Resp, NestedArraysKeepTheTightCapOnEveryReader) {
  // A hostile slot map cannot nest 16384-element tables: only the top level may be large.
  for (const auto limits : {ReplyLimits::commands(), ReplyLimits::slot_map()}) {
    ReplyReader ok(limits);
    EXPECT_TRUE(decodes(ok, nested_wire(2, 1024)));
    ReplyReader refused(limits);
    EXPECT_FALSE(decodes(refused, nested_wire(1, 1025)));
    ReplyReader deep(limits);
    EXPECT_FALSE(decodes(deep, "*1\r\n*1\r\n*16384\r\n"));
  }
}

TEST(Resp, CapsApplyPerReplyNotPerStream) {
  // The top-level cap is checked for every reply of the stream, not only the first.
  ReplyReader reader(ReplyLimits::slot_map());
  std::size_t n = 0;
  ASSERT_TRUE(decodes(reader, slot_map_wire(2000), &n));
  EXPECT_EQ(n, 2000u);
  ASSERT_TRUE(decodes(reader, slot_map_wire(3000), &n));
  EXPECT_EQ(n, 3000u);
  EXPECT_FALSE(decodes(reader, nested_wire(1, 2000)));
}

TEST(Resp, NestingDeeperThanSevenLevelsIsRefused) {
  // Seven nested levels below the reply decode (hiredis 0.14's own limit); an eighth is
  // refused on every reader, whatever hiredis version grows its stack further.
  std::string seven;
  for (int i = 0; i < 8; ++i) seven += "*1\r\n";
  seven += ":1\r\n";
  ReplyReader ok(ReplyLimits::slot_map());
  EXPECT_TRUE(decodes(ok, seven));
  ReplyReader deep(ReplyLimits::slot_map());
  EXPECT_FALSE(decodes(deep, "*1\r\n" + seven));
}
