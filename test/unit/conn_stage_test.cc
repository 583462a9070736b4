// conn_stage.c, the connection setup both transports share: the registry of connects in
// progress (keyed by the handle's address, and by what the handle held), the handle magic
// check and the port-0 listen socket.
#include <arpa/inet.h>
#include <string.h>
#include <vector>
#include "test_util.h"

extern "C" {
#include "conn_stage.h"
}

namespace {

struct Stage {
  struct railnetConnStage link;
  int id;
};

std::vector<int>& dropped() {
  static std::vector<int> d;
  return d;
}

void dropStage(struct railnetConnStage* s) {
  Stage* st = reinterpret_cast<Stage*>(s);
  dropped().push_back(st->id);
  delete st;
}

struct ConnStage : ::testing::Test {
  struct railnetConnStages reg = RAILNET_CONN_STAGES_INIT("NET/Test", dropStage);
  void SetUp() override { dropped().clear(); }
  void TearDown() override { railnetConnStageDropAll(&reg); }
  Stage* add(const void* key, size_t len, int id) {
    Stage* s = new Stage();
    s->id = id;
    railnetConnStageAdd(&reg, &s->link, key, len);
    return s;
  }
};

TEST_F(ConnStage, FoundAgainByTheSameHandle) {
  char h1[NCCL_NET_HANDLE_MAXSIZE], h2[NCCL_NET_HANDLE_MAXSIZE];
  memset(h1, 1, sizeof(h1));
  memset(h2, 2, sizeof(h2));
  EXPECT_EQ(railnetConnStageFind(&reg, h1), nullptr);
  Stage* a = add(h1, 48, 1);
  Stage* b = add(h2, 48, 2);
  EXPECT_EQ(railnetConnStageFind(&reg, h1), &a->link);
  EXPECT_EQ(railnetConnStageFind(&reg, h2), &b->link);
  h1[60] = 9;  // beyond the handle's bytes: still the same handle
  EXPECT_EQ(railnetConnStageFind(&reg, h1), &a->link);
  railnetConnStageRemove(&reg, &a->link);
  delete a;
  EXPECT_EQ(railnetConnStageFind(&reg, h1), nullptr);
  EXPECT_TRUE(dropped().empty());
}

TEST_F(ConnStage, NewHandleAtTheSameAddressDropsTheAbandonedConnect) {
  LogCapture log;
  char h[NCCL_NET_HANDLE_MAXSIZE];
  memset(h, 1, sizeof(h));
  Stage* a = add(h, 48, 7);
  a->link.state = 3;
  h[5] = 2;  // the caller reused its buffer for another handle
  EXPECT_EQ(railnetConnStageFind(&reg, h), nullptr);
  ASSERT_EQ(dropped(), std::vector<int>{7});
  EXPECT_TRUE(LogCapture::contains("NET/Test : dropping an abandoned connect (state 3)", NCCL_LOG_INFO))
      << LogCapture::all();
  EXPECT_EQ(railnetConnStageFind(&reg, h), nullptr);  // and it is gone
}

TEST_F(ConnStage, DropAllFreesEveryStage) {
  char h1[8] = {1}, h2[8] = {2};
  add(h1, sizeof(h1), 1);
  add(h2, sizeof(h2), 2);
  railnetConnStageDropAll(&reg);
  EXPECT_EQ(dropped().size(), 2u);
  EXPECT_EQ(railnetConnStageFind(&reg, h1), nullptr);
}

// NCCL connects every channel of every peer at once: a thousand connects in progress, their
// handles side by side in one array, are each found; half removed one by one are gone and the
// others still found; dropping all frees the rest.
TEST_F(ConnStage, AThousandConnectsInProgressAreEachFound) {
  const int n = 1000;
  std::vector<char> h((size_t)n * NCCL_NET_HANDLE_MAXSIZE);
  std::vector<Stage*> st(n);
  for (int i = 0; i < n; i++) {
    char* k = &h[(size_t)i * NCCL_NET_HANDLE_MAXSIZE];
    snprintf(k, NCCL_NET_HANDLE_MAXSIZE, "handle %d", i);
    st[i] = add(k, NCCL_NET_HANDLE_MAXSIZE, i);
  }
  for (int i = 0; i < n; i++)
    EXPECT_EQ(railnetConnStageFind(&reg, &h[(size_t)i * NCCL_NET_HANDLE_MAXSIZE]), &st[i]->link) << i;
  for (int i = 0; i < n; i += 2) {
    railnetConnStageRemove(&reg, &st[i]->link);
    delete st[i];
  }
  for (int i = 0; i < n; i++)
    EXPECT_EQ(railnetConnStageFind(&reg, &h[(size_t)i * NCCL_NET_HANDLE_MAXSIZE]), i % 2 ? &st[i]->link : nullptr)
        << i;
  railnetConnStageDropAll(&reg);
  EXPECT_EQ(dropped().size(), (size_t)n / 2);
  EXPECT_TRUE(dropped().size() > 0 && dropped()[0] % 2 == 1);
}

TEST(ConnCheckMagic, WrongMagicNamesThePluginHint) {
  LogCapture log;
  EXPECT_EQ(railnetConnCheckMagic("NET/Test", "Test", 42, 42), ncclSuccess);
  EXPECT_EQ(railnetConnCheckMagic("NET/Test", "Test", 41, 42), ncclInvalidArgument);
  EXPECT_TRUE(LogCapture::contains("NET/Test : connect handle is not a railnet Test handle", NCCL_LOG_WARN));
  EXPECT_TRUE(LogCapture::contains("same NCCL_NET_PLUGIN", NCCL_LOG_WARN)) << LogCapture::all();
}

TEST(ConnListen, PortZeroGivesTheKernelsPort) {
  union ncclSocketAddress lo, bound;
  ASSERT_EQ(ncclSocketGetAddrFromString(&lo, "127.0.0.1:1"), ncclSuccess);  // its port is ignored
  struct ncclSocket sock;
  ASSERT_EQ(railnetConnListen(&sock, &lo, ncclSocketTypeNetSocket, &bound), ncclSuccess);
  EXPECT_EQ(bound.sa.sa_family, AF_INET);
  EXPECT_NE(ntohs(bound.sin.sin_port), 0);
  EXPECT_NE(ntohs(bound.sin.sin_port), 1);
  ncclSocketClose(&sock);
}

}  // namespace
