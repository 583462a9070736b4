// The pair protocol of railnet-diag --serve/--pair (tools/diaglib/pairproto.h): every record
// type survives encode + decode, the decoder refuses every malformed header and record
// (magic, version, type, count, length, a string without NUL, values out of range), the
// bounded socket I/O ends at its deadline or when the peer closes, and the TCP probe runs
// against its answering side over loopback.
#include <sys/socket.h>
#include <unistd.h>
#include <poll.h>
#include <thread>
#include "test_util.h"

extern "C" {
#include <errno.h>
#include "pairprobe.h"
#include "pairproto.h"
}

namespace {

std::vector<uint8_t> encode(uint16_t type, const void* recs, uint32_t count) {
  uint8_t* buf = nullptr;
  size_t len = 0;
  EXPECT_EQ(railnetPairEncode(type, recs, count, &buf, &len), ncclSuccess);
  std::vector<uint8_t> v(buf, buf + len);
  free(buf);
  return v;
}

void put32(std::vector<uint8_t>& v, size_t off, uint32_t x) {
  v[off] = (uint8_t)(x >> 24), v[off + 1] = (uint8_t)(x >> 16), v[off + 2] = (uint8_t)(x >> 8), v[off + 3] = (uint8_t)x;
}

ncclResult_t decode(const std::vector<uint8_t>& v, railnetPairMsg* m, std::string* why = nullptr) {
  char w[128] = "";
  ncclResult_t r = railnetPairDecode(v.data(), v.size(), m, w);
  if (why) *why = w;
  return r;
}

railnetPairHello hello() {
  railnetPairHello h;
  memset(&h, 0, sizeof(h));
  snprintf(h.host, sizeof(h.host), "node-a");
  snprintf(h.version, sizeof(h.version), "0.1.0");
  h.probePort = 18517;
  h.flags = RAILNET_PAIR_F_RDMA;
  h.timeoutMs = 2000;
  h.listenToken = 0x0123456789abcdefull;
  h.jobToken = 0x0fedcba987654321ull;
  return h;
}

TEST(PairProto, EveryTypeRoundTrips) {
  railnetPairHello h = hello();
  railnetPairMsg m;
  ASSERT_EQ(decode(encode(RAILNET_PAIR_HELLO, &h, 1), &m), ncclSuccess);
  ASSERT_EQ(m.type, RAILNET_PAIR_HELLO);
  EXPECT_STREQ(m.u.hello->host, "node-a");
  EXPECT_EQ(m.u.hello->probePort, 18517);
  EXPECT_EQ(m.u.hello->timeoutMs, 2000u);
  EXPECT_EQ(m.u.hello->listenToken, 0x0123456789abcdefull);
  EXPECT_EQ(m.u.hello->jobToken, 0x0fedcba987654321ull);
  railnetPairFree(&m);
  railnetPairGreet g = {0xfeedfacecafebeefull};
  ASSERT_EQ(decode(encode(RAILNET_PAIR_GREET, &g, 1), &m), ncclSuccess);
  EXPECT_EQ(m.u.greet->token, g.token);
  EXPECT_EQ(railnetPairRecordSize(RAILNET_PAIR_GREET), 8u);
  railnetPairFree(&m);
  railnetPairTcpRun run = {7000};  // TCP_RUN: with the client's budget, or without (an older client)
  ASSERT_EQ(decode(encode(RAILNET_PAIR_TCP_RUN, &run, 1), &m), ncclSuccess);
  EXPECT_EQ(m.count, 1u);
  EXPECT_EQ(m.u.tcpRun->budgetMs, 7000u);
  railnetPairFree(&m);
  ASSERT_EQ(decode(encode(RAILNET_PAIR_TCP_RUN, nullptr, 0), &m), ncclSuccess);
  EXPECT_EQ(m.count, 0u);
  railnetPairFree(&m);
  run.budgetMs = 3600001;  // over an hour
  EXPECT_EQ(decode(encode(RAILNET_PAIR_TCP_RUN, &run, 1), &m), ncclInvalidArgument);

  railnetPairIface ifs[2];
  memset(ifs, 0, sizeof(ifs));
  snprintf(ifs[0].name, sizeof(ifs[0].name), "eth0");
  ifs[0].family = 4, ifs[0].prefix = 24, ifs[0].mtu = 9000, ifs[0].selected = 1, ifs[0].up = 1;
  ifs[0].addr[0] = 198, ifs[0].addr[1] = 18, ifs[0].addr[3] = 1;
  snprintf(ifs[1].name, sizeof(ifs[1].name), "eth1");
  ifs[1].family = 6, ifs[1].prefix = 64, ifs[1].addr[0] = 0x20, ifs[1].addr[1] = 0x01;
  ASSERT_EQ(decode(encode(RAILNET_PAIR_IFACES, ifs, 2), &m), ncclSuccess);
  ASSERT_EQ(m.count, 2u);
  EXPECT_EQ(memcmp(&m.u.ifaces[0], &ifs[0], sizeof(ifs[0])), 0);
  EXPECT_EQ(memcmp(&m.u.ifaces[1], &ifs[1], sizeof(ifs[1])), 0);
  railnetPairFree(&m);

  railnetPairRdmaQp q;
  memset(&q, 0, sizeof(q));
  q.id = 7, q.entry = 3, q.peerEntry = 1, q.qpn = 0xabcdef, q.psn = 0x123456, q.addr = 0x7f0011223344ull;
  q.rkey = 0xdeadbeef, q.len = 1 << 20, q.mtu = 3, q.err = 61, q.step = RAILNET_PAIR_RDMA_RTR, q.lid = 9;
  q.gid[15] = 1;
  ASSERT_EQ(decode(encode(RAILNET_PAIR_RDMA_QP, &q, 1), &m), ncclSuccess);
  EXPECT_EQ(memcmp(m.u.qp, &q, sizeof(q)), 0);
  railnetPairFree(&m);

  railnetPairBwStart b;
  memset(&b, 0, sizeof(b));
  snprintf(b.net, sizeof(b.net), "ib");
  snprintf(b.dev, sizeof(b.dev), "mlx5_0");
  b.port = 1, b.bytes = 1 << 20, b.count = 16;
  ASSERT_EQ(decode(encode(RAILNET_PAIR_BW_START, &b, 1), &m), ncclSuccess);
  EXPECT_EQ(memcmp(m.u.bwStart, &b, sizeof(b)), 0);
  railnetPairFree(&m);
  b.reverse = 1;  // the other direction: the client's handle travels with it
  for (size_t i = 0; i < sizeof(b.handle); i++) b.handle[i] = (uint8_t)(i * 7 + 1);
  ASSERT_EQ(decode(encode(RAILNET_PAIR_BW_START, &b, 1), &m), ncclSuccess);
  EXPECT_EQ(memcmp(m.u.bwStart, &b, sizeof(b)), 0);
  railnetPairFree(&m);
  b.reverse = 2;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_BW_START, &b, 1), &m), ncclInvalidArgument);
  b.reverse = 0;
  b.count = RAILNET_PAIR_BW_MAX_COUNT + 1;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_BW_START, &b, 1), &m), ncclInvalidArgument);
  railnetPairBwResult br;
  memset(&br, 0, sizeof(br));
  br.bytes = 16ull << 20, br.usec = 123456;
  ASSERT_EQ(decode(encode(RAILNET_PAIR_BW_RESULT, &br, 1), &m), ncclSuccess);
  EXPECT_EQ(m.u.bwResult->bytes, 16ull << 20);
  railnetPairFree(&m);

  // --cluster's messages
  railnetClusterJoinMsg j;
  memset(&j, 0, sizeof(j));
  j.rank = 3, j.size = 6, j.listenPort = 40123, j.listenToken = 0xabcdef, j.jobToken = 0x1122334455667788ull;
  snprintf(j.host, sizeof(j.host), "node3");
  ASSERT_EQ(decode(encode(RAILNET_CLUSTER_JOIN, &j, 1), &m), ncclSuccess);
  EXPECT_EQ(memcmp(m.u.join, &j, sizeof(j)), 0);
  railnetPairFree(&m);
  j.rank = 6;  // not below the size
  EXPECT_EQ(decode(encode(RAILNET_CLUSTER_JOIN, &j, 1), &m), ncclInvalidArgument);
  railnetClusterRoundMsg rd;
  memset(&rd, 0, sizeof(rd));
  rd.round = 1, rd.rounds = 5, rd.partner = 4, rd.client = 1, rd.family = 4, rd.port = 40125, rd.boundMs = 60000;
  rd.addr[0] = 198, rd.addr[1] = 18, rd.addr[2] = 40, rd.addr[3] = 5;
  ASSERT_EQ(decode(encode(RAILNET_CLUSTER_ROUND, &rd, 1), &m), ncclSuccess);
  EXPECT_EQ(memcmp(m.u.round, &rd, sizeof(rd)), 0);
  railnetPairFree(&m);
  rd.round = 5;  // not below the rounds
  EXPECT_EQ(decode(encode(RAILNET_CLUSTER_ROUND, &rd, 1), &m), ncclInvalidArgument);
  railnetClusterLinkMsg lk;
  memset(&lk, 0, sizeof(lk));
  lk.a = 3, lk.b = 4, lk.ok = 1, lk.kbps = 1200000, lk.kbpsBack = 2400, lk.usec = 210, lk.usecBack = 230;
  snprintf(lk.net, sizeof(lk.net), "ib");
  snprintf(lk.devA, sizeof(lk.devA), "mlx5_0:1");
  snprintf(lk.devB, sizeof(lk.devB), "mlx5_1:1");
  ASSERT_EQ(decode(encode(RAILNET_CLUSTER_LINK, &lk, 1), &m), ncclSuccess);
  EXPECT_EQ(memcmp(m.u.link, &lk, sizeof(lk)), 0);
  railnetPairFree(&m);
  railnetClusterDoneMsg dn = {1};
  ASSERT_EQ(decode(encode(RAILNET_CLUSTER_DONE, &dn, 1), &m), ncclSuccess);
  EXPECT_EQ(m.u.done->exitCode, 1);
  railnetPairFree(&m);

  ASSERT_EQ(decode(encode(RAILNET_PAIR_BYE, nullptr, 0), &m), ncclSuccess);
  EXPECT_EQ(m.type, RAILNET_PAIR_BYE);
  EXPECT_EQ(m.count, 0u);
  EXPECT_EQ(railnetPairRecordSize(RAILNET_PAIR_BYE), 0u);
}

// A server without a token reports the probes it left out (step SCOPE, version 5); a step
// beyond the last is refused by the decoder.
TEST(PairProto, TcpStepScopeRoundTripsAndABeyondStepIsRefused) {
  railnetPairIface l, p;
  memset(&l, 0, sizeof(l)), memset(&p, 0, sizeof(p));
  snprintf(l.name, sizeof(l.name), "eth0"), snprintf(p.name, sizeof(p.name), "rail9");
  l.family = p.family = 4;
  railnetPairTcpResult r;
  railnetPairTcpOutOfScope(&l, &p, &r);
  railnetPairMsg m;
  ASSERT_EQ(decode(encode(RAILNET_PAIR_TCP_RESULTS, &r, 1), &m), ncclSuccess);
  EXPECT_EQ(m.u.tcp[0].step, RAILNET_PAIR_TCP_SCOPE);
  EXPECT_EQ(m.u.tcp[0].err, EACCES);
  EXPECT_STREQ(m.u.tcp[0].peerIf, "rail9");
  EXPECT_STREQ(railnetPairTcpStepName(RAILNET_PAIR_TCP_SCOPE), "not probed (not the client's own address)");
  railnetPairFree(&m);
  r.step = RAILNET_PAIR_TCP_SCOPE + 1;
  std::string why;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_TCP_RESULTS, &r, 1), &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("an unknown TCP probe step"), std::string::npos) << why;
}

TEST(PairProto, HeaderChecks) {
  railnetPairHello h = hello();
  std::vector<uint8_t> good = encode(RAILNET_PAIR_HELLO, &h, 1);
  railnetPairMsg m;
  std::string why;
  std::vector<uint8_t> v = good;
  v[0] = 'G';  // "GET / HTTP/1.1" and friends
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("bad magic"), std::string::npos) << why;
  v = good;
  v[5] = 1;  // version 1 (before the listener's greeting)
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("protocol version 1 (this railnet-diag speaks 5)"), std::string::npos) << why;
  v = good;
  v[5] = 2;  // version 2 (--bw one way, LINK with one direction)
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("protocol version 2 (this railnet-diag speaks 5)"), std::string::npos) << why;
  v = good;
  v[5] = 3;  // version 3 (JOIN without the job's token)
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("protocol version 3 (this railnet-diag speaks 5)"), std::string::npos) << why;
  v = good;
  v[5] = 4;  // version 4 (no TCP step SCOPE)
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("protocol version 4 (this railnet-diag speaks 5)"), std::string::npos) << why;
  v = good;
  v[7] = 99;  // type
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("unknown message type 99"), std::string::npos) << why;
  v = good;
  put32(v, 8, 2);  // two HELLOs
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  v = good;
  put32(v, 12, (uint32_t)(good.size() - 16 + 1));  // length != count x record
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  v = good;
  v.pop_back();  // truncated payload
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_EQ(railnetPairDecode(good.data(), 10, &m, nullptr), ncclInvalidArgument);
  railnetPairIface many[RAILNET_PAIR_MAX_IFACES + 1];
  uint8_t* buf = nullptr;
  size_t len = 0;
  EXPECT_EQ(railnetPairEncode(RAILNET_PAIR_IFACES, many, RAILNET_PAIR_MAX_IFACES + 1, &buf, &len), ncclInvalidArgument);
}

TEST(PairProto, RecordChecks) {
  railnetPairHello h = hello();
  std::vector<uint8_t> v = encode(RAILNET_PAIR_HELLO, &h, 1);
  memset(v.data() + 16, 'x', 64);  // host without its NUL
  railnetPairMsg m;
  std::string why;
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("without its NUL"), std::string::npos) << why;
  v = encode(RAILNET_PAIR_HELLO, &h, 1);
  v[16 + 7] = 'x';  // "node-a\0x...": one encoding per value, padding is zero
  EXPECT_EQ(decode(v, &m, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("bytes after its NUL"), std::string::npos) << why;

  railnetPairIface f;
  memset(&f, 0, sizeof(f));
  f.family = 5;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_IFACES, &f, 1), &m, &why), ncclInvalidArgument);
  f.family = 4, f.prefix = 33;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_IFACES, &f, 1), &m, &why), ncclInvalidArgument);

  railnetPairTcpProbe p;
  memset(&p, 0, sizeof(p));
  p.bytes = RAILNET_PAIR_PROBE_MAX_BYTES + 1;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_TCP_PROBE, &p, 1), &m, &why), ncclInvalidArgument);

  railnetPairRdmaQp q;
  memset(&q, 0, sizeof(q));
  q.qpn = 1u << 24;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_RDMA_QP, &q, 1), &m, &why), ncclInvalidArgument);
  q.qpn = 1, q.entry = RAILNET_PAIR_MAX_RDMA;
  EXPECT_EQ(decode(encode(RAILNET_PAIR_RDMA_QP, &q, 1), &m, &why), ncclInvalidArgument);

  railnetPairRdmaRun run = {1, 0};
  EXPECT_EQ(decode(encode(RAILNET_PAIR_RDMA_RUN, &run, 1), &m, &why), ncclInvalidArgument);
}

TEST(PairProto, SocketIoIsBounded) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  railnetPairHello h = hello();
  ASSERT_EQ(railnetPairSend(sv[0], RAILNET_PAIR_HELLO, &h, 1, railnetClockNs() + 1000000000ull), 0);
  railnetPairMsg m;
  char why[128] = "";
  ASSERT_EQ(railnetPairExpect(sv[1], RAILNET_PAIR_HELLO, &m, railnetClockNs() + 1000000000ull, why), 0) << why;
  railnetPairFree(&m);
  uint64_t t0 = railnetClockNs();
  EXPECT_EQ(railnetPairRecv(sv[1], &m, t0 + 200000000ull, why), ETIMEDOUT);  // nothing sent
  EXPECT_LT(railnetClockNs() - t0, 2000000000ull);
  // a header announcing a payload that never fully comes, then the peer closes
  std::vector<uint8_t> v = encode(RAILNET_PAIR_HELLO, &h, 1);
  ASSERT_EQ(write(sv[0], v.data(), 20), 20);
  close(sv[0]);
  EXPECT_EQ(railnetPairRecv(sv[1], &m, railnetClockNs() + 1000000000ull, why), ECONNRESET);
  close(sv[1]);
}

// A message read a piece at a time (the cluster check's JOINs): a connection that sent part
// of one returns at once with "more to come" and keeps what came, so a whole one on another
// connection is taken meanwhile; the rest completes it. Another type, bytes that are not the
// protocol, and a connection that closes midway end it with why.
TEST(PairProto, AMessageReadAPieceAtATime) {
  int a[2], b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  railnetClusterJoinMsg j;
  memset(&j, 0, sizeof(j));
  j.rank = 3, j.size = 8, j.listenPort = 18517, j.jobToken = 42;
  snprintf(j.host, sizeof(j.host), "node-c");
  std::vector<uint8_t> v = encode(RAILNET_CLUSTER_JOIN, &j, 1);
  ASSERT_GT(v.size(), (size_t)RAILNET_PAIR_HDR_SIZE + 4);
  railnetPairPartial pa, pb;
  memset(&pa, 0, sizeof(pa));
  memset(&pb, 0, sizeof(pb));
  railnetPairMsg m;
  char why[128] = "";
  ASSERT_EQ(write(a[0], v.data(), 10), 10);  // part of the header
  EXPECT_EQ(railnetPairRecvStep(a[1], &pa, RAILNET_CLUSTER_JOIN, &m, why), 0) << why;
  EXPECT_EQ(pa.got, 10u);
  ASSERT_EQ(write(b[0], v.data(), v.size()), (ssize_t)v.size());  // a whole one elsewhere
  ASSERT_EQ(railnetPairRecvStep(b[1], &pb, RAILNET_CLUSTER_JOIN, &m, why), 1) << why;
  EXPECT_EQ(m.u.join->rank, 3u);
  EXPECT_STREQ(m.u.join->host, "node-c");
  railnetPairFree(&m);
  ASSERT_EQ(write(a[0], v.data() + 10, RAILNET_PAIR_HDR_SIZE), RAILNET_PAIR_HDR_SIZE);  // the header and some
  EXPECT_EQ(railnetPairRecvStep(a[1], &pa, RAILNET_CLUSTER_JOIN, &m, why), 0) << why;
  EXPECT_EQ(railnetPairRecvStep(a[1], &pa, RAILNET_CLUSTER_JOIN, &m, why), 0) << "nothing new came";
  ASSERT_EQ(write(a[0], v.data() + 10 + RAILNET_PAIR_HDR_SIZE, v.size() - 10 - RAILNET_PAIR_HDR_SIZE),
            (ssize_t)(v.size() - 10 - RAILNET_PAIR_HDR_SIZE));
  ASSERT_EQ(railnetPairRecvStep(a[1], &pa, RAILNET_CLUSTER_JOIN, &m, why), 1) << why;
  EXPECT_EQ(m.u.join->jobToken, 42u);
  railnetPairFree(&m);
  // another type
  railnetPairHello h = hello();
  std::vector<uint8_t> hv = encode(RAILNET_PAIR_HELLO, &h, 1);
  memset(&pb, 0, sizeof(pb));
  ASSERT_EQ(write(b[0], hv.data(), hv.size()), (ssize_t)hv.size());
  EXPECT_EQ(railnetPairRecvStep(b[1], &pb, RAILNET_CLUSTER_JOIN, &m, why), -1);
  EXPECT_NE(std::string(why).find("HELLO where CLUSTER_JOIN was expected"), std::string::npos) << why;
  // not the protocol
  int c[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, c), 0);
  railnetPairPartial pc;
  memset(&pc, 0, sizeof(pc));
  ASSERT_EQ(write(c[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 27);
  EXPECT_EQ(railnetPairRecvStep(c[1], &pc, RAILNET_CLUSTER_JOIN, &m, why), -1);
  EXPECT_NE(std::string(why).find("bad magic"), std::string::npos) << why;
  // a connection that closes midway
  memset(&pa, 0, sizeof(pa));
  ASSERT_EQ(write(a[0], v.data(), 20), 20);
  close(a[0]);
  EXPECT_EQ(railnetPairRecvStep(a[1], &pa, RAILNET_CLUSTER_JOIN, &m, why), -1);
  EXPECT_NE(std::string(why).find("the connection closed after 20 bytes"), std::string::npos) << why;
  for (int fd : {a[1], b[0], b[1], c[0], c[1]}) close(fd);
}

TEST(PairProto, TcpProbeOverLoopback) {
  int lfd = -1;
  uint16_t port = 0;
  ASSERT_EQ(railnetPairListen(0, &lfd, &port), 0);
  std::thread answer([&] {
    for (int k = 0; k < 100; k++) {
      int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK);
      if (fd < 0) {
        usleep(10000);
        continue;
      }
      railnetPairMsg m;
      char why[128];
      railnetPairGreetSend(fd, 0x7e57, railnetClockNs() + 2000000000ull);
      if (railnetPairExpect(fd, RAILNET_PAIR_TCP_PROBE, &m, railnetClockNs() + 2000000000ull, why) == 0) {
        railnetPairTcpProbeAnswer(fd, m.u.probe, railnetClockNs() + 2000000000ull);
        railnetPairFree(&m);
      }
      close(fd);
      return;
    }
  });
  railnetPairIface lo;
  memset(&lo, 0, sizeof(lo));
  snprintf(lo.name, sizeof(lo.name), "lo");
  lo.family = 4, lo.up = 1, lo.addr[0] = 127, lo.addr[3] = 1;
  railnetPairTcpResult r;
  railnetPairTcpProbeRun(&lo, &lo, port, 2000, 100000, 0x7e57, &r);
  answer.join();
  EXPECT_EQ(r.step, RAILNET_PAIR_TCP_OK) << railnetPairTcpStepName(r.step) << " " << strerror(r.err);

  // a listener that greets with another token, and one that does not greet at all (not the
  // peer's listener): the probe stops at the greeting and sends them nothing
  for (int greet : {1, 0}) {
    long received = -1;
    std::thread other([&] {
      for (int k = 0; k < 200; k++) {
        int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK);
        if (fd < 0) {
          usleep(10000);
          continue;
        }
        if (greet) railnetPairGreetSend(fd, 0xbad, railnetClockNs() + 2000000000ull);
        char buf[256];
        received = 0;
        for (;;) {  // until the prober closes
          struct pollfd p = {fd, POLLIN, 0};
          if (poll(&p, 1, 3000) != 1) break;
          ssize_t n = recv(fd, buf, sizeof(buf), 0);
          if (n <= 0) break;
          received += n;
        }
        close(fd);
        return;
      }
    });
    railnetPairTcpProbeRun(&lo, &lo, port, 500, 100, 0x7e57, &r);
    other.join();
    EXPECT_EQ(r.step, RAILNET_PAIR_TCP_GREET) << greet;
    EXPECT_EQ(r.err, greet ? EPERM : ETIMEDOUT) << strerror(r.err);
    EXPECT_EQ(received, 0) << greet;
  }
  close(lfd);
  // nothing listens there any more: refused at the connect step, within the bound
  railnetPairTcpProbeRun(&lo, &lo, port, 2000, 100, 0x7e57, &r);
  EXPECT_EQ(r.step, RAILNET_PAIR_TCP_CONNECT);
  EXPECT_EQ(r.err, ECONNREFUSED);
}

}  // namespace

// The hint railnet-diag --pair gives for a failing RDMA step: the cause its errno points at.
TEST(PairRdmaHint, EachErrnoAndStepNamesItsCause) {
  auto has = [](int step, int err, const char* what) {
    return std::string(railnetPairRdmaHint(step, err)).find(what) != std::string::npos;
  };
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_REG, ENOMEM, "memlock"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_CREATE, EAGAIN, "memlock"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_RTR, EINVAL, "GID"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_INIT, ENODATA, "GID"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_RTR, ETIMEDOUT, "rail/route"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_RTS, ETIMEDOUT, "rail/route"));
  // a write or read that gets no answer: dropped RoCE packets, or no path between the rails
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_WRITE, ETIMEDOUT, "firewall/ACL"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_READ, ETIMEDOUT, "rail/route"));
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_WRITE, EACCES, "remote access"));
  EXPECT_FALSE(has(RAILNET_PAIR_RDMA_WRITE, ENOMEM, "memlock"));  // not a registration step
  EXPECT_TRUE(has(RAILNET_PAIR_RDMA_OPEN, ENODEV, "/dev/infiniband"));
}
