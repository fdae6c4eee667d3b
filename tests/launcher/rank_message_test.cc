// ParseRankMessage (launcher/agent/rank_channel.h): what the agent accepts from a rank. A fraction where
// the agent reads an integer is refused before any handler converts it (the fuzz target found
// {"pid": 1e300} reaching an int conversion: undefined behaviour, caught by UBSan only).
#include <gtest/gtest.h>

#include "launcher/agent/rank_channel.h"

namespace xtimer {
namespace {

bool Accepts(const std::string& text, std::string* why) {
  nlohmann::json msg;
  return ParseRankMessage(text, &msg, why);
}

TEST(RankMessage, AcceptsTheDocumentedMessages) {
  std::string why;
  EXPECT_TRUE(Accepts(R"({"type":"hello","rank":3,"world_size":8,"local_rank":3,"host":"a","pid":42})", &why));
  EXPECT_TRUE(Accepts(R"({"type":"status","state":"hung","oldest_inflight_s":301.5,"dumps":2,"pid":42})", &why));
  EXPECT_TRUE(
      Accepts(R"({"type":"summary","pid":42,"summary":{"ops":[{"count":3,"mean_us":1.5,"m":4,"n":4,"k":4}]}})", &why));
}

TEST(RankMessage, RefusesAFractionWhereAnIntegerBelongs) {
  std::string why;
  EXPECT_FALSE(Accepts(R"({"type":"status","pid":1e300})", &why));
  EXPECT_EQ(why, "a message with a fraction or a huge number where an integer belongs");
  EXPECT_FALSE(Accepts(R"({"type":"status","pid":42,"rank":1180591620717411303424})", &why));
  EXPECT_FALSE(Accepts(R"({"type":"summary","pid":42,"summary":{"ops":[{"count":1e30}]}})", &why));
  EXPECT_EQ(why, "a summary with a fraction or a huge number where an integer belongs");
}

TEST(RankMessage, RefusesWhatIsNotAnObjectWithAType) {
  std::string why;
  for (const char* text : {"[1,2]", R"({"type":5})", R"({"type":"status","rank":3,"st)", ""}) {
    EXPECT_FALSE(Accepts(text, &why)) << text;
    EXPECT_EQ(why, "a message that is not a JSON object with a type") << text;
  }
}

}  // namespace
}  // namespace xtimer

namespace xtimer {
namespace {

TEST(RankMessage, StepsRecordsAreReadOneByOne) {
  nlohmann::json msg;
  std::string why;
  ASSERT_TRUE(ParseRankMessage(R"J({"type": "steps", "rank": 3, "records": [
      {"v": 1, "rank": 3, "world": 8, "t_begin": 10.0, "t_end": 10.5,
       "colls": [{"comm": "c1", "seq": 7, "ranks": 8, "start": 10.2, "end": 10.4}]},
      {"v": 1, "rank": 4, "world": 8, "t_begin": 10.5, "t_end": 11.0},
      {"v": 1, "rank": 3, "world": 8, "t_begin": "late", "t_end": 11.0},
      {"v": 1, "rank": 3, "world": 8, "t_begin": 11.0, "t_end": 11.5}]})J",
                               &msg, &why))
      << why;
  std::vector<slowdown::StepRecord> records;
  EXPECT_EQ(StepRecordsOf(msg, &records, &why), 2u) << "another rank's record and a broken one";
  EXPECT_EQ(why, "a record of rank 4 in rank 3's message");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].colls.size(), 1u);
  EXPECT_EQ(records[1].t_begin, 11.0);

  records.clear();
  ASSERT_TRUE(ParseRankMessage(R"({"type": "steps", "rank": 3, "records": {"v": 1}})", &msg, &why));
  EXPECT_EQ(StepRecordsOf(msg, &records, &why), 1u);
  EXPECT_EQ(why, "no \"records\" array");
  EXPECT_TRUE(records.empty());
}

}  // namespace
}  // namespace xtimer
