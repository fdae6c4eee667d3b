// The reader's tests run against the product's reader (simdjson) and the tests' reference reader
// (nlohmann-json, reference_stack_reader.h), which must agree.
#include "common/stacks/stack_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "common/stacks/stack_reader_impl.h"
#include "tests/viewer/reference_stack_reader.h"
#include "tests/viewer/stack_json.h"

namespace xtimer {
namespace {

using testing::HangOf4;
using testing::StackFileToJson;

enum class Backend { kNlohmann, kSimdjson };

bool ParseWith(Backend b, std::string_view json, StackFile* out, std::string* error) {
  if (b == Backend::kNlohmann) return stack_reader::ParseWithNlohmann(json, out, error);
  std::string padded(json);
  padded.append(stack_reader::kPadding, '\0');
  return stack_reader::ParseWithSimdjson(padded.data(), json.size(), out, error);
}

class StackReader : public ::testing::TestWithParam<Backend> {
 protected:
  bool Parse(std::string_view json, StackFile* out, std::string* error) {
    if (json.empty()) return ParseStackFile(json, out, error);  // the empty check is the front end's
    return ParseWith(GetParam(), json, out, error);
  }
  std::string Error(std::string_view json) {
    StackFile f;
    std::string error;
    EXPECT_FALSE(Parse(json, &f, &error)) << json;
    return error;
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, StackReader, ::testing::Values(Backend::kNlohmann, Backend::kSimdjson),
                         [](const auto& info) { return info.param == Backend::kNlohmann ? "nlohmann" : "simdjson"; });

TEST_P(StackReader, ReadsTheDocumentedExample) {
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
    {"tid": 4242, "name": "python3", "python_name": "MainThread", "main": true, "holds_gil": false, "state": "S",
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
  ASSERT_TRUE(Parse(json, &f, &error)) << error;
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
  EXPECT_EQ(t.name, "python3");
  EXPECT_EQ(t.python_name, "MainThread");
  EXPECT_EQ(t.holds_gil, std::optional<bool>(false));
  ASSERT_EQ(t.native.size(), 2u);
  EXPECT_EQ(t.native[0].function, "main");
  EXPECT_EQ(t.native[0].line, 15);
  EXPECT_EQ(t.native[1].function, "");  // unsymbolised: module + offset only
  EXPECT_EQ(t.native[1].offset, "0x77f0");
  ASSERT_EQ(t.python.size(), 2u);
  EXPECT_EQ(t.python[1].function, "train_step");
}

TEST_P(StackReader, RoundTripsAndReusesBuffersWithoutStaleData) {
  auto files = HangOf4();
  StackFile f;
  std::string error;
  // A big file first, then a smaller one into the same object: nothing of the first may remain.
  ASSERT_TRUE(Parse(StackFileToJson(files[0]), &f, &error)) << error;
  ASSERT_EQ(f.inflight_ops.size(), 1u);
  StackFile small = files[2];
  small.threads.resize(1);
  small.threads[0].native.resize(1);
  small.threads[0].python.clear();
  ASSERT_TRUE(Parse(StackFileToJson(small), &f, &error)) << error;
  EXPECT_EQ(f.rank, 2);
  EXPECT_TRUE(f.inflight_ops.empty());
  ASSERT_EQ(f.threads.size(), 1u);
  EXPECT_EQ(f.threads[0].native.size(), 1u);
  EXPECT_TRUE(f.threads[0].python.empty());
  EXPECT_EQ(f.threads[0].native[0].function, "_start");
}

TEST_P(StackReader, ReusedFramesKeepNothingOfThePreviousFile) {
  // Same threads and frame counts, but the second file's frames lack fields the first one's have,
  // or hold strings of other lengths: each frame must read as its own file says.
  const char* full = R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[
    {"tid":1,"name":"main","python_name":"MainThread","state":"S","main":true,"holds_gil":true,
     "native":[{"module":"/lib/a.so","offset":"0x10","function":"f","file":"a.c","line":3,"inlined":true},
               {"module":"/lib/b.so","offset":"0x20","function":"g","file":"b.c","line":4,"inlined":true}],
     "python":[{"function":"p","file":"p.py","line":5},{"function":"q","file":"q.py","line":6}]}]})";
  const char* sparse = R"({"format":"xtimer-stacktrace","version":1,"rank":1,"world_size":2,"threads":[
    {"tid":2,
     "native":[{"offset":"0x30"},{"module":"/lib/bb.so","function":null,"file":"bb.c","line":null}],
     "python":[{"line":7},{"function":"qq","file":"q.py"}]}]})";
  StackFile f;
  std::string error;
  ASSERT_TRUE(Parse(full, &f, &error)) << error;
  ASSERT_TRUE(Parse(sparse, &f, &error)) << error;
  ASSERT_EQ(f.threads.size(), 1u);
  const StackThread& t = f.threads[0];
  EXPECT_EQ(t.name, "");
  EXPECT_EQ(t.python_name, "");
  EXPECT_EQ(t.state, "");
  EXPECT_FALSE(t.main);
  EXPECT_FALSE(t.holds_gil.has_value());
  ASSERT_EQ(t.native.size(), 2u);
  EXPECT_EQ(t.native[0].module, "");
  EXPECT_EQ(t.native[0].offset, "0x30");
  EXPECT_EQ(t.native[0].function, "");
  EXPECT_EQ(t.native[0].file, "");
  EXPECT_EQ(t.native[0].line, 0);
  EXPECT_FALSE(t.native[0].inlined);
  EXPECT_EQ(t.native[1].module, "/lib/bb.so");
  EXPECT_EQ(t.native[1].offset, "");
  EXPECT_EQ(t.native[1].function, "");
  EXPECT_EQ(t.native[1].file, "bb.c");
  EXPECT_EQ(t.native[1].line, 0);
  EXPECT_FALSE(t.native[1].inlined);
  ASSERT_EQ(t.python.size(), 2u);
  EXPECT_EQ(t.python[0].function, "");
  EXPECT_EQ(t.python[0].file, "");
  EXPECT_EQ(t.python[0].line, 7);
  EXPECT_EQ(t.python[1].function, "qq");
  EXPECT_EQ(t.python[1].file, "q.py");
  EXPECT_EQ(t.python[1].line, 0);
}

TEST_P(StackReader, IgnoresUnknownFields) {
  StackFile f = HangOf4()[0];
  std::string json = StackFileToJson(f);
  json.insert(1, R"("future": {"a": [1, {"b": null}]}, "more": [[]], )");
  std::string error;
  StackFile g;
  ASSERT_TRUE(Parse(json, &g, &error)) << error;
  EXPECT_EQ(g.threads.size(), f.threads.size());
}

TEST_P(StackReader, ReadsEscapedKeysAndStrings) {
  // Keys are usually compared in place; an escaped key must still be recognised.
  const char* json = R"({"format":"xtimer-stacktrace","version":1,"\u0072ank":1,"world_size":2,)"
                     R"("threads":[{"n\u0061tive":[{"function":"a\"b\\c\u00e9","line":3}],"python":[]}]})";
  StackFile f;
  std::string error;
  ASSERT_TRUE(Parse(json, &f, &error)) << error;
  EXPECT_EQ(f.rank, 1);
  ASSERT_EQ(f.threads.size(), 1u);
  ASSERT_EQ(f.threads[0].native.size(), 1u);
  EXPECT_EQ(f.threads[0].native[0].function, "a\"b\\c\xc3\xa9");
  EXPECT_EQ(f.threads[0].native[0].line, 3);
}

TEST_P(StackReader, RefusesBadInputWithAReason) {
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
  EXPECT_NE(
      Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":0,"threads":[]})").find("world_size 0"),
      std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":1048577,"threads":[]})")
                .find("world_size 1048577 is out of range"),
            std::string::npos);
  {
    StackFile f;
    std::string error;
    EXPECT_TRUE(
        Parse(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":1048576,"threads":[]})", &f, &error))
        << error;
  }
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2})").find("no \"threads\""),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[1]})")
                .find("expected objects"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[[{}]]})")
                .find("expected an object"),
            std::string::npos);
  EXPECT_NE(
      Error(
          R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[{"native":[{"line":"x"}]}]})")
          .find("field \"line\""),
      std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":{}})")
                .find("field \"threads\": expected an array"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[{"native":{}}]})")
                .find("field \"native\": expected an array"),
            std::string::npos);
  EXPECT_NE(
      Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[],"process_state":[]})")
          .find("field \"process_state\": expected an object"),
      std::string::npos);
  EXPECT_NE(
      Error(
          R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":2,"threads":[{"native":[{"line":1.5}]}]})")
          .find("field \"line\": expected an integer"),
      std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":"1","rank":0,"world_size":2,"threads":[]})")
                .find("not a small integer"),
            std::string::npos);
  EXPECT_NE(Error(R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":99999999999,"threads":[]})")
                .find("32-bit"),
            std::string::npos);
}

TEST_P(StackReader, SurvivesDeepNesting) {
  std::string deep = R"({"format":"xtimer-stacktrace","version":1,"rank":0,"world_size":1,"threads":[],"x":)";
  deep += std::string(200000, '[') + std::string(200000, ']') + "}";
  StackFile f;
  std::string error;
  // nlohmann-json accepts any depth, simdjson stops at 1024 levels: either way, no crash.
  if (!Parse(deep, &f, &error)) {
    EXPECT_NE(error.find("not valid JSON"), std::string::npos) << error;
  }
}

TEST(StackReaderFile, RefusesNonRegularFiles) {
  StackFile f;
  StackReadBuffer buffer;
  std::string error;
  EXPECT_FALSE(ReadStackFile("/dev/null", &f, &buffer, &error));
  EXPECT_EQ(error, "is a character device, not a regular file; only a regular file is read as a stack file");
  EXPECT_FALSE(ReadStackFile("/nonexistent/x.stacktrace", &f, &buffer, &error));
  EXPECT_EQ(error, "does not exist");
}

TEST(StackReaderFile, ReadsFilesIntoOneAlignedBuffer) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("xtimer_reader_test." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::string path = (dir / name).string();
    FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (f) std::fwrite(text.data(), 1, text.size(), f), std::fclose(f);
    return path;
  };
  auto files = HangOf4();
  StackFile big_input = files[0];
  for (int i = 0; i < 200; ++i) big_input.threads.push_back(big_input.threads[0]);
  StackFile small_input = files[1];
  small_input.threads.resize(1);
  std::string big = write("big.stacktrace", StackFileToJson(big_input));
  std::string small = write("small.stacktrace", StackFileToJson(small_input));
  std::string bad = write("bad.stacktrace", StackFileToJson(small_input).substr(0, 40));

  StackFile f;
  StackReadBuffer buffer;
  std::string error;
  // Big, small, big again, a truncated one: the buffer is reused and nothing stale is read.
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(ReadStackFile(big, &f, &buffer, &error)) << error;
    EXPECT_EQ(StackFileToJson(f), StackFileToJson(big_input));
    ASSERT_TRUE(ReadStackFile(small, &f, &buffer, &error)) << error;
    EXPECT_EQ(StackFileToJson(f), StackFileToJson(small_input));
  }
  EXPECT_FALSE(ReadStackFile(bad, &f, &buffer, &error));
  EXPECT_NE(error.find("not valid JSON"), std::string::npos) << error;
  EXPECT_FALSE(ReadStackFile(small, &f, &buffer, &error, 10));
  EXPECT_NE(error.find("more than a stack file can hold (10 bytes)"), std::string::npos) << error;
  // The data is 64-byte aligned (read(2) into a misaligned buffer is several times slower).
  for (size_t size : {size_t{1}, size_t{1000}, size_t{1} << 20, size_t{3} << 20})
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.Reserve(size)) % 64, 0u) << size;
  buffer.Release();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace xtimer

namespace xtimer {
namespace {

// Strings are capped when read (stack_file.h, kMaxStackStringBytes): a 1 MB frame name reaches
// no renderer; the cut is at a character boundary and shown. Short strings are kept whole, also
// when a reused frame held a long one before.
TEST_P(StackReader, CapsLongStringsAndShowsTheCut) {
  std::vector<StackFile> files = HangOf4();
  StackFile f = files[0];
  std::string huge(1 << 20, 'x');
  f.threads[0].python[0].function = huge;
  // A two-byte character across the cap: the cut moves back before it.
  f.threads[0].python[0].file = std::string(kMaxStackStringBytes - 1, 'f') + "\u00e9" + "tail";
  f.threads[0].native[0].function = std::string(kMaxStackStringBytes, 'n');  // exactly the cap: kept
  f.trigger = huge;
  f.threads[0].name = huge;
  StackFile out;
  std::string error;
  ASSERT_TRUE(Parse(StackFileToJson(f), &out, &error)) << error;
  const std::string cut = std::string(kMaxStackStringBytes, 'x') + kStackStringCutMark;
  EXPECT_EQ(out.threads[0].python[0].function, cut);
  EXPECT_EQ(out.trigger, cut);
  EXPECT_EQ(out.threads[0].name, cut);
  EXPECT_EQ(out.threads[0].python[0].file, std::string(kMaxStackStringBytes - 1, 'f') + kStackStringCutMark);
  EXPECT_EQ(out.threads[0].native[0].function, std::string(kMaxStackStringBytes, 'n'));
  // The same buffers again with a short name: nothing of the long one stays.
  ASSERT_TRUE(Parse(StackFileToJson(files[0]), &out, &error)) << error;
  EXPECT_EQ(StackFileToJson(out), StackFileToJson(files[0]));
}

// Both back ends read the same files the same way.
TEST(StackReaderBackends, AgreeOnHandMadeFiles) {
  std::vector<StackFile> files = HangOf4();
  files[0].threads[0].python.push_back({"caf\u00e9 \"q\" \\ ;", "a\nb.py", -3});
  files[1].inflight_ops[0].in_flight_s = 0.1 + 0.2;
  for (const StackFile& f : files) {
    std::string json = StackFileToJson(f, 1);
    StackFile a, b;
    std::string ea, eb;
    ASSERT_TRUE(ParseWith(Backend::kNlohmann, json, &a, &ea)) << ea;
    ASSERT_TRUE(ParseWith(Backend::kSimdjson, json, &b, &eb)) << eb;
    EXPECT_EQ(StackFileToJson(a), StackFileToJson(b));
    EXPECT_EQ(StackFileToJson(a), StackFileToJson(f));
  }
}

}  // namespace
}  // namespace xtimer
