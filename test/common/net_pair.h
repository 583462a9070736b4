// Two ends of an ncclNet transfer, for tests that run the ends in two processes
// (fork, or two network namespaces). Every wait has a deadline; the ends report what
// went wrong as text, so that a test can assert it.
#pragma once
#include <stddef.h>
#include <string>
#include <vector>

extern "C" {
#include <railnet_net/net.h>
}

struct NetPlan {
  std::vector<size_t> sizes;  // messages, in order
  int inflight = 1;           // requests posted before waiting (<= NCCL_NET_MAX_REQUESTS)
  int deadlineMs = 60000;     // whole transfer
};

// Fill / check the test pattern of message k.
void netPatternFill(char* buf, size_t size, int k);
bool netPatternCheck(const char* buf, size_t size, int k, size_t* firstBad);

// Connect with `handle` and send plan.sizes; 0 on success, else 1 with *err set.
int netRunSender(const ncclNet_t* net, void* ctx, int dev, void* handle, const NetPlan& plan, std::string* err);
// Accept on listenComm and receive plan.sizes, checking data and reported sizes.
int netRunReceiver(const ncclNet_t* net, void* listenComm, const NetPlan& plan, std::string* err);
// Poll connect/accept until both comms exist (same process), with a deadline.
bool netConnectPair(const ncclNet_t* net, void* ctx, int dev, void* handle, void* listenComm, void** sendComm,
                    void** recvComm, int deadlineMs = 20000);
// Wait for one request; false on error or deadline (with *err set).
bool netWait(const ncclNet_t* net, void* req, int* size, long long deadlineNs, std::string* err);

std::string netHandleToHex(const void* handle);
bool netHandleFromHex(const std::string& hex, void* handle);
long long netNowNs();
