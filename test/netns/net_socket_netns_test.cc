// The Socket transport and the socket layer between two network namespaces joined by a
// veth pair: data integrity, packet loss, a link that goes down mid-transfer, and a
// peer whose namespace silently drops our packets. Each end runs in its own process.
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>
#include "net_pair.h"
#include "netns.h"

extern "C" {
#include "railnet.h"
#include "socket.h"
}

namespace {

const char* kA = "198.18.10.1";
const char* kB = "198.18.10.2";

// Environment of one end: set inside the child, before the transport reads anything.
void childEnv(const std::vector<std::pair<std::string, std::string>>& env) {
  for (auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
  railnetParamReset();
  railnetDebugReset();
}

// Logger of a child: WARN lines go back to the parent with a "WARN " prefix.
NetNsIo* gIo;
void childLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN || gIo == nullptr) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  gIo->say(std::string("WARN ") + buf);
}

struct TwoHosts : ::testing::Test {
  std::unique_ptr<NetNs> a, b;
  void SetUp() override {
    RAILNET_REQUIRE_NETNS();
    a.reset(new NetNs("sa"));
    b.reset(new NetNs("sb"));
    ASSERT_TRUE(a->ok() && b->ok());
    ASSERT_TRUE(NetNs::veth(*a, "eth0", *b, "eth0"));
    ASSERT_TRUE(a->addAddr("eth0", std::string(kA) + "/24") && b->addAddr("eth0", std::string(kB) + "/24"));
    ASSERT_TRUE(a->up("eth0") && b->up("eth0") && a->up("lo") && b->up("lo"));
    ASSERT_TRUE(a->waitRunning("eth0") && b->waitRunning("eth0"));
  }

  // Receiver in a, sender in b; returns both children's output.
  struct Outcome {
    NetNsResult recv, send;
  };
  Outcome transfer(const NetPlan& plan, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::function<void(NetNsChild& r, NetNsChild& s)>& during = nullptr, int timeoutMs = 120000) {
    NetNsChild receiver(*a, [&](NetNsIo& io) {
      gIo = &io;
      childEnv(env);
      const ncclNet_t* net = railnetGetNet("socket");
      void* ctx;
      if (net->init(&ctx, 0, nullptr, childLogger, nullptr) != ncclSuccess) return 10;
      char handle[NCCL_NET_HANDLE_MAXSIZE];
      void* lc;
      if (net->listen(ctx, 0, handle, &lc) != ncclSuccess) return 11;
      io.say("HANDLE " + netHandleToHex(handle));
      std::string err;
      int rc = netRunReceiver(net, lc, plan, &err);
      if (rc) io.say("ERR " + err);
      net->closeListen(lc);
      return rc;
    });
    std::string line;
    Outcome o;
    if (!receiver.readLine(&line) || line.rfind("HANDLE ", 0) != 0) {
      o.recv = receiver.wait(1000);
      return o;
    }
    std::string hex = line.substr(7);
    NetNsChild sender(*b, [&](NetNsIo& io) {
      gIo = &io;
      childEnv(env);
      const ncclNet_t* net = railnetGetNet("socket");
      void* ctx;
      if (net->init(&ctx, 0, nullptr, childLogger, nullptr) != ncclSuccess) return 10;
      char handle[NCCL_NET_HANDLE_MAXSIZE];
      if (!netHandleFromHex(hex, handle)) return 12;
      std::string err;
      int rc = netRunSender(net, ctx, 0, handle, plan, &err);
      if (rc) io.say("ERR " + err);
      return rc;
    });
    if (during) during(receiver, sender);
    o.send = sender.wait(timeoutMs);
    o.recv = receiver.wait(timeoutMs);
    return o;
  }
};

std::vector<std::pair<std::string, std::string>> ifEnv(int nt, int ns) {
  return {{"NCCL_SOCKET_IFNAME", "eth0"},
          {"NCCL_SOCKET_NTHREADS", std::to_string(nt)},
          {"NCCL_NSOCKS_PERTHREAD", std::to_string(ns)}};
}

long long txBytes(NetNs& ns, const std::string& ifname) {
  // /proc/net/dev is per namespace (sysfs would show the host's view)
  NetNsResult r = ns.exec("sed 's/:/ /' /proc/net/dev | awk '$1==\"" + ifname + "\" {print $10}'");
  return r.success() ? atoll(r.out.c_str()) : -1;
}

TEST_F(TwoHosts, DataIntegrityOverVeth) {
  for (auto nt_ns : std::vector<std::pair<int, int>>{{0, 0}, {2, 2}, {4, 1}}) {
    long long before = txBytes(*b, "eth0");
    NetPlan plan;
    plan.sizes = {0, 1, 7, 4095, 65536, (1 << 20) + 3, 64u << 20};
    plan.inflight = 3;
    Outcome o = transfer(plan, ifEnv(nt_ns.first, nt_ns.second));
    EXPECT_TRUE(o.recv.success()) << o.recv.describe();
    EXPECT_TRUE(o.send.success()) << o.send.describe();
    EXPECT_GT(txBytes(*b, "eth0") - before, 64ll << 20) << "the data did not cross the veth";
  }
}

// nftables drops 3% of the sender's TCP segments at random: TCP recovers, the data is right.
TEST_F(TwoHosts, PacketLossStillCompletesCorrectly) {
  ASSERT_TRUE(b->sh("nft add table inet rnloss && "
                    "nft add chain inet rnloss out '{ type filter hook output priority 0; }' && "
                    "nft add rule inet rnloss out ip daddr " + std::string(kA) +
                    " meta l4proto tcp numgen random mod 100 \\< 3 counter drop"));
  NetPlan plan;
  plan.sizes = {100, 1 << 20, 8u << 20, 3};
  plan.inflight = 2;
  Outcome o = transfer(plan, ifEnv(2, 2));
  EXPECT_TRUE(o.recv.success()) << o.recv.describe();
  EXPECT_TRUE(o.send.success()) << o.send.describe();
  NetNsResult c = b->exec("nft list table inet rnloss");
  EXPECT_NE(c.out.find("packets"), std::string::npos);
  EXPECT_EQ(c.out.find("packets 0 "), std::string::npos) << "no packet was dropped: " << c.out;
}

// The sender's link goes down mid-transfer: both ends fail within the bounded time
// (RAILNET_SOCKET_TIMEOUT_MSEC) with a WARN naming the peer, and nobody hangs.
TEST_F(TwoHosts, LinkDownMidTransferFailsBothEnds) {
  auto env = ifEnv(2, 2);
  env.push_back({"RAILNET_SOCKET_TIMEOUT_MSEC", "2000"});
  NetPlan plan;
  plan.sizes = {256u << 20};
  plan.deadlineMs = 60000;
  long long downAt = 0;
  Outcome o = transfer(plan, env, [&](NetNsChild&, NetNsChild&) {
    long long base = txBytes(*b, "eth0");
    long long t0 = netNowNs();
    while (txBytes(*b, "eth0") - base < (32ll << 20) && netNowNs() - t0 < 20000000000LL) usleep(20000);
    ASSERT_TRUE(b->down("eth0"));
    downAt = netNowNs();
  }, 40000);
  double secs = (netNowNs() - downAt) / 1e9;
  EXPECT_TRUE(o.send.exited && o.send.exitCode == 1) << o.send.describe();
  EXPECT_TRUE(o.recv.exited && o.recv.exitCode == 1) << o.recv.describe();
  EXPECT_LT(secs, 30.0);
  EXPECT_NE(o.recv.out.find(std::string("WARN NET/Socket : ")), std::string::npos) << o.recv.out;
  EXPECT_NE(o.recv.out.find(kB), std::string::npos) << "the receiver's WARN names the peer: " << o.recv.out;
  EXPECT_NE(o.send.out.find(kA), std::string::npos) << "the sender's WARN names the peer: " << o.send.out;
}

// A peer process SIGKILLed mid-transfer in the other namespace.
TEST_F(TwoHosts, PeerKilledMidTransferFailsReceiver) {
  NetPlan plan;
  plan.sizes = {256u << 20};
  Outcome o = transfer(plan, ifEnv(2, 2), [&](NetNsChild&, NetNsChild& s) {
    long long base = txBytes(*b, "eth0");
    long long t0 = netNowNs();
    while (txBytes(*b, "eth0") - base < (16ll << 20) && netNowNs() - t0 < 20000000000LL) usleep(10000);
    s.kill(SIGKILL);
  }, 30000);
  EXPECT_TRUE(o.recv.exited && o.recv.exitCode == 1) << o.recv.describe();
  EXPECT_NE(o.recv.out.find("ERR message 0: test() returned 6"), std::string::npos) << o.recv.out;
  EXPECT_NE(o.recv.out.find(kB), std::string::npos) << o.recv.out;
}

// An UP interface whose peer silently drops everything: connect ends within the retry
// budget with the WARN that names the interface, the peer, the tries and the fix.
TEST_F(TwoHosts, SilentlyDroppingPeerEndsInTheUnreachableWarn) {
  ASSERT_TRUE(a->sh("nft add table inet rndrop && "
                    "nft add chain inet rndrop in '{ type filter hook input priority 0; }' && "
                    "nft add rule inet rndrop in ip saddr " + std::string(kB) + " drop"));
  // a second interface in b is the other candidate the WARN should offer
  ASSERT_TRUE(NetNs::veth(*b, "eth1", *b, "peer1"));
  ASSERT_TRUE(b->addAddr("eth1", "198.18.11.2/24") && b->up("eth1") && b->up("peer1") && b->waitRunning("eth1"));
  NetNsResult r = b->run([&](NetNsIo& io) {
    gIo = &io;
    childEnv({{"NCCL_SOCKET_RETRY_CNT", "3"}, {"NCCL_SOCKET_RETRY_SLEEP_MSEC", "50"}});
    railnetSetLogger(childLogger);
    union ncclSocketAddress peer;
    if (ncclSocketGetAddrFromString(&peer, (std::string(kA) + ":4791").c_str()) != ncclSuccess) return 10;
    struct ncclSocket s;
    if (ncclSocketInit(&s, &peer, railnetSocketMagic(), ncclSocketTypeNetSocket, nullptr, 0) != ncclSuccess)
      return 11;
    long long t0 = netNowNs();
    ncclResult_t res = ncclSocketConnect(&s);
    io.say("RESULT " + std::to_string(res) + " SECONDS " + std::to_string((netNowNs() - t0) / 1000000000LL));
    ncclSocketClose(&s);
    return 0;
  }, 60000);
  ASSERT_TRUE(r.success()) << r.describe();
  EXPECT_NE(r.out.find("RESULT 6 "), std::string::npos) << r.out;
  int secs = atoi(r.out.substr(r.out.find("SECONDS ") + 8).c_str());
  EXPECT_LE(secs, 10) << "4 attempts of 1 s each plus 300 ms of sleeps";
  EXPECT_NE(r.out.find("connect to 198.18.10.1<4791> via interface eth0 (local address 198.18.10.2)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("after 4 attempts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NCCL_SOCKET_IFNAME=eth1"), std::string::npos) << r.out;
}

}  // namespace
