// Command-line parsing: good lines parse, bad ones name the flag.
#include "netprobe/options.h"

#include <gtest/gtest.h>

namespace xtimer::netprobe {
namespace {

bool Parse(std::vector<std::string> args, Options* o, std::string* error) { return ParseOptions(args, 30, o, error); }

TEST(Options, FullLine) {
  Options o;
  std::string e;
  ASSERT_TRUE(Parse({"--rdzv",
                     "10.0.0.1:29400",
                     "--nnodes",
                     "8",
                     "--node-rank",
                     "3",
                     "--backend",
                     "nccl",
                     "--rounds",
                     "2",
                     "--size",
                     "64M",
                     "--min-bandwidth",
                     "1000",
                     "--straggler-factor=2.5",
                     "--all-pairs",
                     "--timeout",
                     "1.5",
                     "--connect-timeout=0.5",
                     "--json",
                     "/tmp/r.json",
                     "--streams",
                     "8",
                     "--no-early-stop"},
                    &o, &e))
      << e;
  EXPECT_EQ(o.rdzv_host, "10.0.0.1");
  EXPECT_EQ(o.rdzv_port, 29400);
  EXPECT_EQ(o.nnodes, 8);
  EXPECT_EQ(o.node_rank, 3);
  EXPECT_EQ(o.backend, Backend::kNccl);
  EXPECT_EQ(o.max_rounds, 2);
  EXPECT_EQ(o.size, 64 << 20);
  EXPECT_EQ(o.min_bandwidth_mbps, 1000);
  EXPECT_EQ(o.straggler_factor, 2.5);
  EXPECT_TRUE(o.all_pairs);
  EXPECT_EQ(o.timeout_s, 1.5);
  EXPECT_EQ(o.connect_timeout_s, 0.5);
  EXPECT_EQ(o.json_path, "/tmp/r.json");
  EXPECT_EQ(o.streams, 8);
  EXPECT_FALSE(o.early_stop);
}

TEST(Options, Defaults) {
  Options o;
  std::string e;
  ASSERT_TRUE(ParseOptions({"--rdzv", "[::1]:5", "--nnodes", "2"}, 7.5, &o, &e)) << e;
  EXPECT_EQ(o.rdzv_host, "::1");
  EXPECT_EQ(o.rdzv_port, 5);
  EXPECT_TRUE(o.early_stop);
  EXPECT_EQ(o.node_rank, -1);
  EXPECT_EQ(o.backend, Backend::kTcp);
  EXPECT_EQ(o.max_rounds, 0);
  EXPECT_EQ(o.timeout_s, 7.5);        // XTIMER_NETPROBE_TIMEOUT
  EXPECT_EQ(o.connect_timeout_s, 4);  // a black-holed peer costs 4 s, not the whole deadline
  EXPECT_EQ(o.size, 64 << 20);
  EXPECT_EQ(o.straggler_factor, 2.0);
  EXPECT_EQ(o.min_bandwidth_mbps, 0);
}

TEST(Options, Sizes) {
  int64_t v = 0;
  EXPECT_TRUE(ParseSize("4096", &v));
  EXPECT_EQ(v, 4096);
  EXPECT_TRUE(ParseSize("512k", &v));
  EXPECT_EQ(v, 512 << 10);
  EXPECT_TRUE(ParseSize("1G", &v));
  EXPECT_EQ(v, 1ll << 30);
  EXPECT_FALSE(ParseSize("0", &v));
  EXPECT_FALSE(ParseSize("-5", &v));
  EXPECT_FALSE(ParseSize("12x", &v));
  EXPECT_FALSE(ParseSize("M", &v));
  EXPECT_FALSE(ParseSize("99999999999G", &v));
}

struct BadCase {
  std::vector<std::string> args;
  const char* mentions;
};

TEST(Options, BadFlagsNameTheFlag) {
  const std::vector<std::string> base = {"--rdzv", "h:1", "--nnodes", "4"};
  std::vector<BadCase> cases = {
      {{"--nnodes", "4"}, "--rdzv"},
      {{"--rdzv", "h:1"}, "--nnodes"},
      {{"--rdzv", "nohostport", "--nnodes", "4"}, "--rdzv"},
      {{"--rdzv", "h:99999", "--nnodes", "4"}, "--rdzv"},
      {{"--rdzv", "::1:5", "--nnodes", "4"}, "--rdzv"},
      {{"--rdzv", "h:1", "--nnodes", "0"}, "--nnodes"},
      {{"--rdzv", "h:1", "--nnodes", "four"}, "--nnodes"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--node-rank", "4"}, "--node-rank"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--node-rank", "-1"}, "--node-rank"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--backend", "ib"}, "--backend"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--rounds", "0"}, "--rounds"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--rounds", "many"}, "--rounds"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--size", "0"}, "--size"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--size", "2", "--streams", "4"}, "--size"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--min-bandwidth", "-3"}, "--min-bandwidth"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--straggler-factor", "0.5"}, "--straggler-factor"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--straggler-factor", "nan"}, "--straggler-factor"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--timeout", "0"}, "--timeout"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--timeout"}, "--timeout"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--connect-timeout", "-1"}, "--connect-timeout"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--json"}, "--json"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--all-pairs=yes"}, "--all-pairs"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--no-early-stop=1"}, "--no-early-stop"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--streams", "100"}, "--streams"},
      {{"--rdzv", "h:1", "--nnodes", "4", "--frobnicate"}, "--frobnicate"},
      {{"--serve", "--rdzv", "h:1", "--nnodes", "4", "--node-rank", "0"}, "--serve"},
  };
  for (const BadCase& c : cases) {
    Options o;
    std::string e;
    EXPECT_FALSE(Parse(c.args, &o, &e)) << c.mentions;
    EXPECT_NE(e.find(c.mentions), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

TEST(Options, HelpNeedsNothingElse) {
  Options o;
  std::string e;
  EXPECT_TRUE(Parse({"--help"}, &o, &e));
  EXPECT_TRUE(o.help);
}

}  // namespace
}  // namespace xtimer::netprobe
