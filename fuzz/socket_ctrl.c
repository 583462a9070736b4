/*
 * A malicious peer of the Socket transport's receiving side, over loopback. Per input:
 * a fresh listen comm; the peer connects its sockets with a correct ncclSocket handshake,
 * announces socket indices (0..n, or indices from the input), and accept() builds the
 * receive comm. Receives are posted with buffers of exactly the posted size (ASan sees any
 * write past them); the peer then writes the input's bytes as the control stream (control
 * records, inline payloads, payloads) and data-socket streams, and closes. Every receive
 * must end, done or failed, within a bounded time; a done one never reports more bytes
 * than were posted.
 *
 * Input:
 *   byte 0: bits 0-1 helper threads (0..2), bit 2: 2 sockets per thread (else 1),
 *           bits 3-4: receives - 1, bit 5: indices from the input, bit 6: small tasks
 *   per receive: 2 bytes size (little endian), 1 byte tag
 *   if bit 5: one byte (int8) per socket: the index it announces
 *   with data sockets: 2 bytes control stream length L, then L bytes, then the rest split
 *   evenly over the data sockets; without: the rest is the control stream.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>
#include "fuzz_common.h"
#include "railnet.h"
#include "socket.h"

/* The Socket transport's handle, as net_socket.c lays it out (checked below by its magic). */
struct handleView {
  uint64_t handleMagic;
  uint64_t socketMagic;
  union ncclSocketAddress addr;
  int32_t nSocks;
  int32_t nThreads;
};
#define HANDLE_MAGIC 0x4b434f534c494152ULL
#define MAX_PEER_SOCKS 5
#define MAX_RECVS 4

static const ncclNet_t* net;
static void* ctx;
static char envThreads[64] = "NCCL_SOCKET_NTHREADS=0";
static char envSocks[64] = "NCCL_NSOCKS_PERTHREAD=1";
static char envTask[64] = "NCCL_SOCKET_MIN_TASKSIZE=65536";

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("RAILNET_SOCKET_TIMEOUT_MSEC", "5000", 1);
  putenv(envThreads);
  putenv(envSocks);
  putenv(envTask);
  net = railnetGetNet("socket");
  if (net == NULL || net->init(&ctx, 0, NULL, fuzzLogger, NULL) != ncclSuccess) {
    fprintf(stderr, "socket_ctrl: the Socket transport did not initialise on lo\n");
    abort();
  }
  return 0;
}

static void closeHard(int fd) {
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
}

/* Has the transport closed this peer socket (a dropped connection)? */
static int closedByServer(int fd) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  if (size < 1) return 0;
  uint8_t mode = *p++;
  int nThreads = mode & 3;
  if (nThreads == 3) nThreads = 2;
  int perThread = (mode & 4) ? 2 : 1;
  int nRecvs = ((mode >> 3) & 3) + 1;
  int idxFromInput = (mode >> 5) & 1;
  int smallTasks = (mode >> 6) & 1;
  size_t sizes[MAX_RECVS];
  int tags[MAX_RECVS];
  for (int i = 0; i < nRecvs; i++) {
    if (end - p < 3) return 0;
    sizes[i] = (size_t)p[0] | ((size_t)p[1] << 8);
    tags[i] = p[2];
    p += 3;
  }

  snprintf(envThreads, sizeof(envThreads), "NCCL_SOCKET_NTHREADS=%d", nThreads);
  snprintf(envSocks, sizeof(envSocks), "NCCL_NSOCKS_PERTHREAD=%d", perThread);
  snprintf(envTask, sizeof(envTask), "NCCL_SOCKET_MIN_TASKSIZE=%d", smallTasks ? 16 : 65536);
  railnetParamReset();
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = NULL;
  FUZZ_CHECK(net->listen(ctx, 0, handle, &lc) == ncclSuccess, "listen");
  struct handleView h;
  memcpy(&h, handle, sizeof(h));
  FUZZ_CHECK(h.handleMagic == HANDLE_MAGIC, "the handle layout changed: update struct handleView");
  int nSocks = h.nSocks, nConn = h.nSocks + 1;
  FUZZ_CHECK(nConn <= MAX_PEER_SOCKS, "%d sockets", nSocks);

  int32_t idx[MAX_PEER_SOCKS];
  int valid = 1, seen[MAX_PEER_SOCKS] = {0}, distinct = 0;
  for (int i = 0; i < nConn; i++) {
    idx[i] = i;
    if (idxFromInput) {
      if (p >= end) goto out_listen;
      idx[i] = (int8_t)*p++;
    }
    if (idx[i] >= 0 && idx[i] < nConn && !seen[idx[i]]) {
      seen[idx[i]] = 1;
      distinct++;
    }
  }
  valid = distinct == nConn;

  /* connect, handshake, announce */
  int fds[MAX_PEER_SOCKS];
  for (int i = 0; i < nConn; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fds[i] >= 0, "socket: %s", strerror(errno));
    int err = fuzzConnect(fds[i], &h.addr.sa, sizeof(h.addr.sin));
    FUZZ_CHECK(err == 0, "peer connect: %s", strerror(err));
    char hs[16];
    int type = ncclSocketTypeNetSocket;
    memcpy(hs, &h.socketMagic, 8);
    memcpy(hs + 8, &type, 4);
    memcpy(hs + 12, &idx[i], 4);
    FUZZ_CHECK(send(fds[i], hs, sizeof(hs), MSG_NOSIGNAL) == (ssize_t)sizeof(hs), "peer handshake");
  }

  void* rc = NULL;
  ncclNetDeviceHandle_t* dc = NULL;
  uint64_t deadline = railnetClockNs() + 5000000000ull;
  for (;;) {
    FUZZ_CHECK(net->accept(lc, &rc, &dc) == ncclSuccess, "accept failed");
    if (rc != NULL) break;
    if (!valid) {
      int closed = 0;
      for (int i = 0; i < nConn; i++) closed += closedByServer(fds[i]);
      if (closed >= nConn - distinct) break; /* every bad announcement was dropped */
    }
    FUZZ_CHECK(railnetClockNs() < deadline, "accept did not finish in 5 s (valid indices: %d)", valid);
  }
  FUZZ_CHECK((rc != NULL) == valid, "accept built a comm: %d, indices valid: %d", rc != NULL, valid);
  if (rc == NULL) goto out_fds;

  /* post the receives */
  char* bufs[MAX_RECVS];
  void* reqs[MAX_RECVS];
  int posted = 0;
  for (int i = 0; i < nRecvs; i++) {
    bufs[i] = (char*)malloc(sizes[i] ? sizes[i] : 1);
    void* d = bufs[i];
    reqs[i] = NULL;
    FUZZ_CHECK(net->irecv(rc, 1, &d, &sizes[i], &tags[i], NULL, NULL, &reqs[i]) == ncclSuccess && reqs[i],
               "irecv %d", i);
    posted++;
  }

  /* the peer's streams, then EOF on every socket */
  size_t ctrlLen = (size_t)(end - p);
  if (nSocks > 0) {
    ctrlLen = 0;
    if (end - p >= 2) {
      ctrlLen = (size_t)p[0] | ((size_t)p[1] << 8);
      p += 2;
    }
    if (ctrlLen > (size_t)(end - p)) ctrlLen = (size_t)(end - p);
  }
  /* the control socket is the one that announced index nSocks (idx is a permutation here) */
  for (int i = 0; i < nConn; i++) {
    const uint8_t* s;
    size_t n;
    if (idx[i] == nSocks) {
      s = p;
      n = ctrlLen;
    } else {
      size_t rest = (size_t)(end - p) - ctrlLen, share = rest / (size_t)nSocks;
      s = p + ctrlLen + share * (size_t)idx[i];
      n = idx[i] == nSocks - 1 ? rest - share * (size_t)(nSocks - 1) : share;
    }
    if (n > 0) (void)send(fds[i], s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fds[i], SHUT_WR);
  }

  deadline = railnetClockNs() + 5000000000ull;
  int failed = 0;
  for (int i = 0; i < posted; i++) {
    int done = 0, got = -1;
    while (!done) {
      ncclResult_t r = net->test(reqs[i], &done, &got);
      if (r != ncclSuccess) {
        failed = 1;
        break;
      }
      FUZZ_CHECK(railnetClockNs() < deadline, "receive %d neither done nor failed after 5 s", i);
    }
    if (failed) break;
    FUZZ_CHECK(got >= 0 && (size_t)got <= sizes[i], "receive %d done with %d bytes, posted %zu", i, got, sizes[i]);
  }
  for (int i = 0; i < nConn; i++) closeHard(fds[i]);
  FUZZ_CHECK(net->closeRecv(rc) == ncclSuccess, "closeRecv");
  for (int i = 0; i < posted; i++) free(bufs[i]);
  FUZZ_CHECK(net->closeListen(lc) == ncclSuccess, "closeListen");
  return 0;

out_fds:
  for (int i = 0; i < nConn; i++) closeHard(fds[i]);
out_listen:
  net->closeListen(lc);
  return 0;
}
