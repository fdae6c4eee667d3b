// Qualified Python names from the source (common/stacks/py_qualname.h): what py-spy shows as
// co_qualname on 3.11+, for frames CPython's dumper names by co_name.
#include "common/stacks/py_qualname.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "common/stacks/stack_symbolize.h"
#include "common/stacks/symbolizer.h"

namespace xtimer {
namespace {

// Line numbers are given in the comments: the tests name them.
constexpr const char* kSource = R"py(import threading           # 1
                                                             # 2
def top(x):                                                  # 3
    return x                                                 # 4
                                                             # 5
class Worker:                                                # 6
    """A docstring that mentions
def not_a_function():
class NotAClass: """                                         # 9
    def run(self):                                           # 10
        s = "def fake(): '''"                                # 11
        t = ('(', [                                          # 12
def not_either():                                            # 13
        ])                                                   # 14
        return self.deep()                                   # 15
                                                             # 16
    @staticmethod                                            # 17
    async def go():                                          # 18
        def inner():                                         # 19
            f = lambda: 1                                    # 20
            return [i for i in range(3)]                     # 21
        return inner()                                       # 22
                                                             # 23
    class Inner:                                             # 24
        def run(self): return 1                              # 25
    z = lambda: 2                                            # 26
                                                             # 27
if True:                                                     # 28
    def in_if():                                             # 29
        x = 1 + \
2                                                            # 31
        return x                                             # 32
g = (y for y in [])                                          # 33
)py";

TEST(PyQualname, NamesAsCoQualname) {
  auto q = [](const char* fn, int line) { return PyQualnames::QualifyIn(kSource, fn, line); };
  EXPECT_EQ(q("top", 4), "top");
  EXPECT_EQ(q("run", 15), "Worker.run");  // past a docstring, a string and brackets at column 0
  EXPECT_EQ(q("run", 10), "Worker.run");
  EXPECT_EQ(q("go", 22), "Worker.go");  // async, under a decorator
  EXPECT_EQ(q("inner", 21), "Worker.go.<locals>.inner");
  EXPECT_EQ(q("<lambda>", 20), "Worker.go.<locals>.inner.<locals>.<lambda>");
  EXPECT_EQ(q("<listcomp>", 21), "Worker.go.<locals>.inner.<locals>.<listcomp>");
  EXPECT_EQ(q("run", 25), "Worker.Inner.run");  // the innermost def of that name
  EXPECT_EQ(q("<lambda>", 26), "Worker.<lambda>");
  EXPECT_EQ(q("in_if", 32), "in_if");  // an if is no scope
  EXPECT_EQ(q("in_if", 31), "in_if");  // a continuation line at column 0
  EXPECT_EQ(q("<genexpr>", 33), "<genexpr>");
  EXPECT_EQ(q("<module>", 33), "");
  // In strings, or not holding the line: no answer rather than a guess.
  EXPECT_EQ(q("not_a_function", 8), "");
  EXPECT_EQ(q("not_either", 13), "");
  EXPECT_EQ(q("top", 15), "");
  EXPECT_EQ(q("missing", 4), "");
  EXPECT_EQ(q("top", 0), "");
}

TEST(PyQualname, GarbageNeverCrashes) {
  for (const char* s : {"", "\n\n", "def", "def (", "class 9x:", "'''", "\"\"\"\n(((", "\\", "\t\tdef f():\n def g():"})
    for (int line = -1; line < 4; ++line) PyQualnames::QualifyIn(s, "f", line);
}

TEST(PyQualname, SymbolizeAddsTheQualifiedNameFromTheFile) {
  std::string dir = testing::TempDir() + "/xtimer-qualname-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  std::string file = dir + "/w.py";
  std::ofstream(file) << kSource;
  std::string fifo = dir + "/fifo.py";
  mkfifo(fifo.c_str(), 0644);  // must not hang the reader
  nlohmann::json frames =
      nlohmann::json::array({{{"function", "<module>"}, {"file", file}, {"line", 33}},
                             {{"function", "run"}, {"file", file}, {"line", 15}},
                             {{"function", "top"}, {"file", file}, {"line", 4}},
                             {{"function", "run"}, {"file", fifo}, {"line", 15}},
                             {{"function", "run"}, {"file", "<frozen importlib._bootstrap>"}, {"line", 15}},
                             {{"function", "run"}, {"file", file}, {"line", "x"}}});
  nlohmann::json in = {{"format", "xtimer-stacktrace"},
                       {"version", 1},
                       {"threads", {{{"tid", 1}, {"native", nlohmann::json::array()}, {"python", frames}}}}};
  Symbolizer sym;
  std::string out, error;
  SymbolizeSummary summary;
  ASSERT_TRUE(SymbolizeStackJson(in.dump(), sym, &out, &summary, &error)) << error;
  nlohmann::json py = nlohmann::json::parse(out)["threads"][0]["python"];
  ASSERT_EQ(py.size(), 6u);
  EXPECT_FALSE(py[0].contains("qualname"));
  EXPECT_EQ(py[1]["qualname"], "Worker.run");
  EXPECT_EQ(py[1]["function"], "run");       // kept: what CPython printed
  EXPECT_FALSE(py[2].contains("qualname"));  // the same as its name
  EXPECT_FALSE(py[3].contains("qualname"));
  EXPECT_FALSE(py[4].contains("qualname"));
  EXPECT_FALSE(py[5].contains("qualname"));
  unlink(file.c_str());
  unlink(fifo.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace xtimer
