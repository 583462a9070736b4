#include "net_pair.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <thread>

long long netNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// The pattern repeats every 256 bytes: build one 4 KiB block, then copy it.
static void patternBlock(char* blk, int k) {
  for (size_t i = 0; i < 4096; i++) blk[i] = (char)((i * 131 + (size_t)k * 7 + 1) & 0xff);
}

void netPatternFill(char* buf, size_t size, int k) {
  char blk[4096];
  patternBlock(blk, k);
  for (size_t off = 0; off < size; off += sizeof(blk))
    memcpy(buf + off, blk, size - off < sizeof(blk) ? size - off : sizeof(blk));
}

bool netPatternCheck(const char* buf, size_t size, int k, size_t* firstBad) {
  char blk[4096];
  patternBlock(blk, k);
  for (size_t off = 0; off < size; off += sizeof(blk)) {
    size_t n = size - off < sizeof(blk) ? size - off : sizeof(blk);
    if (memcmp(buf + off, blk, n) == 0) continue;
    for (size_t i = 0; i < n; i++)
      if (buf[off + i] != blk[i]) {
        if (firstBad) *firstBad = off + i;
        return false;
      }
  }
  return true;
}

bool netWait(const ncclNet_t* net, void* req, int* size, long long deadlineNs, std::string* err) {
  int done = 0;
  while (!done) {
    ncclResult_t r = net->test(req, &done, size);
    if (r != ncclSuccess) {
      *err = "test() returned " + std::to_string(r);
      return false;
    }
    if (!done && netNowNs() > deadlineNs) {
      *err = "request not done by the deadline";
      return false;
    }
  }
  return true;
}

bool netConnectPair(const ncclNet_t* net, void* ctx, int dev, void* handle, void* listenComm, void** sendComm,
                    void** recvComm, int deadlineMs) {
  long long deadline = netNowNs() + deadlineMs * 1000000LL;
  ncclNetDeviceHandle_t *sd = nullptr, *rd = nullptr;
  *sendComm = *recvComm = nullptr;
  while (*sendComm == nullptr || *recvComm == nullptr) {
    if (*sendComm == nullptr && net->connect(ctx, dev, handle, sendComm, &sd) != ncclSuccess) return false;
    if (*recvComm == nullptr && net->accept(listenComm, recvComm, &rd) != ncclSuccess) return false;
    if (netNowNs() > deadline) return false;
  }
  return true;
}

void* netConnect(const ncclNet_t* net, void* ctx, int dev, void* handle, long long deadlineNs, std::string* err) {
  void* comm = nullptr;
  ncclNetDeviceHandle_t* dc = nullptr;
  while (comm == nullptr) {
    ncclResult_t r = net->connect(ctx, dev, handle, &comm, &dc);
    if (r != ncclSuccess) {
      *err = "connect returned " + std::to_string(r);
      return nullptr;
    }
    if (comm == nullptr && netNowNs() > deadlineNs) {
      *err = "connect did not complete by the deadline";
      return nullptr;
    }
  }
  return comm;
}

void* netAccept(const ncclNet_t* net, void* listenComm, long long deadlineNs, std::string* err, pid_t peer) {
  void* comm = nullptr;
  ncclNetDeviceHandle_t* dc = nullptr;
  while (comm == nullptr) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    if (peer > 0 && waitid(P_PID, (id_t)peer, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == peer) {
      *err = "the peer process is gone";
      return nullptr;
    }
    ncclResult_t r = net->accept(listenComm, &comm, &dc);
    if (r != ncclSuccess) {
      *err = "accept returned " + std::to_string(r);
      return nullptr;
    }
    if (comm == nullptr && netNowNs() > deadlineNs) {
      *err = "accept did not complete by the deadline";
      return nullptr;
    }
  }
  return comm;
}

namespace {

// "message 3" for a group of one buffer, "message 3 buffer 2" in a larger group.
std::string bufName(int k, size_t n, size_t i) {
  std::string s = "message " + std::to_string(k);
  return n > 1 ? s + " buffer " + std::to_string(i) : s;
}

// Posts group k into g: its buffers registered, one irecv of them all or one isend each.
std::string postGroup(const ncclNet_t* net, void* comm, bool send, const NetPlan& plan,
                      const std::vector<NetMsg>& msgs, int k, NetSideBuffers::Group& g, long long deadline) {
  size_t n = msgs.size();
  g.k = k;
  g.bufs.clear();
  g.bufs.resize(n);
  g.reqs.assign(n, nullptr);
  std::vector<void*> data(n), mhs(n);
  std::vector<size_t> sizes(n);
  std::vector<int> tags(n);
  for (size_t i = 0; i < n; i++) {
    NetSideBuffers::Buf& b = g.bufs[i];
    sizes[i] = send ? msgs[i].sendSize : msgs[i].recvSize;
    tags[i] = k * kNetMaxGroup + (int)i;
    b.mem.reset(new char[sizes[i] ? sizes[i] : 1]);
    if (send) netPatternFill(b.mem.get(), sizes[i], tags[i]);
    else memset(b.mem.get(), 0, sizes[i] ? sizes[i] : 1);
    if (net->regMr(comm, b.mem.get(), sizes[i], NCCL_PTR_HOST, &b.mh) != ncclSuccess) return "regMr failed";
    b.registered = true;
    data[i] = b.mem.get();
    mhs[i] = b.mh;
  }
  if (!send) {
    while (g.reqs[0] == nullptr) {
      ncclResult_t r = net->irecv(comm, (int)n, data.data(), sizes.data(), tags.data(), mhs.data(), nullptr, &g.reqs[0]);
      if (r != ncclSuccess) return "irecv returned " + std::to_string(r);
      if (g.reqs[0] == nullptr && netNowNs() > deadline) return "irecv got no request slot by the deadline";
    }
    return "";
  }
  for (size_t j = 0; j < n; j++) {
    size_t i = plan.reverseSendTags ? n - 1 - j : j;
    while (g.reqs[i] == nullptr) {
      ncclResult_t r = net->isend(comm, data[i], sizes[i], tags[i], mhs[i], nullptr, &g.reqs[i]);
      if (r != ncclSuccess) return "isend returned " + std::to_string(r);
      if (g.reqs[i] == nullptr && netNowNs() > deadline) return "isend found no receive by the deadline";
    }
  }
  return "";
}

// Waits for group g: its sizes as test() reports them and, on the receiver, its data.
std::string completeGroup(const ncclNet_t* net, void* comm, bool send, const std::vector<NetMsg>& msgs,
                          NetSideBuffers::Group& g, long long deadline) {
  size_t n = msgs.size();
  for (size_t w = 0; w < (send ? n : 1); w++) {
    std::vector<int> got(n, -1);
    std::string err;
    if (!netWait(net, g.reqs[w], got.data(), deadline, &err)) return bufName(g.k, send ? n : 1, w) + ": " + err;
    for (size_t j = 0; j < (send ? 1 : n); j++) {
      size_t i = send ? w : j;
      size_t want = msgs[i].sendSize;
      if ((size_t)got[j] != want)
        return bufName(g.k, n, i) + ": reported size " + std::to_string(got[j]) + ", expected " + std::to_string(want);
      size_t bad = 0;
      if (!send && !netPatternCheck(g.bufs[i].mem.get(), want, g.k * kNetMaxGroup + (int)i, &bad))
        return bufName(g.k, n, i) + " of " + std::to_string(want) + " bytes: wrong byte at " + std::to_string(bad);
    }
  }
  for (NetSideBuffers::Buf& b : g.bufs) {
    b.registered = false;
    if (net->deregMr(comm, b.mh) != ncclSuccess) return "deregMr failed";
  }
  return "";
}

}  // namespace

// Posts up to plan.inflight groups, then completes them in order.
std::string netRunSide(const ncclNet_t* net, void* comm, bool send, const NetPlan& plan, NetSideBuffers* bufs) {
  long long deadline = netNowNs() + plan.deadlineMs * 1000000LL;
  std::vector<std::vector<NetMsg>> groups;
  for (size_t s : plan.sizes) groups.push_back({NetMsg{s, s}});
  groups.insert(groups.end(), plan.groups.begin(), plan.groups.end());
  size_t inflight = plan.inflight > 0 ? (size_t)plan.inflight : 1;
  bufs->slots.clear();
  bufs->slots.resize(inflight);
  std::string err;
  size_t total = plan.untilError ? SIZE_MAX : groups.size();
  for (size_t next = 0, completed = 0; err.empty() && completed < total;) {
    while (err.empty() && next < total && next - completed < inflight) {
      err = postGroup(net, comm, send, plan, groups[next % groups.size()], (int)next, bufs->slots[next % inflight],
                      deadline);
      next++;
    }
    if (err.empty())
      err = completeGroup(net, comm, send, groups[completed % groups.size()], bufs->slots[completed % inflight], deadline);
    completed++;
  }
  if (!err.empty())  // stopped short: no registration outlives the side (the buffers stay in *bufs)
    for (NetSideBuffers::Group& g : bufs->slots)
      for (NetSideBuffers::Buf& b : g.bufs)
        if (b.registered) {
          b.registered = false;
          net->deregMr(comm, b.mh);
        }
  return err;
}

int netRunSender(const ncclNet_t* net, void* ctx, int dev, void* handle, const NetPlan& plan, std::string* err) {
  void* comm = netConnect(net, ctx, dev, handle, netNowNs() + plan.deadlineMs * 1000000LL, err);
  if (comm == nullptr) return 1;
  NetSideBuffers bufs;
  *err = netRunSide(net, comm, true, plan, &bufs);
  net->closeSend(comm);
  return err->empty() ? 0 : 1;
}

int netRunReceiver(const ncclNet_t* net, void* listenComm, const NetPlan& plan, std::string* err) {
  void* comm = netAccept(net, listenComm, netNowNs() + plan.deadlineMs * 1000000LL, err);
  if (comm == nullptr) return 1;
  NetSideBuffers bufs;
  *err = netRunSide(net, comm, false, plan, &bufs);
  net->closeRecv(comm);
  return err->empty() ? 0 : 1;
}

std::string netHandleToHex(const void* handle) {
  static const char* hex = "0123456789abcdef";
  const unsigned char* p = (const unsigned char*)handle;
  std::string s;
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) {
    s += hex[p[i] >> 4];
    s += hex[p[i] & 15];
  }
  return s;
}

bool netHandleFromHex(const std::string& hex, void* handle) {
  if (hex.size() != 2 * NCCL_NET_HANDLE_MAXSIZE) return false;
  unsigned char* p = (unsigned char*)handle;
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) {
    unsigned v;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    p[i] = (unsigned char)v;
  }
  return true;
}

std::string netRunPairInProcess(const ncclNet_t* net, void* sc, void* rc, const NetPlan& plan,
                                const std::function<std::string(void*, void*)>& beforeClose) {
  std::string sendErr, recvErr;
  {
    NetSideBuffers sb, rb;  // until the comms are closed
    std::thread sender([&] { sendErr = netRunSide(net, sc, true, plan, &sb); });
    recvErr = netRunSide(net, rc, false, plan, &rb);
    sender.join();
    if (beforeClose) sendErr += beforeClose(sc, rc);
    net->closeSend(sc);
    net->closeRecv(rc);
  }
  if (!sendErr.empty()) return "sender: " + sendErr;
  if (!recvErr.empty()) return "receiver: " + recvErr;
  return "";
}
