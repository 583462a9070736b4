// Params: NCCL's lookup order (environment, user conf file, /etc/nccl.conf), malformed values.
#include "test_util.h"
#include <string.h>

namespace {

railnetParam intParam(const char* name, int64_t def, int64_t min, int64_t max) {
  railnetParam p = RAILNET_PARAM_INT_DEF(name, def, min, max, "test param");
  return p;
}

struct ParamTest : ::testing::Test {
  ScopedEnv env;
  TempDir dir;
  void SetUp() override {
    env.set("HOME", dir.path().c_str());
    env.unset("NCCL_CONF_FILE");
    env.set("RAILNET_SYSTEM_CONF", (dir.path() + "/etc-nccl.conf").c_str());
    env.unset("RAILNET_TEST_P");
  }
};

TEST_F(ParamTest, DefaultWhenUnsetEverywhere) {
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 20);
  EXPECT_EQ(railnetParamSourceOf(&p), RAILNET_SRC_DEFAULT);
}

TEST_F(ParamTest, EnvBeatsUserFileBeatsSystemFile) {
  dir.write("etc-nccl.conf", "RAILNET_TEST_P=3\n");
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 3);
  EXPECT_EQ(railnetParamSourceOf(&p), RAILNET_SRC_SYSTEM_FILE);

  dir.write(".nccl.conf", "# user settings\nRAILNET_TEST_P = 5   # trailing comment\n");
  railnetParamReset();
  p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 5);
  EXPECT_EQ(railnetParamSourceOf(&p), RAILNET_SRC_USER_FILE);

  env.set("RAILNET_TEST_P", "7");
  p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 7);
  EXPECT_EQ(railnetParamSourceOf(&p), RAILNET_SRC_ENV);
}

TEST_F(ParamTest, NcclConfFileReplacesHomeFile) {
  dir.write(".nccl.conf", "RAILNET_TEST_P=5\n");
  std::string other = dir.write("other.conf", "\n\nRAILNET_TEST_P=9\n");
  env.set("NCCL_CONF_FILE", other.c_str());
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 9);
  EXPECT_EQ(railnetParamSourceOf(&p), RAILNET_SRC_USER_FILE);
}

TEST_F(ParamTest, MalformedValueWarnsAndUsesDefault) {
  LogCapture log;
  env.set("RAILNET_TEST_P", "abc");
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 20);
  EXPECT_TRUE(LogCapture::contains("'abc' for RAILNET_TEST_P", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("default 20", NCCL_LOG_WARN));

  env.set("RAILNET_TEST_P", "12x");
  p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 20);
  env.set("RAILNET_TEST_P", "");
  p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 20);
  env.set("RAILNET_TEST_P", "99999999999999999999999");
  p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 20);
}

TEST_F(ParamTest, OutOfRangeWarnsAndUsesDefault) {
  LogCapture log;
  env.set("RAILNET_TEST_P", "32");
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 20);
  EXPECT_TRUE(LogCapture::contains("Invalid value 32 for RAILNET_TEST_P", NCCL_LOG_WARN)) << LogCapture::all();
  env.set("RAILNET_TEST_P", " 0x1f ");
  p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 31);
}

TEST_F(ParamTest, MalformedConfLineIsReportedAndSkipped) {
  LogCapture log;
  dir.write(".nccl.conf", "garbage line\n=5\nRAILNET_TEST_P=4\n");
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 4);
  EXPECT_TRUE(LogCapture::contains(".nccl.conf:1", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains(".nccl.conf:2", NCCL_LOG_WARN)) << LogCapture::all();
}

TEST_F(ParamTest, StringParam) {
  railnetParam s = RAILNET_PARAM_STR_DEF("RAILNET_TEST_P", nullptr, "doc");
  EXPECT_EQ(railnetParamStr(&s), nullptr);
  dir.write("etc-nccl.conf", "RAILNET_TEST_P=eth0,eth1\n");
  railnetParamReset();
  s = RAILNET_PARAM_STR_DEF("RAILNET_TEST_P", nullptr, "doc");
  ASSERT_NE(railnetParamStr(&s), nullptr);
  EXPECT_STREQ(railnetParamStr(&s), "eth0,eth1");
}

TEST_F(ParamTest, CachedUntilReset) {
  env.set("RAILNET_TEST_P", "6");
  railnetParam p = intParam("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(&p), 6);
  setenv("RAILNET_TEST_P", "8", 1);  // not seen: values are read once
  EXPECT_EQ(railnetParamInt(&p), 6);
}

TEST_F(ParamTest, RegisteredTablesAreListed) {
  bool found = false;
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    ASSERT_NE(tab, nullptr);
    for (int i = 0; i < tab->count; i++) {
      EXPECT_NE(tab->params[i].doc, nullptr);
      EXPECT_GT(strlen(tab->params[i].doc), 10u) << tab->params[i].name << " needs a one-line description";
      if (strcmp(tab->params[i].name, "RAILNET_TRANSPORT") == 0) found = true;
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
