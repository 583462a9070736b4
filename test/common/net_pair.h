// Two ends of an ncclNet transfer, for tests that run the ends in two processes
// (fork, or two network namespaces). Every wait has a deadline; the ends report what
// went wrong as text, so that a test can assert it.
#pragma once
#include <stddef.h>
#include <sys/types.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include <railnet_net/net.h>
}

// One buffer of a group: the bytes the sender sends, the bytes the receiver posts for them
// (more is allowed; less makes the sender fail).
struct NetMsg {
  size_t sendSize;
  size_t recvSize;
};

// The buffers of a group share one irecv (multi-receive) and take one isend each.
constexpr int kNetMaxGroup = 8;  // NCCL_NET_IB_MAX_RECVS, the most irecv takes at once

struct NetPlan {
  // The messages, in order: a group of one buffer, posted as large as sent, per entry of
  // sizes, then the groups (at most kNetMaxGroup buffers each). Buffer i of group k has tag
  // and pattern k * kNetMaxGroup + i.
  std::vector<size_t> sizes;
  std::vector<std::vector<NetMsg>> groups;
  int inflight = 1;              // groups posted before waiting (<= NCCL_NET_MAX_REQUESTS)
  int deadlineMs = 60000;        // whole transfer
  bool reverseSendTags = false;  // isend the buffers of a group in reverse tag order
  // fault tests: the groups again and again (message k keeps tag and pattern k) until a
  // request fails or the deadline passes, so the transfer lasts until the fault, however
  // fast the machine
  bool untilError = false;
};

// Where one side keeps its buffers. The caller holds it until the comm is closed: after a
// failed request the transport may still be writing into the others (NCCL's rule: a buffer
// stays valid until its request completes or its comm is closed).
struct NetSideBuffers {
  struct Buf {
    std::unique_ptr<char[]> mem;
    void* mh = nullptr;
    bool registered = false;
  };
  struct Group {
    std::vector<Buf> bufs;
    std::vector<void*> reqs;
    int k = -1;
  };
  std::vector<Group> slots;
};

// Fill / check the test pattern of message k.
void netPatternFill(char* buf, size_t size, int k);
bool netPatternCheck(const char* buf, size_t size, int k, size_t* firstBad);

// Runs one side of plan over an established comm: "" on success, else what went wrong.
// Each buffer is registered (regMr) for its group and deregistered when the group has
// completed, or when the side stops at an error.
std::string netRunSide(const ncclNet_t* net, void* comm, bool send, const NetPlan& plan, NetSideBuffers* bufs);
// Runs plan over a connected pair of this process (the sender on a thread), then closes both
// comms; beforeClose, when given, sees them first and may add to the sender's error. "" on
// success, else "sender: ..." / "receiver: ...".
std::string netRunPairInProcess(const ncclNet_t* net, void* sendComm, void* recvComm, const NetPlan& plan,
                                const std::function<std::string(void*, void*)>& beforeClose = nullptr);
// Poll connect / accept until the comm exists: nullptr with *err set on an error or at the
// deadline. With peer > 0, netAccept also gives up once that process has exited.
void* netConnect(const ncclNet_t* net, void* ctx, int dev, void* handle, long long deadlineNs, std::string* err);
void* netAccept(const ncclNet_t* net, void* listenComm, long long deadlineNs, std::string* err, pid_t peer = 0);

// Connect with `handle` and send plan; 0 on success, else 1 with *err set.
int netRunSender(const ncclNet_t* net, void* ctx, int dev, void* handle, const NetPlan& plan, std::string* err);
// Accept on listenComm and receive plan, checking data and reported sizes.
int netRunReceiver(const ncclNet_t* net, void* listenComm, const NetPlan& plan, std::string* err);
// Poll connect/accept until both comms exist (same process), with a deadline.
bool netConnectPair(const ncclNet_t* net, void* ctx, int dev, void* handle, void* listenComm, void** sendComm,
                    void** recvComm, int deadlineMs = 20000);
// Wait for one request; false on error or deadline (with *err set).
bool netWait(const ncclNet_t* net, void* req, int* size, long long deadlineNs, std::string* err);

std::string netHandleToHex(const void* handle);
bool netHandleFromHex(const std::string& hex, void* handle);
long long netNowNs();
