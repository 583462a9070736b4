// The NCCL_SOCKET_IFNAME / NCCL_IB_HCA list syntax (src/misc/ifmatch.c).
#include <string>
#include <vector>
#include "test_util.h"

extern "C" {
#include "socket.h"
}

namespace {

// Names of `names` the spec selects (port -1: not applicable).
std::vector<std::string> selected(const char* spec, const std::vector<std::string>& names, int allowPort = 0) {
  railnetIfList list;
  EXPECT_EQ(railnetIfListParse(spec, allowPort, &list), ncclSuccess) << spec;
  std::vector<std::string> out;
  for (auto& n : names)
    if (railnetIfListSelects(&list, n.c_str(), -1)) out.push_back(n);
  return out;
}

const std::vector<std::string> kIfs = {"ib0", "ib1", "ibp3s0", "eth0", "eth1", "eth10", "docker0", "lo", "virbr0"};
using V = std::vector<std::string>;

}  // namespace

TEST(IfMatch, PrefixesSelectEveryNameStartingWithThem) {
  EXPECT_EQ(selected("ib", kIfs), (V{"ib0", "ib1", "ibp3s0"}));
  EXPECT_EQ(selected("eth1", kIfs), (V{"eth1", "eth10"}));
  EXPECT_EQ(selected("eth1,lo", kIfs), (V{"eth1", "eth10", "lo"}));
  EXPECT_EQ(selected("nomatch", kIfs), V{});
}

TEST(IfMatch, EqualsAsksForExactNames) {
  EXPECT_EQ(selected("=eth1", kIfs), V{"eth1"});
  EXPECT_EQ(selected("=eth1,ib0", kIfs), (V{"ib0", "eth1"}));
  EXPECT_EQ(selected("=eth", kIfs), V{});
  railnetIfList l;
  ASSERT_EQ(railnetIfListParse("=eth1", 0, &l), ncclSuccess);
  EXPECT_TRUE(l.exact);
  EXPECT_FALSE(l.exclude);
}

TEST(IfMatch, CaretExcludes) {
  EXPECT_EQ(selected("^docker,lo,virbr", kIfs), (V{"ib0", "ib1", "ibp3s0", "eth0", "eth1", "eth10"}));
  EXPECT_EQ(selected("^eth1", kIfs), (V{"ib0", "ib1", "ibp3s0", "eth0", "docker0", "lo", "virbr0"}));
}

TEST(IfMatch, CaretEqualsExcludesExactNames) {
  EXPECT_EQ(selected("^=eth1,lo", kIfs), (V{"ib0", "ib1", "ibp3s0", "eth0", "eth10", "docker0", "virbr0"}));
  EXPECT_EQ(selected("^=eth", kIfs), kIfs);
  railnetIfList l;
  ASSERT_EQ(railnetIfListParse("^=eth1", 0, &l), ncclSuccess);
  EXPECT_TRUE(l.exact);
  EXPECT_TRUE(l.exclude);
}

TEST(IfMatch, EmptyListSelectsEverythingAndCaretAloneNothing) {
  // NCCL's matchIfList: no entries means no restriction; '^' inverts that.
  EXPECT_EQ(selected(nullptr, kIfs), kIfs);
  EXPECT_EQ(selected("", kIfs), kIfs);
  EXPECT_EQ(selected(" , ,", kIfs), kIfs);
  EXPECT_EQ(selected("=", kIfs), kIfs);
  EXPECT_EQ(selected("^", kIfs), V{});
  EXPECT_EQ(selected("^=", kIfs), V{});
  EXPECT_TRUE(railnetIfListSelects(nullptr, "eth0", -1));
  railnetIfList l;
  ASSERT_EQ(railnetIfListParse("eth", 0, &l), ncclSuccess);
  EXPECT_FALSE(railnetIfListSelects(&l, nullptr, -1));
}

TEST(IfMatch, SpacesAroundModifiersAndEntriesAreIgnored) {
  EXPECT_EQ(selected("  eth1 ,  lo ", kIfs), (V{"eth1", "eth10", "lo"}));
  EXPECT_EQ(selected(" ^ = eth1 , lo", kIfs), (V{"ib0", "ib1", "ibp3s0", "eth0", "eth10", "docker0", "virbr0"}));
  EXPECT_EQ(selected("eth0,,ib1,", kIfs), (V{"ib1", "eth0"}));
  railnetIfList l;
  ASSERT_EQ(railnetIfListParse(" = eth1 ,\tlo\t", 0, &l), ncclSuccess);
  ASSERT_EQ(l.count, 2);
  EXPECT_STREQ(l.entries[0].name, "eth1");
  EXPECT_STREQ(l.entries[1].name, "lo");
}

TEST(IfMatch, MalformedListsWarnWithTheValueAndFail) {
  struct Case { std::string spec; std::string warn; };
  std::string tooLong(64, 'x');
  std::string many;
  for (int i = 0; i <= RAILNET_IFLIST_MAX; i++) many += "e" + std::to_string(i) + ",";
  std::vector<Case> cases = {
      {tooLong, "longer than 63"},
      {"eth0," + tooLong, "longer than 63"},
      {many, "more than 32 entries"},
      {"eth 0", "contains a space"},
      {"eth\x01", "control character"},
  };
  for (auto& c : cases) {
    LogCapture log;
    railnetIfList l;
    l.count = 5;
    EXPECT_EQ(railnetIfListParse(c.spec.c_str(), 0, &l), ncclInvalidArgument) << c.spec;
    EXPECT_EQ(l.count, 0) << "a failed parse leaves an empty list";
    EXPECT_TRUE(log.contains(c.warn, NCCL_LOG_WARN)) << c.spec << "\n" << log.all();
    EXPECT_TRUE(log.contains("\"" + c.spec + "\"", NCCL_LOG_WARN)) << log.all();
  }
  // A name of exactly 63 characters fits; 32 entries fit.
  railnetIfList l;
  EXPECT_EQ(railnetIfListParse(std::string(63, 'x').c_str(), 0, &l), ncclSuccess);
  many.clear();
  for (int i = 0; i < RAILNET_IFLIST_MAX; i++) many += "e" + std::to_string(i) + ",";
  EXPECT_EQ(railnetIfListParse(many.c_str(), 0, &l), ncclSuccess);
  EXPECT_EQ(l.count, RAILNET_IFLIST_MAX);
  EXPECT_EQ(railnetIfListParse("eth0", 0, nullptr), ncclInvalidArgument);
}

TEST(IfMatch, WithoutPortsAColonIsPartOfTheName) {
  // getifaddrs names IPv4 alias labels "eth0:1".
  railnetIfList l;
  ASSERT_EQ(railnetIfListParse("=eth0:1", 0, &l), ncclSuccess);
  ASSERT_EQ(l.count, 1);
  EXPECT_STREQ(l.entries[0].name, "eth0:1");
  EXPECT_EQ(l.entries[0].port, -1);
  EXPECT_TRUE(railnetIfListSelects(&l, "eth0:1", -1));
  EXPECT_FALSE(railnetIfListSelects(&l, "eth0", -1));
}

TEST(IfMatch, PortsRestrictADeviceToOnePort) {
  railnetIfList l;
  ASSERT_EQ(railnetIfListParse("mlx5_0:1,mlx5_1", 1, &l), ncclSuccess);
  ASSERT_EQ(l.count, 2);
  EXPECT_STREQ(l.entries[0].name, "mlx5_0");
  EXPECT_EQ(l.entries[0].port, 1);
  EXPECT_EQ(l.entries[1].port, -1);
  EXPECT_TRUE(railnetIfListSelects(&l, "mlx5_0", 1));
  EXPECT_FALSE(railnetIfListSelects(&l, "mlx5_0", 2));
  EXPECT_TRUE(railnetIfListSelects(&l, "mlx5_0", -1));  // port not asked: any
  EXPECT_TRUE(railnetIfListSelects(&l, "mlx5_1", 2));
  EXPECT_FALSE(railnetIfListSelects(&l, "mlx4_0", 1));

  ASSERT_EQ(railnetIfListParse("^=mlx5_0:2", 1, &l), ncclSuccess);
  EXPECT_TRUE(railnetIfListSelects(&l, "mlx5_0", 1));
  EXPECT_FALSE(railnetIfListSelects(&l, "mlx5_0", 2));
  EXPECT_TRUE(railnetIfListSelects(&l, "mlx5_01", 2));

  ASSERT_EQ(railnetIfListParse(" mlx5_0 : 1 , mlx5_1:", 1, &l), ncclSuccess);
  EXPECT_STREQ(l.entries[0].name, "mlx5_0");
  EXPECT_EQ(l.entries[0].port, 1);
  EXPECT_EQ(l.entries[1].port, -1);  // empty port: any, as in NCCL
  ASSERT_EQ(railnetIfListParse("mlx5_0:255", 1, &l), ncclSuccess);
  EXPECT_EQ(l.entries[0].port, 255);
}

TEST(IfMatch, BadPortsWarnAndFail) {
  struct Case { const char* spec; const char* warn; };
  std::vector<Case> cases = {
      {"mlx5_0:x", "not a number"},     {"mlx5_0:-1", "not a number"}, {"mlx5_0:1x", "not a number"},
      {"mlx5_0:0", "out of range"},     {"mlx5_0:256", "out of range"},
      {"mlx5_0:99999999999999999999", "out of range"},
      {"mlx5_0:1:2", "more than one ':'"}, {":1", "has no name"},
  };
  for (auto& c : cases) {
    LogCapture log;
    railnetIfList l;
    EXPECT_EQ(railnetIfListParse(c.spec, 1, &l), ncclInvalidArgument) << c.spec;
    EXPECT_TRUE(log.contains(c.warn, NCCL_LOG_WARN)) << c.spec << "\n" << log.all();
    EXPECT_TRUE(log.contains(std::string("\"") + c.spec + "\"", NCCL_LOG_WARN)) << log.all();
  }
}

TEST(IfMatch, ListThatNamesNothing) {
  for (const char* spec : {"", "^", "=", ",", "^=", "=,", " ^ = , , "}) EXPECT_TRUE(railnetIfListNamesNothing(spec)) << spec;
  for (const char* spec : {"e", "^lo", "=eth0", ",eth0", "^=,x"}) EXPECT_FALSE(railnetIfListNamesNothing(spec)) << spec;
  EXPECT_FALSE(railnetIfListNamesNothing(nullptr));
}
