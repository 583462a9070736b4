// NCCL 2.30's connection-routing and capability variables on real soft-RoCE (the tier's
// rxe0 = 198.18.0.1 and rxe1 = 198.18.0.2 on one veth pair): subnet-aware routing moves a
// connector to the device on the listener's subnet and data still moves; the rail-local
// INFO; Data Direct and OOO RQ reported as not available. Both ends in this process (the
// sender on a thread).
#include "test_util.h"
#include <string.h>
#include <functional>
#include <thread>
#include "net_pair.h"

extern "C" {
#include "ibvwrap.h"
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

class IbRoutingSoftRoceTest : public IbTwoDevicesTest {
 protected:
  void init() { initTwoDevices(); }
  // Listen on listenDev, connect from connectDev, move a few sizes; "" or what failed.
  std::string pairAndMove(int listenDev, int connectDev, int* sendVDev, int* recvVDev,
                          const std::function<void(void*, void*)>& check = nullptr, const NetPlan* given = nullptr) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    if (ib->listen(ctx, listenDev, handle, &lc) != ncclSuccess) return "listen failed";
    if (!netConnectPair(ib, ctx, connectDev, handle, lc, &sc, &rc, 60000)) {
      ib->closeListen(lc);
      return "connect/accept failed";
    }
    *sendVDev = ((struct ncclIbNetCommBase*)sc)->vDev;
    *recvVDev = ((struct ncclIbNetCommBase*)rc)->vDev;
    if (check) check(sc, rc);
    NetPlan plan;
    if (given) plan = *given;
    else plan.sizes = {0, 1, 4095, 65536 + 3, 1 << 20};
    plan.deadlineMs = 120000;
    std::string err = netRunPairInProcess(ib, sc, rc, plan);
    ib->closeListen(lc);
    return err;
  }
};

TEST_F(IbRoutingSoftRoceTest, SubnetAwareRoutingMovesTheConnectorToTheListenersSubnet) {
  // /32: rxe0 (198.18.0.1) is not on the listener's (rxe1, 198.18.0.2) subnet, rxe1 is
  env.set("NCCL_IB_SUBNET_AWARE_ROUTING", "1");
  env.set("NCCL_IB_SUBNET_PREFIX_LEN", "32");
  init();
  LogCapture cap;
  int sv = -1, rv = -1;
  EXPECT_EQ(pairAndMove(1, 0, &sv, &rv), "") << LogCapture::all();
  EXPECT_EQ(sv, 1) << LogCapture::all();
  EXPECT_EQ(rv, 1);
  EXPECT_TRUE(LogCapture::contains("Subnet-aware routing: overriding dev 0 (" + std::string(ncclIbDevs[0].devName) +
                                   ") with dev 1 (" + ncclIbDevs[1].devName + ")"))
      << LogCapture::all();
}

TEST_F(IbRoutingSoftRoceTest, SubnetAwareRoutingKeepsADeviceThatReachesThePeer) {
  env.set("NCCL_IB_SUBNET_AWARE_ROUTING", "1");  // /24: both devices are on 198.18.0.0/24
  init();
  LogCapture cap;
  int sv = -1, rv = -1;
  EXPECT_EQ(pairAndMove(1, 0, &sv, &rv), "") << LogCapture::all();
  EXPECT_EQ(sv, 0);
  EXPECT_EQ(rv, 1);
  EXPECT_FALSE(LogCapture::contains("Subnet-aware routing")) << LogCapture::all();
}

TEST_F(IbRoutingSoftRoceTest, RailLocalInfoNamesBothSidesDevices) {
  env.set("NCCL_IB_WARN_RAIL_LOCAL", "1");
  init();
  LogCapture cap;
  int sv = -1, rv = -1;
  EXPECT_EQ(pairAndMove(0, 1, &sv, &rv), "") << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("mismatched physical devices between local (1) and remote (0, peer "))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("mismatched physical devices between local (0) and remote (1, peer "))
      << LogCapture::all();
}

TEST_F(IbRoutingSoftRoceTest, DataDirectAndOooRqAreReportedNotAvailable) {
  {
    LogCapture cap;
    init();
    EXPECT_FALSE(LogCapture::contains("NCCL_IB_OOO_RQ")) << LogCapture::all();
    EXPECT_FALSE(LogCapture::contains("NCCL_IB_DATA_DIRECT")) << LogCapture::all();
    ib->finalize(ctx);
    ctx = nullptr;
    railnetIbResetDevices();
  }
  env.set("NCCL_IB_OOO_RQ", "1");
  env.set("NCCL_IB_DATA_DIRECT", "2");
  LogCapture cap;
  init();
  std::string devs = std::string(ncclIbDevs[0].devName) + ":1, " + ncclIbDevs[1].devName + ":1";
  EXPECT_TRUE(LogCapture::contains("NCCL_IB_OOO_RQ=1: out-of-order receive queues are not available on " + devs,
                                   NCCL_LOG_INFO))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NCCL_IB_DATA_DIRECT=2: mlx5 Data Direct DMA is not available on " + devs,
                                   NCCL_LOG_INFO))
      << LogCapture::all();
  // the data path is unchanged
  int sv = -1, rv = -1;
  EXPECT_EQ(pairAndMove(0, 1, &sv, &rv), "") << LogCapture::all();
}

// ID-based matching and pre-posted receive WRs (failover off), alone and together, over
// one and two QPs, data split or not, with multi-receives and more receives in flight than
// the QPs: data and sizes right, and the receiver told the sender its scheme. With the
// clear-to-send protocol (RAILNET_IB_EAGER_SIZE=0) NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=0
// holds; with eager messages at their default the receiver pre-posts for them after all.
TEST_F(IbRoutingSoftRoceTest, IdMatchingAndPrepostedReceivesMoveData) {
  struct Mode { const char* scheme; const char* prepost; const char* qps; const char* split; const char* eager; };
  for (Mode m : {Mode{"1", "0", "1", "0", "0"}, Mode{"0", "1", "1", "0", "0"}, Mode{"1", "1", "1", "0", "0"},
                 Mode{"0", "1", "2", "0", "0"}, Mode{"0", "1", "2", "1", "0"}, Mode{"1", "0", "2", "1", "0"},
                 Mode{"0", "0", "1", "0", nullptr}, Mode{"1", "0", "2", "1", nullptr}}) {
    std::string what = std::string("scheme=") + m.scheme + " prepost=" + m.prepost + " qps=" + m.qps +
                       " split=" + m.split + " eager=" + (m.eager ? m.eager : "default");
    env.set("NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", m.scheme);
    env.set("NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", m.prepost);
    env.set("NCCL_IB_QPS_PER_CONNECTION", m.qps);
    env.set("NCCL_IB_SPLIT_DATA_ON_QPS", m.split);
    env.set("RAILNET_IB_EAGER_SIZE", m.eager);
    init();
    LogCapture cap;
    NetPlan plan;
    plan.sizes = {0, 1, 4095, 65536 + 3, 1 << 20, 7};
    std::vector<NetMsg> g;
    for (int i = 0; i < 4; i++) g.push_back(NetMsg{(size_t)(i * 4099 + 1), (size_t)(i * 4099 + 64)});
    for (int k = 0; k < 5; k++) plan.groups.push_back(g);
    for (int k = 0; k < 40; k++) plan.groups.push_back({NetMsg{(size_t)(k * 997) % 70000, 70000}});
    plan.inflight = 8;
    bool byId = m.scheme[0] == '1', eager = m.eager == nullptr, pre = m.prepost[0] == '1' || eager;
    int sv = -1, rv = -1;
    EXPECT_EQ(pairAndMove(0, 1, &sv, &rv, [&](void* sc, void* rc) {
      EXPECT_EQ(((struct ncclIbNetCommBase*)sc)->matchById, byId) << what;
      EXPECT_EQ(((struct ncclIbNetCommBase*)rc)->matchById, byId) << what;
      EXPECT_EQ(((struct ncclIbRecvComm*)rc)->prepost, pre) << what;
    }, &plan), "") << what << "\n" << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains(std::string("completions matched by ") + (byId ? "ID" : "index") +
                                     ", receive work requests " +
                                     (m.prepost[0] == '1' ? "pre-posted" : "posted on demand")))
        << what << LogCapture::all();
    EXPECT_EQ(LogCapture::contains("receive work requests pre-posted for them after all"), eager && m.prepost[0] == '0')
        << what << LogCapture::all();
    ib->finalize(ctx);
    ctx = nullptr;
    railnetIbResetDevices();
  }
}

}  // namespace
