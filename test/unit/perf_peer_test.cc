// railnet-perf against a peer it must not trust: a client fed nothing by what holds the
// handle port, a server no client comes to, and a client that asks for a size near
// SIZE_MAX (railnet-perf's own wire, sent by this test over the Socket transport). Each ends
// in an exit with the cause in words, within the --timeout, never a hang or a crash.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include "net_pair.h"
#include "plugin_loader.h"
#include "railnet.h"
#include "test_util.h"
#include "../../tools/perf/perf_wire.h"

namespace {

std::string perfCmd() {
  return "NCCL_SOCKET_IFNAME=lo RAILNET_TRANSPORT=socket timeout 60 " + buildTool("railnet-perf") + " --plugin " +
         buildLibDir() + "/libnccl-net-railnet.so ";
}

// A TCP listener on 127.0.0.1 (a free port) that completes handshakes and never writes.
struct SilentListener {
  int fd = -1, port = 0;
  SilentListener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr*)&a, &len) != 0)
      return;
    port = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd >= 0) close(fd);
  }
};

TEST(RailnetPerfPeer, ClientGivesUpOnAPortHolderThatSendsNoHandle) {
  SilentListener l;
  ASSERT_GT(l.port, 0);
  ToolRun r = shellRun(perfCmd() + "--client 127.0.0.1 --port " + std::to_string(l.port) + " --timeout 3");
  EXPECT_EQ(r.status, 1) << "(124: it hung until killed)\n" << r.out;
  EXPECT_NE(r.out.find("sent no railnet-perf handle within 3 s"), std::string::npos) << r.out;
}

TEST(RailnetPerfPeer, ServerGivesUpWhenNoClientComes) {
  int port = freeLoopbackPort();
  ASSERT_GT(port, 0);
  ToolRun r = shellRun(perfCmd() + "--server --port " + std::to_string(port) + " --timeout 2");
  EXPECT_EQ(r.status, 1) << "(124: it hung until killed)\n" << r.out;
  EXPECT_NE(r.out.find("no client came for the handle on TCP port " + std::to_string(port) + " within 2 s"),
            std::string::npos)
      << r.out;
}

// The handle from a server's --port, as the client fetches it; "" on failure.
std::string fetchHandle(int port, char* handle, long long deadlineNs) {
  while (netNowNs() < deadlineNs) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
      close(fd);
      usleep(50000);
      continue;
    }
    uint64_t magic = 0;
    bool ok = recv(fd, &magic, sizeof(magic), MSG_WAITALL) == (ssize_t)sizeof(magic) && magic == PERF_MAGIC &&
              recv(fd, handle, NCCL_NET_HANDLE_MAXSIZE, MSG_WAITALL) == NCCL_NET_HANDLE_MAXSIZE;
    close(fd);
    return ok ? "" : "the server sent no handle";
  }
  return "the server's port did not open";
}

// A client that asks for messages of SIZE_MAX - 100 bytes, its settings otherwise valid (and
// its reverse comm accepted): the server refuses the settings with the size in its words and
// exits 1 (it used to wrap its buffer stride and crash).
TEST(RailnetPerfPeer, ServerRefusesASizeItCannotHold) {
  ScopedEnv env;
  env.set("NCCL_SOCKET_IFNAME", "lo");
  int port = freeLoopbackPort();
  ASSERT_GT(port, 0);
  TempDir d;
  std::string out = d.path() + "/server.out";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string cmd = perfCmd() + "--server --port " + std::to_string(port) + " --timeout 30 >" + out + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  long long deadline = netNowNs() + 30000000000LL;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  std::string err = fetchHandle(port, handle, deadline);
  const ncclNet_t* net = railnetGetNet("socket");
  void* ctx = nullptr;
  void *sc = nullptr, *mh = nullptr, *req = nullptr, *lc = nullptr, *rc = nullptr;
  static perfConfig cfg;
  if (err.empty()) {
    ASSERT_EQ(net->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
    sc = netConnect(net, ctx, 0, handle, deadline, &err);
  }
  if (sc) {
    memset(&cfg, 0, sizeof(cfg));
    cfg.magic = PERF_MAGIC;
    cfg.nSizes = 1;
    cfg.iters = cfg.window = cfg.bw = cfg.recvs = cfg.comms = 1;
    cfg.cuda = -1;
    cfg.sizes[0] = SIZE_MAX - 100;
    // a real listen handle for the server's reverse comm, so that nothing but the size is wrong
    EXPECT_EQ(net->listen(ctx, 0, cfg.handles[0], &lc), ncclSuccess);
    EXPECT_EQ(net->regMr(sc, &cfg, sizeof(cfg), NCCL_PTR_HOST, &mh), ncclSuccess);
    int done = 0;
    while (req == nullptr && netNowNs() < deadline) EXPECT_EQ(net->isend(sc, &cfg, sizeof(cfg), 0, mh, nullptr, &req), ncclSuccess);
    while (req && !done && netNowNs() < deadline) EXPECT_EQ(net->test(req, &done, nullptr), ncclSuccess);
    EXPECT_EQ(done, 1) << "the settings were not sent";
  }
  int st = 0;
  pid_t w = 0;
  while ((w = waitpid(pid, &st, WNOHANG)) == 0 && netNowNs() < deadline) {
    if (lc && !rc) {
      EXPECT_EQ(net->accept(lc, &rc, nullptr), ncclSuccess);  // as a client would
    }
    usleep(1000);
  }
  if (w == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  if (mh) net->deregMr(sc, mh);
  if (sc) net->closeSend(sc);
  if (rc) net->closeRecv(rc);
  if (lc) net->closeListen(lc);
  if (ctx) net->finalize(ctx);
  ASSERT_EQ(err, "") << readFile(out);
  ASSERT_NE(w, 0) << "the server did not exit within 30 s\n" << readFile(out);
  EXPECT_TRUE(WIFEXITED(st)) << "the server died of signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << "\n"
                             << readFile(out);
  EXPECT_EQ(WEXITSTATUS(st), 1) << readFile(out);
  EXPECT_NE(readFile(out).find("asked for messages of " + std::to_string((unsigned long long)(SIZE_MAX - 100)) +
                               " bytes"),
            std::string::npos)
      << readFile(out);
}

}  // namespace
