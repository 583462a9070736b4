// Eager messages' agreement in the connection metadata (src/transport/net_ib/eager/eager.c): a
// receiver takes them only from a sender whose rings come from the receiver's pool when needed
// (RAILNET_IB_FLAG_EAGER_POOL); an older railnet's request (rings made at connect,
// RAILNET_IB_FLAG_EAGER_TAGS; tagless, RAILNET_IB_FLAG_EAGER) and a sender with
// RAILNET_IB_EAGER_SIZE=0 get the clear-to-send protocol, with an INFO saying why.
// No device is touched on those paths: the comm is a zeroed struct, as before connect.
#include "test_util.h"
#include <string.h>

extern "C" {
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/eager/eager.h"
#include "testing.h"
}

namespace {

class IbEagerMetaTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  struct ncclIbRecvComm comm;
  struct ncclIbConnectionMetadata rem, meta;
  void SetUp() override {
    memset(&comm, 0, sizeof(comm));
    memset(&rem, 0, sizeof(rem));
    memset(&meta, 0, sizeof(meta));
    env.set("RAILNET_IB_EAGER_SIZE", "1024");
    railnetParamReset();
  }
  void TearDown() override {
    env.set("RAILNET_IB_EAGER_SIZE", nullptr);
    railnetParamReset();
  }
  // The receiver's answer to a sender with these flags: its metadata's flags, eager off.
  std::string answer(int flags) {
    rem.devs[0].flags = (uint8_t)flags;
    rem.eagerSize = 1024;
    rem.eagerAddr = 0x1000;
    LogCapture cap;
    EXPECT_EQ(railnetIbEagerRecvSetup(&comm, &rem, &meta, "peer"), ncclSuccess);
    EXPECT_EQ(comm.eager, nullptr);
    EXPECT_EQ(meta.devs[0].flags & RAILNET_IB_FLAG_EAGER_ANY, 0);
    return LogCapture::all();
  }
};

TEST_F(IbEagerMetaTest, AnOlderRailnetsTaglessEagerGetsTheClearToSendProtocol) {
  std::string log = answer(RAILNET_IB_FLAG_EAGER | RAILNET_IB_FLAG_EAGER_RTS);
  EXPECT_NE(log.find("no eager messages: the sender's railnet is older"), std::string::npos) << log;
}

TEST_F(IbEagerMetaTest, AnOlderRailnetsRingsMadeAtConnectGetTheClearToSendProtocol) {
  std::string log = answer(RAILNET_IB_FLAG_EAGER_TAGS | RAILNET_IB_FLAG_EAGER_FO);
  EXPECT_NE(log.find("no eager messages: the sender's railnet is older (its eager rings are made at connect"),
            std::string::npos)
      << log;
}

TEST_F(IbEagerMetaTest, ASenderWithEagerOffGetsTheClearToSendProtocol) {
  std::string log = answer(0);
  EXPECT_NE(log.find("the sender has them off (RAILNET_IB_EAGER_SIZE=0 there"), std::string::npos) << log;
}

TEST_F(IbEagerMetaTest, TheSenderAsksForPooledRingsWithItsSize) {
  struct ncclIbSendComm* sc = (struct ncclIbSendComm*)calloc(1, sizeof(struct ncclIbSendComm));
  ASSERT_NE(sc, nullptr);
  railnetIbEagerSendMeta(sc, &meta);
  EXPECT_EQ(meta.devs[0].flags & RAILNET_IB_FLAG_EAGER_ANY, RAILNET_IB_FLAG_EAGER_POOL);
  EXPECT_EQ(meta.eagerSize, 1024u);
  EXPECT_EQ(meta.eagerAddr, (uint64_t)(uintptr_t)&sc->eagerCredit);
  free(sc);
}

}  // namespace

TEST(IbEagerDefault, OnAt4096WhenUnsetAndOffAtZero) {
  ScopedEnv env;
  env.set("RAILNET_IB_EAGER_SIZE", nullptr);
  railnetParamReset();
  EXPECT_EQ(railnetIbEagerSize(), 4096);
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  railnetParamReset();
  EXPECT_EQ(railnetIbEagerSize(), 0);
  env.set("RAILNET_IB_EAGER_SIZE", nullptr);
  railnetParamReset();
}
