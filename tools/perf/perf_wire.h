/*
 * What crosses the wire between railnet-perf's two ends (the messages of data comm 0 and its
 * reverse comm), and the limits both ends check. C and C++ (the tests send it too).
 */
#ifndef RAILNET_TOOLS_PERF_WIRE_H_
#define RAILNET_TOOLS_PERF_WIRE_H_

#include <stdint.h>
#include <railnet_net/net.h>

#ifdef __cplusplus
#define PERF_STATIC_ASSERT static_assert
#else
#define PERF_STATIC_ASSERT _Static_assert
#endif

#define PERF_MAGIC 0x7261696c70657266ULL /* "railperf" */
#define MAX_SIZES 64
#define MAX_RECVS 8  /* --recvs: NCCL's largest multi-receive (NCCL_NET_IB_MAX_RECVS) */
#define MAX_RECV_SIZE (1 << 30) /* --recv-size */
#define MAX_MSG_SIZE (1ull << 30) /* -s, --max-size: 1 GiB, what the IB transport carries (maxP2pBytes) */
#define MAX_COMMS 16 /* --comms */
#define CTRL_SIZE 4096

/* What the client tells the server (first message over data comm 0). */
typedef struct {
  uint64_t magic;
  int32_t nSizes, iters, warmup, window, bw, lat;
  int32_t recvs, comms, cuda, recvSize; /* recvSize: --recv-size (0: the message size) */
  uint64_t sizes[MAX_SIZES];
  char handles[MAX_COMMS][NCCL_NET_HANDLE_MAXSIZE]; /* the client's listen handles, one per reverse comm */
} perfConfig;
PERF_STATIC_ASSERT(sizeof(perfConfig) <= CTRL_SIZE, "config fits the control message");

/* The server's answer (over reverse comm 0): where data comms 1..comms-1 connect. */
typedef struct {
  uint64_t magic;
  int32_t comms, pad;
  char handles[MAX_COMMS][NCCL_NET_HANDLE_MAXSIZE];
} perfReply;
PERF_STATIC_ASSERT(sizeof(perfReply) <= CTRL_SIZE, "reply fits the control message");

/* Server -> client after each size (and to stay in step): what the receiver counted. */
typedef struct {
  uint64_t magic;
  int64_t bytes, buffers, messages; /* sizes test() reported, summed; buffers; irecvs */
  int32_t ok, pad;                  /* sizes and contents right */
} perfAck;

#endif
