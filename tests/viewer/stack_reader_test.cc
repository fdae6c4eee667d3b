#include "common/stack_reader.h"

#include <gtest/gtest.h>

#include "tests/viewer/stack_json.h"

namespace xtimer {
namespace {

using testing::HangOf4;
using testing::StackFileToJson;

std::string Error(std::string_view json) {
  StackFile f;
  std::string error;
  EXPECT_FALSE(ParseStackFile(json, &f, &error)) << json;
  return error;
}

TEST(StackReader, ReadsTheDocumentedExample) {
  // The example of docs/formats.md, verbatim in content.
  const char* json = R"({
  "format": "xtimer-stacktrace", "version": 1, "rank": 2, "world_size": 4, "local_rank": 2,
  "host": "node-a", "pid": 4242, "reason": "hang", "time": "2026-11-22T10:15:30.123Z",
  "symbolized": true, "process_state": {"code": "S", "name": "sleeping"},
  "trigger": "ncclAllReduce #1234 on comm 3a9f0c12 running for 302.1 s",
  "inflight_ops": [
    {"name": "ncclAllReduce", "kind": "collective", "stream": "0x5581a0c0",
     "comm": "3a9f0c12", "comm_rank": 2, "comm_size": 4, "seq": 1234, "peer": -1,
     "bytes": 67108864, "state": "running", "in_flight_s": 302.1}
  ],
  "threads": [
    {"tid": 4242, "name": "python3", "main": true, "holds_gil": false, "state": "S",
     "native": [
       {"module": "/usr/bin/python3.11", "offset": "0x1a2b0", "function": "main",
        "file": "Programs/python.c", "line": 15, "inlined": false},
       {"module": "/usr/lib/libnccl.so.2", "offset": "0x77f0"}
     ],
     "python": [
       {"function": "<module>", "file": "train.py", "line": 140},
       {"function": "train_step", "file": "train.py", "line": 88}
     ]}
  ]})";
  StackFile f;
  std::string error;
  ASSERT_TRUE(ParseStackFile(json, &f, &error)) << error;
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.world_size, 4);
  EXPECT_EQ(f.host, "node-a");
  EXPECT_EQ(f.process_state_code, "S");
  ASSERT_EQ(f.inflight_ops.size(), 1u);
  EXPECT_EQ(f.inflight_ops[0].comm, "3a9f0c12");
  EXPECT_EQ(f.inflight_ops[0].seq, 1234);
  EXPECT_DOUBLE_EQ(f.inflight_ops[0].in_flight_s, 302.1);
  ASSERT_EQ(f.threads.size(), 1u);
  const StackThread& t = f.threads[0];
  EXPECT_TRUE(t.main);
  EXPECT_EQ(t.holds_gil, std::optional<bool>(false));
  ASSERT_EQ(t.native.size(), 2u);
  EXPECT_EQ(t.native[0].function, "main");
  EXPECT_EQ(t.native[0].line, 15);
  EXPECT_EQ(t.native[1].function, "");  // unsymbolised: module + offset only
  EXPECT_EQ(t.native[1].offset, "0x77f0");
  ASSERT_EQ(t.python.size(), 2u);
  EXPECT_EQ(t.python[1].function, "train_step");
}

TEST(StackReader, RoundTripsAndReusesBuffersWithoutStaleData) {
  auto files = HangOf4();
  StackFile f;
  std::string error;
  // A big file first, then a smaller one into the same object: nothing of the first may remain.
  ASSERT_TRUE(ParseStackFile(StackFileToJson(files[0]), &f, &error)) << error;
  ASSERT_EQ(f.inflight_ops.size(), 1u);
  StackFile small = files[2];
  small.threads.resize(1);
  small.threads[0].native.resize(1);
  small.threads[0].python.clear();
  ASSERT_TRUE(ParseStackFile(StackFileToJson(small), &f, &error)) << error;
  EXPECT_EQ(f.rank, 2);
  EXPECT_TRUE(f.inflight_ops.empty());
  ASSERT_EQ(f.threads.size(), 1u);
  EXPECT_EQ(f.threads[0].native.size(), 1u);
  EXPECT_TRUE(f.threads[0].python.empty());
  EXPECT_EQ(f.threads[0].native[0].function, "_start");
}

TEST(StackReader, IgnoresUnknownFields) {
  StackFile f = HangOf4()[0];
  std::string json = StackFileToJson(f);
  json.insert(1, R"("future": {"a": [1, {"b": null}]}, "more": [[]], )");
  std::string error;
  StackFile g;
  ASSERT_TRUE(ParseStackFile(json, &g, &error)) << error;
  EXPECT_EQ(g.threads.size(), f.threads.size());
}

TEST(StackReader, RefusesBadInputWithAReason) {
  std::string good = StackFileToJson(HangOf4()[1]);
  EXPECT_EQ(Error(""), "empty file");
  EXPECT_NE(Error(good.substr(0, good.size() / 2)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(Error("\x89PNG\r\n").find("not valid JSON"), std::string::npos);
  EXPECT_NE(Error("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(Error("42").find("not a JSON object"), std::string::npos);
  EXPECT_NE(Error(good + "x").find("not valid JSON"), std::string::npos);
  EXPECT_NE(Error(R"({"format":"chrome-trace","version":1})").find("is not xtimer-stacktrace"), std::string::npos);
  EXPECT_NE(Error(R"({"rank":1})").find("no \"format\""), std::string::npos);
  // A newer version is named as such even when its fields changed shape.
  EXPECT_EQ(Error(R"({"format":"xtimer-stacktrace","version":7,"rank":"one","threads":{}})"),
            "version 7 is newer than this reader understands (1)");
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":"one","world_size":4,"threads":[]})")
                .find("field \"rank\": expected an integer"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":4,"world_size":4,"threads":[]})")
                .find("outside world_size"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":0,"threads":[]})")
                .find("world_size 0"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2})").find("no \"threads\""),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[1]})")
                .find("expected objects"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[[{}]]})")
                .find("expected an object"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[{"native":[{"line":"x"}]}]})")
                .find("field \"line\""),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":99999999999,"threads":[]})")
                .find("32-bit"),
            std::string::npos);
}

TEST(StackReader, SurvivesDeepNesting) {
  std::string deep = R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":1,"threads":[],"x":)";
  deep += std::string(200000, '[') + std::string(200000, ']') + "}";
  StackFile f;
  std::string error;
  EXPECT_TRUE(ParseStackFile(deep, &f, &error)) << error;
}

TEST(StackReader, RefusesNonRegularFiles) {
  StackFile f;
  std::string buffer, error;
  EXPECT_FALSE(ReadStackFile("/dev/null", &f, &buffer, &error));
  EXPECT_EQ(error, "not a regular file");
  EXPECT_FALSE(ReadStackFile("/nonexistent/x.stacktrace", &f, &buffer, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace xtimer
