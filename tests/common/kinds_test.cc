// The names of the enums that cross components (common/kinds.h): each value has its own name and
// reads back as itself; a name this version does not know is refused, not taken for another kind.
#include "common/kinds.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace xtimer {
namespace {

TEST(Kinds, EveryOpKindReadsBackFromItsName) {
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(OpKind::kCommInit); ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    OpKind back = OpKind::kKernel;
    ASSERT_TRUE(ParseOpKind(Name(kind), &back)) << Name(kind);
    EXPECT_EQ(back, kind);
    EXPECT_TRUE(IsKind(Name(kind), kind));
    names.insert(Name(kind));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(OpKind::kCommInit) + 1) << "two kinds share a name";
  // The names stack files, summaries and /metrics carry (docs/formats.md).
  EXPECT_STREQ(Name(OpKind::kCollective), "collective");
  EXPECT_STREQ(Name(OpKind::kCommInit), "comm_init");
  EXPECT_EQ(kTimedOpKinds, 5);
  EXPECT_TRUE(IsCommunication(OpKind::kP2p));
  EXPECT_FALSE(IsCommunication(OpKind::kCommInit));
}

TEST(Kinds, AnUnknownNameIsRefused) {
  OpKind kind = OpKind::kMatmul;
  EXPECT_FALSE(ParseOpKind("", &kind));
  EXPECT_FALSE(ParseOpKind("Collective", &kind));
  EXPECT_FALSE(ParseOpKind("collective ", &kind));
  EXPECT_FALSE(ParseOpKind("allreduce_v2", &kind));
  EXPECT_EQ(kind, OpKind::kMatmul) << "left as it was";
  EXPECT_FALSE(IsKind("p2p", OpKind::kCollective));
}

TEST(Kinds, VerdictWordsAreDistinct) {
  EXPECT_STREQ(Name(VerdictPhase::kSetup), "setup");
  EXPECT_STREQ(Name(VerdictPhase::kStep), "step");
  EXPECT_STREQ(Name(VerdictPhase::kUnknown), "unknown");
  std::set<std::string> kinds;
  for (SuspectKind k : {SuspectKind::kMissing, SuspectKind::kAbsent, SuspectKind::kBehind, SuspectKind::kNotInSetup,
                        SuspectKind::kStackDiffers, SuspectKind::kOtherCall, SuspectKind::kNotStarted})
    kinds.insert(Name(k));
  EXPECT_EQ(kinds, (std::set<std::string>{"missing", "absent", "behind", "not_in_setup", "stack_differs", "other_call",
                                          "not_started"}));
  EXPECT_STREQ(Name(StackSource::kPython), "python");
  EXPECT_STREQ(Name(StackSource::kNative), "native");
  EXPECT_STREQ(Name(StackSource::kNone), "none");
}

}  // namespace
}  // namespace xtimer
