// Many comms on real soft-RoCE (the tier's VM): 512 comm pairs opened the way NCCL opens
// them (a listen comm per receive comm, connects and accepts progressed together, a buffer
// registered per comm), a message over each, then everything closed: the process's file
// descriptors and the devices' verbs objects (rdma resource: QPs, CQs, MRs, PDs) must be back
// where they were after init, so a job that opens and closes communicators does not leak.
#include "test_util.h"
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include "net_pair.h"

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/eager/eager.h"
#include "../../src/transport/net_ib/eager/eager_pool.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

int openFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  for (struct dirent* e; d && (e = readdir(d)) != nullptr;)
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n - 1;  // the directory's own
}

// "rxe0 qp" -> count, from `rdma resource show` ("0: rxe0: pd 1 cq 2 qp 3 cm_id 0 mr 4 ctx 1 srq 0").
std::map<std::string, long> verbsObjects() {
  std::map<std::string, long> m;
  FILE* p = popen("rdma resource show 2>/dev/null", "r");
  char line[512];
  while (p && fgets(line, sizeof(line), p)) {
    char dev[64];
    int off = 0;
    if (sscanf(line, "%*d: %63[^:]:%n", dev, &off) < 1) continue;
    char* s = line + off;
    char what[32];
    long v;
    int used = 0;
    while (sscanf(s, " %31s %ld%n", what, &v, &used) == 2) {
      m[std::string(dev) + " " + what] = v;
      s += used;
    }
  }
  if (p) pclose(p);
  return m;
}

class IbScaleTest : public IbTwoDevicesTest {
 protected:
  // n comm pairs opened, msgs messages of 8 bytes over each into receives of posted bytes
  // (open: called before the close), all closed: fds and verbs objects back to where they were.
  void openMoveClose(int n, size_t posted, int msgs = 1, const std::function<void()>& open = nullptr);
};

// At the defaults: eager messages on. The first 8-byte message of each comm goes through its
// clear-to-send (or into the first-message box) and has the receiver take its ring from the
// eager pool (eager/eager_pool.h) at its next irecv; the second goes eagerly and takes the
// sender's bounce slots. Closing gives the pool's chunks (memory and registrations) back.
TEST_F(IbScaleTest, FiveHundredTwelveCommPairsCloseWithoutLeaks) { openMoveClose(512, 4096, 2); }

// More comms than the pool holds (RAILNET_IB_EAGER_POOL=8 buffers per set of devices: 8 rings
// on rxe1, 8 bounce slots on rxe0, for 64 comm pairs): the comms that find it at its bound keep
// the clear-to-send protocol; every message arrives, no error, no WARN.
TEST_F(IbScaleTest, APoolExhaustedByManyCommsFallsBackWithoutError) {
  env.set("RAILNET_IB_EAGER_POOL", "8");
  LogCapture cap;
  struct railnetIbEagerPoolStats st0;
  railnetIbEagerPoolGetStats(&st0);
  openMoveClose(64, 4096, 4, [&]() {
    struct railnetIbEagerPoolStats st;
    railnetIbEagerPoolGetStats(&st);
    EXPECT_EQ(st.inUse, st0.inUse + 16) << "8 rings and 8 bounce slots";
    // every receive comm beyond the bound was refused a ring (their senders, told of no ring,
    // never ask the pool: the 8 that were told took the 8 bounce slots)
    EXPECT_GE(st.refused, st0.refused + (64 - 8)) << "the receive comms beyond the bound were not refused";
  });
  EXPECT_TRUE(LogCapture::contains("the eager pool is at its bound (RAILNET_IB_EAGER_POOL=8")) << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
}

// The clear-to-send protocol (RAILNET_IB_EAGER_SIZE=0): no ring, a clear-to-send per message.
TEST_F(IbScaleTest, ClearToSendCommPairsCloseWithoutLeaks) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  openMoveClose(128, 8);
}

void IbScaleTest::openMoveClose(int n, size_t posted, int msgs, const std::function<void()>& open) {
  struct rlimit rl;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)(4 * n)) RAILNET_SKIP("RLIMIT_NOFILE hard limit too low");
  struct rlimit raised = rl;
  raised.rlim_cur = rl.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &raised), 0);
  ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(ib->devices(&ndev), ncclSuccess);
  ASSERT_GE(ndev, 2);
  std::map<std::string, long> objs0 = verbsObjects();
  if (objs0.empty()) RAILNET_SKIP("`rdma resource show` lists nothing (iproute2's rdma tool missing)");
  int fds0 = openFds();

  std::vector<std::vector<char>> handles(n, std::vector<char>(NCCL_NET_HANDLE_MAXSIZE));
  std::vector<void*> lc(n, nullptr), sc(n, nullptr), rc(n, nullptr), smh(n, nullptr), rmh(n, nullptr);
  std::vector<std::vector<char>> sbuf(n, std::vector<char>(4096, 's')), rbuf(n, std::vector<char>(4096));
  for (int i = 0; i < n; i++) ASSERT_EQ(ib->listen(ctx, 1, handles[i].data(), &lc[i]), ncclSuccess);
  long long deadline = netNowNs() + 600000000000LL;
  for (int left = 2 * n; left > 0 && netNowNs() < deadline;) {
    for (int i = 0; i < n; i++) {
      if (sc[i] == nullptr) {
        ASSERT_EQ(ib->connect(ctx, 0, handles[i].data(), &sc[i], nullptr), ncclSuccess) << "connect " << i;
        if (sc[i]) left--;
      }
      if (rc[i] == nullptr) {
        ASSERT_EQ(ib->accept(lc[i], &rc[i], nullptr), ncclSuccess) << "accept " << i;
        if (rc[i]) left--;
      }
    }
  }
  for (int i = 0; i < n; i++) {
    ASSERT_TRUE(sc[i] && rc[i]) << "comm pair " << i << " not connected in time";
    ASSERT_EQ(ib->regMr(sc[i], sbuf[i].data(), sbuf[i].size(), NCCL_PTR_HOST, &smh[i]), ncclSuccess);
    ASSERT_EQ(ib->regMr(rc[i], rbuf[i].data(), rbuf[i].size(), NCCL_PTR_HOST, &rmh[i]), ncclSuccess);
  }
  std::map<std::string, long> objsOpen = verbsObjects();
  EXPECT_GE(objsOpen["rxe0 qp"] + objsOpen["rxe1 qp"], objs0["rxe0 qp"] + objs0["rxe1 qp"] + 2 * n);
  EXPECT_GE(openFds(), fds0 + 3 * n) << "a listen, a connected and an accepted socket per pair";
  // eager agreed where the size asks for it (the 8-byte messages then go eagerly), none at 0
  const bool eager = railnetIbEagerSize() > 0 && posted <= (size_t)railnetIbEagerSize();
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(((struct ncclIbSendComm*)sc[i])->eager != nullptr, eager) << "pair " << i;
    ASSERT_EQ(((struct ncclIbRecvComm*)rc[i])->eager != nullptr, eager) << "pair " << i;
  }

  // msgs messages over every pair, each pair's in turn (the receives posted first, tested
  // while an isend is not taken, as NCCL's proxy does)
  for (int m = 0; m < msgs; m++) {
    std::vector<void*> rr(n, nullptr), sr(n, nullptr);
    std::vector<int> rdone(n, 0), got(n, -1);
    for (int i = 0; i < n; i++) {
      void* data = rbuf[i].data();
      size_t size = posted;
      int tag = i;
      ASSERT_EQ(ib->irecv(rc[i], 1, &data, &size, &tag, &rmh[i], nullptr, &rr[i]), ncclSuccess);
      ASSERT_NE(rr[i], nullptr);
    }
    for (int i = 0; i < n; i++) {
      sbuf[i][0] = (char)(m + 1);
      while (sr[i] == nullptr && netNowNs() < deadline) {
        ASSERT_EQ(ib->isend(sc[i], sbuf[i].data(), 8, i, smh[i], nullptr, &sr[i]), ncclSuccess);
        if (sr[i] == nullptr && !rdone[i]) {
          ASSERT_EQ(ib->test(rr[i], &rdone[i], &got[i]), ncclSuccess);
        }
      }
      ASSERT_NE(sr[i], nullptr) << "message " << m << " pair " << i;
    }
    std::string err;
    for (int i = 0; i < n; i++) {
      ASSERT_TRUE(netWait(ib, sr[i], nullptr, deadline, &err)) << "send " << i << ": " << err;
      if (!rdone[i]) {
        ASSERT_TRUE(netWait(ib, rr[i], &got[i], deadline, &err)) << "receive " << i << ": " << err;
      }
      ASSERT_EQ(got[i], 8);
      ASSERT_EQ(rbuf[i][0], (char)(m + 1)) << "message " << m << " pair " << i;
    }
  }
  if (open) open();

  for (int i = 0; i < n; i++) {
    ASSERT_EQ(ib->deregMr(sc[i], smh[i]), ncclSuccess);
    ASSERT_EQ(ib->deregMr(rc[i], rmh[i]), ncclSuccess);
    ASSERT_EQ(ib->closeSend(sc[i]), ncclSuccess);
    ASSERT_EQ(ib->closeRecv(rc[i]), ncclSuccess);
    ASSERT_EQ(ib->closeListen(lc[i]), ncclSuccess);
  }
  EXPECT_EQ(openFds(), fds0) << "file descriptors left after closing " << n << " comm pairs";
  std::map<std::string, long> objs1 = verbsObjects();
  for (const auto& kv : objs0)
    EXPECT_EQ(objs1[kv.first], kv.second) << kv.first << " after closing " << n << " comm pairs (" << objsOpen[kv.first]
                                          << " while open)";
  setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace
