// Params: NCCL's lookup order (environment, user conf file, /etc/nccl.conf), malformed values.
#include "test_util.h"
#include <string.h>
#include <set>

namespace {

// A declaration of the test's own, with its cache (C tables get theirs from the macros).
struct TestParam {
  railnetParamCache cache{};
  railnetParam decl;
  TestParam(const char* name, int64_t def, int64_t min, int64_t max)
      : decl{name, RAILNET_PARAM_INT, def, min, max, nullptr, "test param", &cache, nullptr} {}
  TestParam(const char* name, const char* defStr)
      : decl{name, RAILNET_PARAM_STR, 0, 0, 0, defStr, "test param", &cache, nullptr} {}
  const railnetParam* operator->() const { return &decl; }
  operator const railnetParam*() const { return &decl; }
  void forget() { cache = railnetParamCache{}; }  // read again at the next use
};

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
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 20);
  EXPECT_EQ(railnetParamSourceOf(p), RAILNET_SRC_DEFAULT);
}

TEST_F(ParamTest, EnvBeatsUserFileBeatsSystemFile) {
  dir.write("etc-nccl.conf", "RAILNET_TEST_P=3\n");
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 3);
  EXPECT_EQ(railnetParamSourceOf(p), RAILNET_SRC_SYSTEM_FILE);

  dir.write(".nccl.conf", "# user settings\nRAILNET_TEST_P = 5   # trailing comment\n");
  railnetParamReset();
  p.forget();
  EXPECT_EQ(railnetParamInt(p), 5);
  EXPECT_EQ(railnetParamSourceOf(p), RAILNET_SRC_USER_FILE);

  env.set("RAILNET_TEST_P", "7");
  p.forget();
  EXPECT_EQ(railnetParamInt(p), 7);
  EXPECT_EQ(railnetParamSourceOf(p), RAILNET_SRC_ENV);
}

TEST_F(ParamTest, NcclConfFileReplacesHomeFile) {
  dir.write(".nccl.conf", "RAILNET_TEST_P=5\n");
  std::string other = dir.write("other.conf", "\n\nRAILNET_TEST_P=9\n");
  env.set("NCCL_CONF_FILE", other.c_str());
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 9);
  EXPECT_EQ(railnetParamSourceOf(p), RAILNET_SRC_USER_FILE);
}

TEST_F(ParamTest, MalformedValueWarnsAndUsesDefault) {
  LogCapture log;
  env.set("RAILNET_TEST_P", "abc");
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 20);
  EXPECT_TRUE(LogCapture::contains("'abc' for RAILNET_TEST_P", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("default 20", NCCL_LOG_WARN));

  env.set("RAILNET_TEST_P", "12x");
  p.forget();
  EXPECT_EQ(railnetParamInt(p), 20);
  env.set("RAILNET_TEST_P", "");
  p.forget();
  EXPECT_EQ(railnetParamInt(p), 20);
  env.set("RAILNET_TEST_P", "99999999999999999999999");
  p.forget();
  EXPECT_EQ(railnetParamInt(p), 20);
}

TEST_F(ParamTest, OutOfRangeWarnsAndUsesDefault) {
  LogCapture log;
  env.set("RAILNET_TEST_P", "32");
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 20);
  EXPECT_TRUE(LogCapture::contains("Invalid value 32 for RAILNET_TEST_P", NCCL_LOG_WARN)) << LogCapture::all();
  env.set("RAILNET_TEST_P", " 0x1f ");
  p.forget();
  EXPECT_EQ(railnetParamInt(p), 31);
}

TEST_F(ParamTest, MalformedConfLineIsReportedAndSkipped) {
  LogCapture log;
  dir.write(".nccl.conf", "garbage line\n=5\nRAILNET_TEST_P=4\n");
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 4);
  EXPECT_TRUE(LogCapture::contains(".nccl.conf:1", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains(".nccl.conf:2", NCCL_LOG_WARN)) << LogCapture::all();
}

TEST_F(ParamTest, StringParam) {
  TestParam s("RAILNET_TEST_P", nullptr);
  EXPECT_EQ(railnetParamStr(s), nullptr);
  dir.write("etc-nccl.conf", "RAILNET_TEST_P=eth0,eth1\n");
  railnetParamReset();
  s.forget();
  ASSERT_NE(railnetParamStr(s), nullptr);
  EXPECT_STREQ(railnetParamStr(s), "eth0,eth1");
}

TEST_F(ParamTest, CachedUntilReset) {
  env.set("RAILNET_TEST_P", "6");
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 6);
  setenv("RAILNET_TEST_P", "8", 1);  // not seen: values are read once
  EXPECT_EQ(railnetParamInt(p), 6);
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

// By name: a declared variable reads like its declaration; a name nobody declared is a bug
// that WARNs and reads as unset.
TEST_F(ParamTest, ByNameReadsTheDeclaration) {
  LogCapture log;
  env.set("NCCL_SOCKET_IFNAME", "=eth1");
  env.set("NCCL_IB_TIMEOUT", "22");
  railnetParamSource src = RAILNET_SRC_DEFAULT;
  EXPECT_STREQ(railnetParamRaw("NCCL_SOCKET_IFNAME", &src), "=eth1");
  EXPECT_EQ(src, RAILNET_SRC_ENV);
  EXPECT_STREQ(railnetParamStrByName("NCCL_SOCKET_IFNAME"), "=eth1");
  EXPECT_EQ(railnetParamIntByName("NCCL_IB_TIMEOUT"), 22);
  const railnetParam* decl = railnetParamFind("NCCL_IB_TIMEOUT");
  ASSERT_NE(decl, nullptr);
  EXPECT_EQ(railnetParamInt(decl), 22);
  EXPECT_EQ(railnetParamFind("NCCL_NOT_A_RAILNET_VARIABLE"), nullptr);

  setenv("RAILNET_UNDECLARED_FOR_TEST", "1", 1);
  EXPECT_EQ(railnetParamRaw("RAILNET_UNDECLARED_FOR_TEST", &src), nullptr);
  unsetenv("RAILNET_UNDECLARED_FOR_TEST");
  EXPECT_EQ(src, RAILNET_SRC_DEFAULT);
  EXPECT_TRUE(LogCapture::contains("RAILNET_UNDECLARED_FOR_TEST, which no param table declares", NCCL_LOG_WARN))
      << LogCapture::all();
}

// A malformed value says so to the diag (railnetParamMalformed) and reads as the default.
TEST_F(ParamTest, MalformedIsVisible) {
  LogCapture log;
  env.set("RAILNET_TEST_P", "oops");
  TestParam p("RAILNET_TEST_P", 20, 1, 31);
  EXPECT_EQ(railnetParamInt(p), 20);
  EXPECT_TRUE(railnetParamMalformed(p));
  EXPECT_EQ(railnetParamSourceOf(p), RAILNET_SRC_DEFAULT);
}

// Every name is declared once, in one table.
TEST_F(ParamTest, NoNameDeclaredTwice) {
  std::set<std::string> seen;
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++)
      EXPECT_TRUE(seen.insert(tab->params[i].name).second) << tab->params[i].name << " declared twice";
  }
  for (const char* name : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_CONF_FILE",
                           "RAILNET_SYSTEM_CONF", "RAILNET_TRANSPORT"})
    EXPECT_TRUE(seen.count(name)) << name << " is read by railnet but not declared";
}

}  // namespace
