// One-sided RMA (src/transport/net_ib/rma/) on soft-RoCE, at NCCL's default timeouts: groups
// of 2 and 4 ranks, each a forked process, spread over rxe0 and rxe1 (rank r on device r % 2),
// their handles exchanged through shared memory as NCCL's bootstrap would. Each rank:
//  - puts with a signal into the next rank's window (sizes 0 B to 64 MiB with two ranks, to
//    8 MiB with four; both signal ops; a zero-size put is the signal only) on every context;
//    the next rank waits on the signal word and then checks every byte: the signal is seen
//    only after its data;
//  - gets from the next rank's window (0 B to the same size) and checks every byte;
//  - posts 64 puts at once before testing any of them (many outstanding on one context);
//  - puts with a signal into a window registered as GPU memory, which the target flushes
//    (iflush: a read through its QP to itself) before it checks every byte;
//  - is refused (ncclInvalidArgument, a WARN) an offset past the target's window, an unknown
//    rank, a rank outside its rank stride, an unknown signal operation, a context out of range,
//    a deregistered window (and its second deregistration).
// And a rank killed once everything is up: the other's put to it fails (the group's connection
// to it closed), with a WARN naming it, and queryLastError says so.
#include "test_util.h"
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <string>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "socket.h"
#include "../../src/transport/net_ib/init.h"
#include "../../src/transport/net_ib/rma/rma.h"
#include "testing.h"
}
#include "ib_test_env.h"
#include "plugin_loader.h"

namespace {

const int kMaxRanks = 8;
// a window is three parts (each `part` bytes): the source, the put target, the get target; puts
// and gets go up to a whole part. 64 MiB for two ranks, 8 MiB for four: the tier runs every
// soft-RoCE test in one command of 560 s under TCG (test/softroce/tier.sh), sanitized too
const size_t kBig = 64u << 20, kSmall = 8u << 20;

struct Shared {
  uint8_t handles[kMaxRanks][NCCL_NET_HANDLE_MAXSIZE];
  std::atomic<int> listening, arrived, dying;
  pid_t pids[kMaxRanks];
  char why[kMaxRanks][256];
};

uint8_t patternOf(int rank, int k, size_t i) { return (uint8_t)(rank * 37 + k * 11 + i * 7 + (i >> 10)); }

// The test's own out-of-band barrier: the m-th call of every rank returns once all n made it.
bool oobBarrier(Shared* sh, int* m, int n) {
  sh->arrived++;
  int target = n * ++*m;
  for (int i = 0; i < 120000 && sh->arrived.load() < target; i++) usleep(1000);
  return sh->arrived.load() >= target;
}

// Waits for request r; "" or what failed.
std::string wait(void* coll, void* r) {
  int done = 0;
  long long end = railnetClockNs() + 120000000000LL;
  while (!done && (long long)railnetClockNs() < end)
    if (railnetRmaTest(coll, r, &done) != ncclSuccess) return "test() failed";
  return done ? "" : "a request did not complete within 120 s";
}

struct Rank {
  Shared* sh;
  int r, n, stride;
  size_t part;
  void *ctx = nullptr, *coll = nullptr, *rctx = nullptr, *dataMr = nullptr, *sigMr = nullptr, *gpuMr = nullptr;
  uint8_t* data = nullptr;
  volatile uint64_t* sig = nullptr;

  std::string setUp() {
    if (railnetRmaInit(&ctx, 0x1234, nullptr) != ncclSuccess) return "init failed";
    int ndev = 0;
    if (railnetRmaDevices(&ndev) != ncclSuccess || ndev < 2) return "fewer than two devices";
    ncclNetProperties_v12_t props;
    if (railnetRmaGetProperties(r % 2, &props) != ncclSuccess || props.netDeviceType != NCCL_NET_DEVICE_GIN_PROXY)
      return "getProperties: not a GIN proxy device";
    void* lc = nullptr;
    if (railnetRmaListen(ctx, r % 2, sh->handles[r], &lc) != ncclSuccess) return "listen failed";
    sh->listening++;
    for (int i = 0; i < 60000 && sh->listening.load() < n; i++) usleep(1000);
    std::vector<void*> hs(n);
    for (int k = 0; k < n; k++) hs[k] = sh->handles[k];
    if (railnetRmaConnect(nullptr, hs.data(), n, r, lc, &coll) != ncclSuccess) return "connect failed";
    railnetRmaCloseListen(lc);
    ncclRmaConfig_v14_t cfg = {2, INT_MIN, stride};
    if (railnetRmaCreateContext(coll, &cfg, &rctx) != ncclSuccess) return "createContext failed";
    data = (uint8_t*)mmap(nullptr, 3 * part, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sig = (volatile uint64_t*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED || sig == MAP_FAILED) return "mmap failed";
    if (railnetRmaRegMrSym(coll, data, 3 * part, NCCL_PTR_HOST, 0, &dataMr) != ncclSuccess) return "regMrSym failed";
    if (railnetRmaRegMrSym(coll, (void*)sig, 8 * kMaxRanks, NCCL_PTR_HOST,
                           NCCL_NET_MR_FLAG_FORCE_SO | NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET, &sigMr) != ncclSuccess)
      return "regMrSym of the signals failed";
    return "";
  }

  // Round k: a put of `size` bytes with a signal (op) to the next rank; waits for the signal of
  // the previous rank to reach `expect`, then checks its bytes.
  std::string putSignalRound(int k, size_t size, uint32_t op, uint64_t value, uint64_t expect) {
    int to = (r + stride) % n, from = (r - stride + n) % n;
    for (size_t i = 0; i < size; i++) data[i] = patternOf(r, k, i);
    void* req = nullptr;
    if (railnetRmaIputSignal(rctx, k % 2, 0, size ? dataMr : nullptr, size, part, size ? dataMr : nullptr, to,
                             8 * r, sigMr, value, op, true, &req) != ncclSuccess || req == nullptr)
      return "iputSignal failed (round " + std::to_string(k) + ")";
    std::string e = wait(coll, req);
    if (!e.empty()) return e;
    long long end = railnetClockNs() + 120000000000LL;
    while (__atomic_load_n(&sig[from], __ATOMIC_ACQUIRE) < expect && (long long)railnetClockNs() < end) usleep(100);
    uint64_t got = __atomic_load_n(&sig[from], __ATOMIC_ACQUIRE);
    if (got != expect)
      return "round " + std::to_string(k) + ": signal " + std::to_string(got) + ", wanted " + std::to_string(expect);
    for (size_t i = 0; i < size; i++)
      if (data[part + i] != patternOf(from, k, i))
        return "round " + std::to_string(k) + ": byte " + std::to_string(i) + " of " + std::to_string(size) +
               " is not the previous rank's after its signal";
    return "";
  }

  std::string getRound(int k, size_t size) {
    int to = (r + stride) % n;
    void* req = nullptr;
    memset(data + 2 * part, 0, size);  // a get that writes nothing cannot pass on an earlier one's bytes
    if (railnetRmaIget(rctx, k % 2, 0, dataMr, size, 2 * part, dataMr, to, &req) != ncclSuccess || req == nullptr)
      return "iget failed";
    std::string e = wait(coll, req);
    if (!e.empty()) return e;
    size_t wrong = 0, first = size, last = 0, nonzero = 0;
    for (size_t i = 0; i < size; i++)
      if (data[2 * part + i] != patternOf(to, k, i)) {
        wrong++, last = i, first = first < i ? first : i;
        nonzero += data[2 * part + i] != 0;
      }
    if (wrong)  // where and what: a bad packet, a page, another round's bytes?
      return "get from rank " + std::to_string(to) + ": " + std::to_string(wrong) + " bytes of " +
             std::to_string(size) + " differ, from byte " + std::to_string(first) + " to " + std::to_string(last) +
             ", " + std::to_string(nonzero) + " of them not zero (the target at page offset " +
             std::to_string((uintptr_t)(data + 2 * part) % 4096) + ")";
    return "";
  }

  std::string badInputs() {
    LogCapture log;
    void* req = nullptr;
    int to = (r + stride) % n;
    if (railnetRmaIput(rctx, 0, 0, dataMr, 64, 3 * part - 32, dataMr, to, &req) != ncclInvalidArgument)
      return "a put past the window was not refused";
    if (!log.contains("is outside the target rank's window", NCCL_LOG_WARN)) return "no WARN for the window";
    if (railnetRmaIput(rctx, 0, 0, dataMr, 64, 0, dataMr, n, &req) != ncclInvalidArgument)
      return "a put to an unknown rank was not refused";
    if (railnetRmaIput(rctx, 2, 0, dataMr, 64, 0, dataMr, to, &req) != ncclInvalidArgument)
      return "a context out of range was not refused";
    if (railnetRmaIputSignal(rctx, 0, 0, nullptr, 0, 0, nullptr, to, 0, sigMr, 1, 7, true, &req) != ncclInvalidArgument)
      return "signal op 7 was not refused";
    if (stride > 1 && railnetRmaIput(rctx, 0, 0, dataMr, 64, 0, dataMr, (r + 1) % n, &req) != ncclInvalidArgument)
      return "a put to a rank outside the stride was not refused";
    // a window deregistered (collective registration, so every rank makes and drops one)
    void* gone = nullptr;
    if (railnetRmaRegMrSym(coll, data, 4096, NCCL_PTR_HOST, 0, &gone) != ncclSuccess) return "regMrSym failed";
    if (railnetRmaDeregMrSym(coll, gone) != ncclSuccess) return "deregMrSym failed";
    if (railnetRmaIput(rctx, 0, 0, gone, 64, 0, dataMr, to, &req) != ncclInvalidArgument)
      return "a put from a deregistered window was not refused";
    if (!log.contains("not a live registration of this group", NCCL_LOG_WARN)) return "no WARN for the deregistered window";
    if (railnetRmaDeregMrSym(coll, gone) != ncclInvalidArgument) return "a second deregMrSym was not refused";
    return "";
  }

  // 64 puts of 4 KiB to consecutive offsets, all posted before any is tested, then a signal.
  std::string manyOutstanding(int k) {
    int to = (r + stride) % n;
    const size_t each = 4096;
    for (size_t i = 0; i < 64 * each; i++) data[i] = patternOf(r, k, i);
    std::vector<void*> reqs(64, nullptr);
    for (int q = 0; q < 64; q++)
      if (railnetRmaIput(rctx, 1, q * each, dataMr, each, part + q * each, dataMr, to, &reqs[q]) != ncclSuccess)
        return "put " + std::to_string(q) + " failed";
    for (void* q : reqs) {
      std::string e = wait(coll, q);
      if (!e.empty()) return e;
    }
    void* s = nullptr;
    // the signal goes on context 1 too: after the 64 puts of that context's QP
    if (railnetRmaIputSignal(rctx, 1, 0, nullptr, 0, 0, nullptr, to, 8 * r, sigMr, 1000, NCCL_NET_SIGNAL_OP_ADD, true,
                             &s) != ncclSuccess)
      return "the closing signal failed";
    return wait(coll, s);
  }

  // A window registered as GPU memory (host memory standing in: rxe registers either): the
  // previous rank's put with signal lands in it, and, as NCCL's proxy does for GPU memory, this
  // rank flushes it before reading (a read through the QP to itself), then checks every byte.
  // On host memory the bytes are there with or without the flush: this shows that a flush of
  // GPU memory is a request that completes, not that it orders a GPU's view.
  std::string gpuTypeWindow(int k, uint64_t expect) {
    const size_t size = 65536;
    int to = (r + stride) % n, from = (r - stride + n) % n;
    uint8_t* g = data + 2 * part;  // the get target: no longer read
    memset(g, 0, size);
    if (railnetRmaRegMrSym(coll, g, size, NCCL_PTR_CUDA, 0, &gpuMr) != ncclSuccess)
      return "regMrSym with NCCL_PTR_CUDA (host memory) failed";
    for (size_t i = 0; i < size; i++) data[i] = patternOf(r, k, i);
    void* req = nullptr;
    if (railnetRmaIputSignal(rctx, 0, 0, dataMr, size, 0, gpuMr, to, 8 * r, sigMr, 1, NCCL_NET_SIGNAL_OP_INC, true,
                             &req) != ncclSuccess || req == nullptr)
      return "the put into the GPU-type window failed";
    std::string e = wait(coll, req);
    if (!e.empty()) return e;
    long long end = railnetClockNs() + 120000000000LL;
    while (__atomic_load_n(&sig[from], __ATOMIC_ACQUIRE) < expect && (long long)railnetClockNs() < end) usleep(100);
    if (sig[from] != expect) return "the signal into the GPU-type window did not arrive";
    void* flush = nullptr;
    if (railnetRmaIflush(rctx, 0, gpuMr, from, &flush) != ncclSuccess || flush == nullptr)
      return "iflush of GPU memory gave no request";
    if (!(e = wait(coll, flush)).empty()) return "the flush: " + e;
    for (size_t i = 0; i < size; i++)
      if (g[i] != patternOf(from, k, i)) return "GPU-type window: byte " + std::to_string(i) + " differs after the flush";
    return "";
  }

  void tearDown() {
    if (gpuMr) railnetRmaDeregMrSym(coll, gpuMr);
    if (rctx) railnetRmaDestroyContext(rctx);
    if (dataMr) railnetRmaDeregMrSym(coll, dataMr);
    if (sigMr) railnetRmaDeregMrSym(coll, sigMr);
    if (coll) railnetRmaCloseColl(coll);
    if (ctx) railnetRmaFinalize(ctx);
  }
};

std::string runRank(Shared* sh, int r, int n, int stride) {
  size_t part = n == 2 ? kBig : kSmall;
  Rank k{sh, r, n, stride, part};
  std::string e = k.setUp();
  std::vector<size_t> sizes;
  for (size_t s : {(size_t)0, (size_t)1, (size_t)8, (size_t)4095, (size_t)4097, (size_t)65536, (size_t)1 << 20, kSmall})
    if (s < part - 1) sizes.push_back(s);
  sizes.push_back(part - 1), sizes.push_back(part);
  uint64_t expect = 0;
  int m = 0;  // barriers so far
  for (size_t i = 0; e.empty() && i < sizes.size(); i++) {
    uint32_t op = i % 2 ? NCCL_NET_SIGNAL_OP_ADD : NCCL_NET_SIGNAL_OP_INC;
    uint64_t value = op == NCCL_NET_SIGNAL_OP_ADD ? 5 + i : 99;  // INC ignores the value
    expect += op == NCCL_NET_SIGNAL_OP_ADD ? value : 1;
    e = k.putSignalRound((int)i, sizes[i], op, value, expect);
    // nobody writes the next round's source or target before every rank checked this one
    if (!oobBarrier(sh, &m, n) && e.empty()) e = "barrier";
  }
  int last = (int)sizes.size() - 1;  // the sources hold round `last`'s pattern
  for (size_t size : {(size_t)0, (size_t)1, (size_t)4097, (size_t)1 << 20, k.part})
    if (e.empty()) e = k.getRound(last, size);
  if (!oobBarrier(sh, &m, n) && e.empty()) e = "barrier";  // every get read its source before it changes
  if (e.empty()) e = k.badInputs();
  if (e.empty()) e = k.manyOutstanding(100);
  if (e.empty()) {
    int from = (r - stride + n) % n;
    long long end = railnetClockNs() + 120000000000LL;
    while (__atomic_load_n(&k.sig[from], __ATOMIC_ACQUIRE) < expect + 1000 && (long long)railnetClockNs() < end)
      usleep(100);
    if (k.sig[from] != expect + 1000) e = "the closing signal did not arrive";
    for (size_t i = 0; e.empty() && i < 64 * 4096; i++)
      if (k.data[k.part + i] != patternOf(from, 100, i)) e = "many outstanding: byte " + std::to_string(i) + " differs";
  }
  // nobody writes its source (data[0..]) before the previous rank's puts from it completed
  if (!oobBarrier(sh, &m, n) && e.empty()) e = "barrier";
  if (e.empty()) e = k.gpuTypeWindow(101, expect + 1001);
  if (!oobBarrier(sh, &m, n) && e.empty()) e = "the last barrier";
  k.tearDown();
  return e;
}

// Rank 1 dies (SIGKILL) once the group, the contexts and the windows are up; rank 0 then puts
// to it, at NCCL's default NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT (with which soft-RoCE retries
// without end). A put the NIC took before rank 1's QP was gone may still be acknowledged; a
// later one fails (rank 1's window is gone: a remote access error) or is refused once rank 0
// sees the group's connection to rank 1 closed, with a WARN naming rank 1 either way, and
// queryLastError reports it.
std::string runDeadPeer(Shared* sh, int r) {
  Rank k{sh, r, 2, 1, kSmall};
  std::string e = k.setUp();
  int m = 0;
  if (!oobBarrier(sh, &m, 2) && e.empty()) e = "barrier";
  if (r == 1) {
    sh->dying = 1;
    raise(SIGKILL);
  }
  // the event: rank 1 is gone (a zombie: its QPs and memory released), not a time
  std::string stat = "/proc/" + std::to_string(sh->pids[1]) + "/stat";
  for (int i = 0; i < 60000 && e.empty(); i++) {
    std::string st = readFile(stat);
    size_t close = st.rfind(')');
    if (sh->dying.load() && (st.empty() || (close != std::string::npos && st.compare(close, 3, ") Z") == 0))) break;
    usleep(1000);
  }
  LogCapture log;
  long long t0 = railnetClockNs();
  // puts until one fails: one the NIC took before rank 1's QP was torn down may still be
  // acknowledged; the next ones are refused (the group broke) or fail, not retried for ever
  ncclResult_t res = ncclSuccess;
  int puts = 0;
  while (e.empty() && res == ncclSuccess && railnetClockNs() - t0 < 200000000000LL) {
    void* req = nullptr;
    res = railnetRmaIput(k.rctx, 0, 0, k.dataMr, 4096, k.part, k.dataMr, 1, &req);
    puts++;
    int done = 0;
    while (res == ncclSuccess && !done && railnetClockNs() - t0 < 200000000000LL) res = railnetRmaTest(k.coll, req, &done);
    if (res == ncclSuccess && !done) e = "a put to the dead rank did not end in 200 s";
  }
  double took = (railnetClockNs() - t0) / 1e9;
  fprintf(stderr, "rank 0: put %d to the dead rank 1 failed after %.1f s (fault to WARN)\n", puts, took);
  if (e.empty() && res != ncclRemoteError) e = "the puts to a dead rank did not fail";
  // named either way: the group's connection to it closed (refused at post, or failed while
  // waiting), or the put's own completion failed (its window is gone: a remote access error)
  if (e.empty() && !log.contains("the connection to rank 1 closed", NCCL_LOG_WARN) &&
      !log.contains("put to rank 1 failed", NCCL_LOG_WARN))
    e = "no WARN naming rank 1: " + log.all();
  bool hasError = false;
  if (e.empty() && (railnetRmaQueryLastError(k.rctx, &hasError) != ncclSuccess || !hasError))
    e = "queryLastError did not report it";
  k.tearDown();
  return e;
}

class RmaSoftRoce : public IbTwoDevicesTest {
 protected:
  // n ranks as forked processes; "" or the first rank's failure.
  std::string group(int n, int stride, bool deadPeer = false) {
    // soft-RoCE drops a get's responses beyond the receive backlog, and its retry can complete
    // the get with none of its data (docs/ib-rma.md): the VM raises it; a host must too
    long backlog = atol(readFile("/proc/sys/net/core/netdev_max_backlog").c_str());
    if (!deadPeer && backlog < 20000 && has(readFile("/sys/class/infiniband/rxe0/ports/1/state"), "ACTIVE"))
      return "SKIP soft-RoCE with net.core.netdev_max_backlog " + std::to_string(backlog) +
             " < 20000: rxe's retry of a get can lose its data (docs/ib-rma.md); raise it";
    railnetIbResetDevices();
    Shared* sh = (Shared*)mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return "mmap failed";
    memset((void*)sh, 0, sizeof(*sh));
    std::vector<pid_t> pids;
    for (int r = 0; r < n; r++) {
      pid_t pid = fork();
      if (pid == 0) {
        for (int i = 0; i < 60000 && r == 0 && n > 1 && sh->pids[n - 1] == 0; i++) usleep(1000);  // every pid known
        std::string e = deadPeer ? runDeadPeer(sh, r) : runRank(sh, r, n, stride);
        snprintf(sh->why[r], sizeof(sh->why[r]), "%s", e.c_str());
        _exit(e.empty() ? 0 : 1);
      }
      pids.push_back(pid);
      sh->pids[r] = pid;
    }
    std::string out;
    long long end = railnetClockNs() + 400000000000LL;
    for (int r = 0; r < n; r++) {
      int st = 0;
      while (waitpid(pids[r], &st, WNOHANG) == 0 && (long long)railnetClockNs() < end) usleep(10000);
      if ((long long)railnetClockNs() >= end) {
        for (pid_t p : pids) kill(p, SIGKILL);
        waitpid(pids[r], &st, 0);
        out += "rank " + std::to_string(r) + " did not finish in 400 s; ";
        continue;
      }
      if (deadPeer && r == 1) continue;  // killed on purpose
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        out += "rank " + std::to_string(r) + ": " + (sh->why[r][0] ? sh->why[r] : "crashed") + "; ";
    }
    munmap(sh, sizeof(*sh));
    return out;
  }
};

// "" passes; "SKIP ..." skips (the reason after it); anything else fails with it
#define EXPECT_GROUP(call)                                           \
  do {                                                               \
    std::string e_ = (call);                                         \
    if (e_.rfind("SKIP ", 0) == 0) RAILNET_SKIP(e_.substr(5));       \
    EXPECT_EQ(e_, "");                                               \
  } while (0)

TEST_F(RmaSoftRoce, TwoRanksPutSignalGetEveryByte) { EXPECT_GROUP(group(2, 1)); }
TEST_F(RmaSoftRoce, FourRanksOverBothDevices) { EXPECT_GROUP(group(4, 1)); }
TEST_F(RmaSoftRoce, FourRanksWithRankStrideTwo) { EXPECT_GROUP(group(4, 2)); }

TEST_F(RmaSoftRoce, ARankThatDiesFailsThePutsToItBounded) { EXPECT_EQ(group(2, 1, true), ""); }

// NCCL's view: a client built on NCCL 2.30.7's own rma_v14.h / rma_v13.h (test/nccl/rma_client.c,
// built when make is given NCCL_SRC) opens libnccl-net-railnet.so and drives ncclRmaPlugin_v14
// and _v13 over two ranks. Their init refuses without GPUDirect RDMA, as NCCL's own RMA does
// (soft-RoCE has none), and with RAILNET_RMA_PLUGIN=0; with a peer-memory module faked in sysfs
// (SYSFS_PATH) it serves host memory through them.
TEST_F(RmaSoftRoce, NcclsOwnHeadersDriveVersions13And14) {
  std::string client = buildLibDir() + "/../test/rma_nccl_client";
  if (access(client.c_str(), X_OK) != 0)
    RAILNET_SKIP("the client on NCCL's own headers is not built (make test-build NCCL_SRC=<NCCL 2.30 sources>)");
  std::string plugin = buildLibDir() + "/libnccl-net-railnet.so";
  TempDir sys;
  for (const char* d : {"class", "devices", "bus"})
    ASSERT_EQ(symlink((std::string("/sys/") + d).c_str(), (sys.path() + "/" + d).c_str()), 0);
  sys.write("module/nvidia_peermem/version", "1.0\n");
  for (const char* v : {"14", "13"}) {
    SCOPED_TRACE(std::string("ncclRmaPlugin_v") + v);
    ToolRun none = shellRun("env -u SYSFS_PATH NCCL_DEBUG=INFO " + client + " " + plugin + " " + v + " refused");
    EXPECT_EQ(none.status, 0) << "init without GPUDirect RDMA: " << none.out;
    EXPECT_TRUE(has(none.out, "unable to serve NCCL's one-sided calls: no GPUDirect RDMA")) << none.out;
    ToolRun off = shellRun("SYSFS_PATH=" + sys.path() + " RAILNET_RMA_PLUGIN=0 NCCL_DEBUG=INFO " + client + " " +
                           plugin + " " + v + " refused");
    EXPECT_EQ(off.status, 0) << "init with RAILNET_RMA_PLUGIN=0: " << off.out;
    EXPECT_TRUE(has(off.out, "off (RAILNET_RMA_PLUGIN=0)")) << off.out;
    ToolRun run = shellRun("SYSFS_PATH=" + sys.path() + " " + client + " " + plugin + " " + v + " run");
    EXPECT_EQ(run.status, 0) << run.out;
    EXPECT_TRUE(has(run.out, std::string("rank 0: ncclRmaPlugin_v") + v + ": ok")) << run.out;
    EXPECT_TRUE(has(run.out, std::string("rank 1: ncclRmaPlugin_v") + v + ": ok")) << run.out;
  }
}

}  // namespace
