#include "net_pair.h"
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <memory>

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

namespace {
struct Slot {
  std::unique_ptr<char[]> buf;
  void* req = nullptr;
  int k = -1;
};
}  // namespace

// Posts up to plan.inflight messages, then completes them in order. The buffers live in
// slots, which the caller keeps until the comm is closed: after a failed request the
// transport may still be writing into the others (NCCL's rule: a buffer stays valid until
// its request completes or its comm is closed).
static int runSide(const ncclNet_t* net, void* comm, bool send, const NetPlan& plan, std::vector<Slot>& slots,
                   std::string* err) {
  long long deadline = netNowNs() + plan.deadlineMs * 1000000LL;
  void* mh = nullptr;
  size_t maxSize = 1;
  for (size_t s : plan.sizes) maxSize = s > maxSize ? s : maxSize;
  char dummy;
  if (net->regMr(comm, &dummy, 1, NCCL_PTR_HOST, &mh) != ncclSuccess) {
    *err = "regMr failed";
    return 1;
  }
  slots.clear();
  slots.resize(plan.inflight);
  size_t next = 0, completed = 0;
  int slotIdx = 0;
  while (completed < plan.sizes.size()) {
    // post into free slots, in order
    while (next < plan.sizes.size()) {
      Slot& s = slots[next % plan.inflight];
      if (s.req != nullptr) break;
      size_t size = plan.sizes[next];
      s.buf.reset(new char[size ? size : 1]);
      s.k = (int)next;
      if (send) netPatternFill(s.buf.get(), size, s.k);
      else memset(s.buf.get(), 0, size ? size : 1);
      ncclResult_t r;
      while (true) {
        if (send) {
          r = net->isend(comm, s.buf.get(), size, s.k, mh, nullptr, &s.req);
        } else {
          void* data = s.buf.get();
          size_t sz = size;
          int tag = s.k;
          r = net->irecv(comm, 1, &data, &sz, &tag, &mh, nullptr, &s.req);
        }
        if (r != ncclSuccess) {
          *err = std::string(send ? "isend" : "irecv") + " returned " + std::to_string(r);
          return 1;
        }
        if (s.req != nullptr) break;
        if (netNowNs() > deadline) {
          *err = "no request slot by the deadline";
          return 1;
        }
      }
      next++;
    }
    Slot& s = slots[slotIdx];
    int size = -1;
    if (!netWait(net, s.req, &size, deadline, err)) {
      *err = "message " + std::to_string(s.k) + ": " + *err;
      return 1;
    }
    size_t want = plan.sizes[s.k];
    if ((size_t)size != want) {
      *err = "message " + std::to_string(s.k) + ": reported size " + std::to_string(size) + ", expected " +
             std::to_string(want);
      return 1;
    }
    size_t bad = 0;
    if (!send && !netPatternCheck(s.buf.get(), want, s.k, &bad)) {
      *err = "message " + std::to_string(s.k) + " of " + std::to_string(want) + " bytes: wrong byte at " +
             std::to_string(bad);
      return 1;
    }
    s.req = nullptr;
    completed++;
    slotIdx = (slotIdx + 1) % plan.inflight;
  }
  net->deregMr(comm, mh);
  return 0;
}

int netRunSender(const ncclNet_t* net, void* ctx, int dev, void* handle, const NetPlan& plan, std::string* err) {
  long long deadline = netNowNs() + plan.deadlineMs * 1000000LL;
  void* comm = nullptr;
  ncclNetDeviceHandle_t* dc = nullptr;
  while (comm == nullptr) {
    ncclResult_t r = net->connect(ctx, dev, handle, &comm, &dc);
    if (r != ncclSuccess) {
      *err = "connect returned " + std::to_string(r);
      return 1;
    }
    if (comm == nullptr && netNowNs() > deadline) {
      *err = "connect did not complete by the deadline";
      return 1;
    }
  }
  std::vector<Slot> slots;
  int rc = runSide(net, comm, true, plan, slots, err);
  net->closeSend(comm);
  return rc;
}

int netRunReceiver(const ncclNet_t* net, void* listenComm, const NetPlan& plan, std::string* err) {
  long long deadline = netNowNs() + plan.deadlineMs * 1000000LL;
  void* comm = nullptr;
  ncclNetDeviceHandle_t* dc = nullptr;
  while (comm == nullptr) {
    ncclResult_t r = net->accept(listenComm, &comm, &dc);
    if (r != ncclSuccess) {
      *err = "accept returned " + std::to_string(r);
      return 1;
    }
    if (comm == nullptr && netNowNs() > deadline) {
      *err = "accept did not complete by the deadline";
      return 1;
    }
  }
  std::vector<Slot> slots;
  int rc = runSide(net, comm, false, plan, slots, err);
  net->closeRecv(comm);
  return rc;
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
