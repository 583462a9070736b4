// NCCL 2.30's connection-routing knobs on devices set up by the test: subnet-aware routing
// (NCCL_IB_SUBNET_AWARE_ROUTING, NCCL_IB_SUBNET_PREFIX_LEN) and the rail-local check
// (NCCL_IB_WARN_RAIL_LOCAL); and the receive-side choices that 2.30's variables force.
#include "test_util.h"
#include <arpa/inet.h>
#include <string.h>

extern "C" {
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/matching.h"
#include "../../src/transport/net_ib/routing.h"
#include "testing.h"
}

namespace {

union ibv_gid v4Gid(const char* addr) {
  union ibv_gid g;
  memset(&g, 0, sizeof(g));
  g.raw[10] = g.raw[11] = 0xff;
  inet_pton(AF_INET, addr, g.raw + 12);
  return g;
}

union ibv_gid v6Gid(const char* addr) {
  union ibv_gid g;
  inet_pton(AF_INET6, addr, g.raw);
  return g;
}

TEST(IbRoutingTest, SameSubnetByPrefixLength) {
  union ibv_gid a = v4Gid("198.18.0.1"), b = v4Gid("198.18.0.200"), c = v4Gid("198.18.1.1");
  EXPECT_TRUE(railnetIbGidSameSubnet(&a, &b, 24));
  EXPECT_FALSE(railnetIbGidSameSubnet(&a, &c, 24));
  EXPECT_TRUE(railnetIbGidSameSubnet(&a, &c, 16));
  EXPECT_FALSE(railnetIbGidSameSubnet(&a, &b, 32));
  EXPECT_TRUE(railnetIbGidSameSubnet(&a, &a, 32));
  union ibv_gid d = v6Gid("2001:db8:0:1::1"), e = v6Gid("2001:db8:0:1::2"), f = v6Gid("2001:db8:0:2::1");
  EXPECT_TRUE(railnetIbGidSameSubnet(&d, &e, 24));
  EXPECT_FALSE(railnetIbGidSameSubnet(&d, &f, 24));
  EXPECT_FALSE(railnetIbGidSameSubnet(&a, &d, 24));  // families differ
}

// Two single-port vDevices on 198.18.0.0/24 and 198.18.1.0/24, and their fusion.
class IbRoutingDevsTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  int savedN = 0, savedM = 0;
  void SetUp() override {
    savedN = ncclNIbDevs;
    savedM = ncclNMergedIbDevs;
    const char* addrs[] = {"198.18.0.1", "198.18.1.1"};
    for (int d = 0; d < 2; d++) {
      memset(&ncclIbDevs[d], 0, sizeof(ncclIbDevs[d]));
      snprintf(ncclIbDevs[d].devName, sizeof(ncclIbDevs[d].devName), "rxe%d", d);
      ncclIbDevs[d].link = IBV_LINK_LAYER_ETHERNET;
      ncclIbDevs[d].gidIndex = 1;
      ncclIbDevs[d].gid = v4Gid(addrs[d]);
      memset(&ncclIbMergedDevs[d], 0, sizeof(ncclIbMergedDevs[d]));
      ncclIbMergedDevs[d].vProps.ndevs = 1;
      ncclIbMergedDevs[d].vProps.devs[0] = d;
      snprintf(ncclIbMergedDevs[d].devName, sizeof(ncclIbMergedDevs[d].devName), "rxe%d", d);
    }
    memset(&ncclIbMergedDevs[2], 0, sizeof(ncclIbMergedDevs[2]));
    ncclIbMergedDevs[2].vProps.ndevs = 2;
    ncclIbMergedDevs[2].vProps.devs[0] = 0;
    ncclIbMergedDevs[2].vProps.devs[1] = 1;
    snprintf(ncclIbMergedDevs[2].devName, sizeof(ncclIbMergedDevs[2].devName), "rxe0+rxe1");
    ncclNIbDevs = 2;
    ncclNMergedIbDevs = 3;
  }
  void TearDown() override {
    memset(ncclIbDevs, 0, 2 * sizeof(ncclIbDevs[0]));
    memset(ncclIbMergedDevs, 0, 3 * sizeof(ncclIbMergedDevs[0]));
    ncclNIbDevs = savedN;
    ncclNMergedIbDevs = savedM;
  }
};

TEST_F(IbRoutingDevsTest, OffByDefault) {
  union ibv_gid gids[RAILNET_IB_HANDLE_GIDS];
  railnetIbListenGids(1, gids);
  union ibv_gid zero;
  memset(&zero, 0, sizeof(zero));
  EXPECT_EQ(memcmp(&gids[0], &zero, sizeof(zero)), 0);
  union ibv_gid peer = v4Gid("198.18.1.9");
  EXPECT_EQ(railnetIbSubnetRoute(0, &peer, 1, "peer"), 0);
}

TEST_F(IbRoutingDevsTest, SwitchesToTheDeviceOnThePeersSubnet) {
  env.set("NCCL_IB_SUBNET_AWARE_ROUTING", "1");
  union ibv_gid gids[RAILNET_IB_HANDLE_GIDS];
  railnetIbListenGids(2, gids);  // the fused device: both ports' GIDs
  EXPECT_EQ(memcmp(&gids[0], &ncclIbDevs[0].gid, sizeof(gids[0])), 0);
  EXPECT_EQ(memcmp(&gids[1], &ncclIbDevs[1].gid, sizeof(gids[1])), 0);
  union ibv_gid peer = v4Gid("198.18.1.9");
  LogCapture log;
  EXPECT_EQ(railnetIbSubnetRoute(0, &peer, 1, "198.18.1.9<1>"), 1);
  EXPECT_TRUE(LogCapture::contains("Subnet-aware routing: overriding dev 0 (rxe0) with dev 1 (rxe1)"))
      << LogCapture::all();
  EXPECT_EQ(railnetIbSubnetRoute(1, &peer, 1, "p"), 1);  // the asked-for device reaches it: kept
  // the fused device is kept only when both its ports reach the peer
  union ibv_gid both[2] = {v4Gid("198.18.0.9"), v4Gid("198.18.1.9")};
  EXPECT_EQ(railnetIbSubnetRoute(2, both, 2, "p"), 2);
  EXPECT_EQ(railnetIbSubnetRoute(2, &peer, 1, "p"), 1);
  // a wider prefix puts both on one subnet
  env.set("NCCL_IB_SUBNET_PREFIX_LEN", "16");
  EXPECT_EQ(railnetIbSubnetRoute(0, &peer, 1, "p"), 0);
  // nowhere to go, or a peer that told nothing: kept
  env.set("NCCL_IB_SUBNET_PREFIX_LEN", "24");
  union ibv_gid far = v4Gid("198.19.5.5"), none;
  memset(&none, 0, sizeof(none));
  EXPECT_EQ(railnetIbSubnetRoute(0, &far, 1, "p"), 0);
  EXPECT_EQ(railnetIbSubnetRoute(0, &none, 1, "p"), 0);
}

TEST_F(IbRoutingDevsTest, RailLocalInfoOnlyWhenAskedAndDifferent) {
  struct ncclIbConnectionMetadata rem;
  memset(&rem, 0, sizeof(rem));
  rem.ndevs = 1;
  rem.devs[0].physDev = 2;  // the peer's physical device 1
  {
    LogCapture log;
    railnetIbCheckRailLocal(&ncclIbMergedDevs[2].vProps, &rem, "p");
    EXPECT_FALSE(LogCapture::contains("mismatched physical devices")) << LogCapture::all();
  }
  env.set("NCCL_IB_WARN_RAIL_LOCAL", "1");
  {
    LogCapture log;
    railnetIbCheckRailLocal(&ncclIbMergedDevs[2].vProps, &rem, "p");
    EXPECT_TRUE(LogCapture::contains("mismatched physical devices between local (0,1) and remote (1, peer p)"))
        << LogCapture::all();
  }
  {
    LogCapture log;
    railnetIbCheckRailLocal(&ncclIbMergedDevs[1].vProps, &rem, "p");  // 1 and 1: rail-local
    rem.devs[0].physDev = 0;                                          // a peer that does not say
    railnetIbCheckRailLocal(&ncclIbMergedDevs[2].vProps, &rem, "p");
    EXPECT_FALSE(LogCapture::contains("mismatched physical devices")) << LogCapture::all();
  }
}

TEST(IbMatchingTest, OooRqAndFailoverForceIdMatchingAndPrepost) {
  ScopedEnv env;
  EXPECT_EQ(railnetIbRecvMatchingScheme(), RAILNET_IB_MATCH_BY_INDEX);
  EXPECT_EQ(railnetIbPrepostRecvs(), 0);
  env.set("NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", "1");
  env.set("NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", "1");
  EXPECT_EQ(railnetIbRecvMatchingScheme(), RAILNET_IB_MATCH_BY_ID);
  EXPECT_EQ(railnetIbPrepostRecvs(), 1);
  env.set("NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", "0");
  env.set("NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", "0");
  EXPECT_EQ(railnetIbRecvMatchingScheme(), RAILNET_IB_MATCH_BY_INDEX);
  for (const char* v : {"NCCL_IB_OOO_RQ", "NCCL_IB_RESILIENCY_PORT_FAILOVER"}) {
    ScopedEnv one;
    one.set(v, "1");
    EXPECT_EQ(railnetIbRecvMatchingScheme(), RAILNET_IB_MATCH_BY_ID) << v;
    EXPECT_EQ(railnetIbPrepostRecvs(), 1) << v;
  }
}

}  // namespace
