/*
 * socket_bench: the Socket transport through the plugin API (libnccl-net-railnet.so,
 * ncclNetPlugin_v12, loaded like NCCL loads it), with a reference measured in the same
 * run between the same two processes.
 *
 *   socket_bench bw  [--sizes "4096 65536 ..."] [--seconds S] [--inflight N] [--bufs B] [--recv-netns NS]
 *       unidirectional bandwidth, N messages in flight from (into) B buffers per side
 *       (default N: each its own), receiver in a child process (inside network namespace NS,
 *       /run/netns/NS, with --recv-netns: e.g. the other end of a veth pair); prints MB/s per size
 *   socket_bench lat [--iters N]
 *       8-byte ping-pong through isend/irecv/test vs a raw TCP ping-pong of 8 bytes
 *       between the same two processes; prints both and the ratio
 *   socket_bench tcp [--sizes LIST] [--seconds S] [--streams N] [--host ADDR] [--recv-netns NS]
 *       the reference for bw with the same buffers: the kernel's TCP over N streams, one
 *       thread per side, each message's bytes split over the streams, each stream walking
 *       its share (at least 128 KiB) of one buffer per side in calls of at most 512 KiB; the
 *       sender connects to ADDR (default 127.0.0.1), the receiver (a child process, in
 *       network namespace NS with --recv-netns) listens on every address; prints MB/s per size
 *   socket_bench rtt1 [--iters N]
 *       one process, both ends, lock-step 8-byte round trips on loopback (for
 *       valgrind --tool=callgrind --toggle-collect=benchRoundTrips)
 * Interface: NCCL_SOCKET_IFNAME (e.g. lo, or a veth end inside a namespace); in bw
 * mode the sender connects to the address the receiver's listen returned, which is
 * passed through a pipe: both processes must be able to reach it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <railnet_net/net.h>
#include "plugin_load.h"

static ncclNet_v12_t* net;
static void* ctx;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char* what) {
  fprintf(stderr, "socket_bench: %s\n", what);
  exit(1);
}

#define CK(call) \
  do {           \
    if ((call) != ncclSuccess) die(#call); \
  } while (0)

static void load(void) {
  const char* lib = "libnccl-net-railnet.so";
  void* h = pluginOpenFirst(&lib, 1, NULL, 0, NULL, 0);
  if (h == NULL) die("cannot dlopen libnccl-net-railnet.so (set LD_LIBRARY_PATH to build/lib)");
  net = pluginFindNet(h, 12, 12, NULL);
  if (net == NULL) die("no ncclNetPlugin_v12");
  CK(net->init(&ctx, 0, NULL, NULL, NULL));
}

static void waitReq(void* req, int* size) {
  int done = 0;
  double t0 = now();
  while (!done) {
    CK(net->test(req, &done, size));
    if (!done && now() - t0 > 60) die("request not done within 60 s");
    if (!done) sched_yield(); /* as NCCL's proxy thread does when it made no progress */
  }
}

static void connectPair(void* handle, void* lc, void** s, void** r) {
  ncclNetDeviceHandle_v12_t *sd, *rd;
  *s = *r = NULL;
  double t0 = now();
  while (*s == NULL || *r == NULL) {
    if (*s == NULL) CK(net->connect(ctx, 0, handle, s, &sd));
    if (*r == NULL && lc) CK(net->accept(lc, r, &rd));
    if (lc == NULL) *r = (void*)1;
    if (now() - t0 > 30) die("connect/accept did not finish within 30 s");
  }
}

/* ------------------------------------------------------------------ bandwidth */

static void bwReceiver(int wfd, int rfd, size_t maxSize, int inflight, int bufs) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *rc = NULL;
  ncclNetDeviceHandle_v12_t* dc;
  CK(net->listen(ctx, 0, handle, &lc));
  if (write(wfd, handle, sizeof(handle)) != sizeof(handle)) die("pipe");
  double t0 = now();
  while (rc == NULL) {
    CK(net->accept(lc, &rc, &dc));
    if (now() - t0 > 30) die("accept timeout");
  }
  char* buf = malloc(maxSize * bufs);
  memset(buf, 1, maxSize * bufs); /* not 0: the compiler makes malloc+memset(0) a calloc, whose pages fault later */
  for (;;) {
    size_t hdr[2];
    if (read(rfd, hdr, sizeof(hdr)) != sizeof(hdr)) break; /* size, count */
    size_t size = hdr[0], count = hdr[1];
    void* reqs[64] = {0};
    double start = 0;
    for (size_t i = 0; i < count + inflight; i++) {
      int slot = i % inflight;
      if (reqs[slot]) {
        int got;
        waitReq(reqs[slot], &got);
        if (i == (size_t)inflight) start = now(); /* the first message measures setup, not rate */
        reqs[slot] = NULL;
      }
      if (i < count) {
        void* d = buf + (slot % bufs) * maxSize;
        size_t sz = size;
        int tag = 0;
        while (reqs[slot] == NULL) CK(net->irecv(rc, 1, &d, &sz, &tag, NULL, NULL, &reqs[slot]));
      }
    }
    double secs = now() - start;
    double mbps = (double)size * (count - inflight) / secs / 1e6;
    if (write(wfd, &mbps, sizeof(mbps)) != sizeof(mbps)) die("pipe");
  }
  CK(net->closeRecv(rc));
  CK(net->closeListen(lc));
  free(buf);
}

static void enterNetns(const char* name) {
  char path[256];
  snprintf(path, sizeof(path), "/run/netns/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) die("cannot enter the receiver's network namespace (needs root)");
  close(fd);
}

/* The sizes of --sizes (at most 32), their count, and in *maxSize the largest. */
static int parseSizes(const char* sizesStr, size_t sizes[32], size_t* maxSize) {
  int n = 0;
  char tmp[512];
  snprintf(tmp, sizeof(tmp), "%s", sizesStr);
  for (char* t = strtok(tmp, " ,"); t && n < 32; t = strtok(NULL, " ,")) sizes[n++] = strtoull(t, NULL, 0);
  *maxSize = 0;
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 64) die("--sizes: every size must be at least 64 bytes");
    if (sizes[i] > *maxSize) *maxSize = sizes[i];
  }
  return n;
}

/* What a receiving process runs: its pipe ends to (wfd) and from (rfd) the sender. */
struct receiverArgs {
  size_t maxSize;
  int inflight, bufs, streams;
};
typedef void (*receiverFn)(int wfd, int rfd, const struct receiverArgs* a);

/* Forks the receiving process (inside network namespace recvNetns if given) running fn; the
 * sender's ends of the two pipes go to *fromReceiver and *toReceiver. */
static pid_t forkReceiver(const char* recvNetns, receiverFn fn, const struct receiverArgs* a, int* fromReceiver,
                          int* toReceiver) {
  int toParent[2], toChild[2];
  if (pipe(toParent) || pipe(toChild)) die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(toParent[0]);
    close(toChild[1]);
    if (recvNetns) enterNetns(recvNetns);
    fn(toParent[1], toChild[0], a);
    _exit(0);
  }
  close(toParent[1]);
  close(toChild[0]);
  *fromReceiver = toParent[0];
  *toReceiver = toChild[1];
  return pid;
}

static void bwReceiverMain(int wfd, int rfd, const struct receiverArgs* a) {
  load();
  bwReceiver(wfd, rfd, a->maxSize, a->inflight, a->bufs);
}

static int bw(const char* sizesStr, double seconds, int inflight, int bufs, const char* recvNetns) {
  size_t sizes[32], maxSize;
  int n = parseSizes(sizesStr, sizes, &maxSize);
  struct receiverArgs args = {.maxSize = maxSize, .inflight = inflight, .bufs = bufs};
  int toParent[2], toChild[2]; /* [0]: the sender's end of the first, [1] of the second */
  pid_t pid = forkReceiver(recvNetns, bwReceiverMain, &args, &toParent[0], &toChild[1]);
  load();
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (read(toParent[0], handle, sizeof(handle)) != sizeof(handle)) die("receiver did not start");
  void *sc, *dummy;
  connectPair(handle, NULL, &sc, &dummy);
  char* buf = malloc(maxSize * bufs);
  memset(buf, 7, maxSize * bufs);
  printf("%-10s %10s %12s\n", "#bytes", "#iters", "BW MB/s");
  for (int k = 0; k < n; k++) {
    size_t size = sizes[k];
    /* calibrate: as many messages as fill `seconds` at 2 GB/s, at least 8 x inflight */
    size_t count = (size_t)(seconds * 2e9 / size);
    if (count < (size_t)inflight * 8) count = inflight * 8;
    if (count > 2000000) count = 2000000;
    size_t hdr[2] = {size, count};
    if (write(toChild[1], hdr, sizeof(hdr)) != sizeof(hdr)) die("pipe");
    void* reqs[64] = {0};
    for (size_t i = 0; i < count + inflight; i++) {
      int slot = i % inflight;
      if (reqs[slot]) {
        int got;
        waitReq(reqs[slot], &got);
        reqs[slot] = NULL;
      }
      if (i < count)
        while (reqs[slot] == NULL) CK(net->isend(sc, buf + (slot % bufs) * maxSize, size, 0, NULL, NULL, &reqs[slot]));
    }
    double mbps;
    if (read(toParent[0], &mbps, sizeof(mbps)) != sizeof(mbps)) die("receiver died");
    printf("%-10zu %10zu %12.1f\n", size, count, mbps);
    fflush(stdout);
  }
  close(toChild[1]);
  CK(net->closeSend(sc));
  int st;
  waitpid(pid, &st, 0);
  free(buf);
  return 0;
}

/* ------------------------------------------------------------------ kernel TCP, same buffers */

/* The kernel's TCP as a reference with the buffers the bw mode uses: `streams` connections,
 * one thread per side (as iperf3), every message's bytes split over the streams as the
 * transport splits them, each stream walking its share of one message-sized buffer in
 * calls of at most 512 KiB (a share is at least 128 KiB, iperf3's buffer). iperf3 reuses
 * one 128 KiB buffer per stream, which stays in cache; from messages larger than the cache
 * this reference pays for cold memory, as the transport does. */
#define TCP_CALL_BYTES (512 * 1024)
#define TCP_MIN_SHARE (128 * 1024)

struct tcpStream {
  int fd;
  size_t off, len; /* this stream's share of the buffer */
  size_t pos;      /* next byte within the share */
};

/* Stream i's share: its part of the message, at least iperf3's 128 KiB (so that small
 * messages are not small calls); the buffer holds every share. */
static size_t tcpShare(int streams, size_t size) {
  size_t share = (size + streams - 1) / streams;
  return share > TCP_MIN_SHARE ? share : TCP_MIN_SHARE;
}

static void tcpShares(struct tcpStream* st, int streams, size_t size) {
  size_t share = tcpShare(streams, size);
  for (int i = 0; i < streams; i++) {
    st[i].off = share * i;
    st[i].len = share;
    st[i].pos = 0;
  }
}

/* One poll round over the streams: send (or receive) one call's worth on each ready one.
 * Returns the bytes moved; -1 when every stream saw its end (receiver). */
static long tcpPump(struct tcpStream* st, int streams, char* buf, int sending) {
  struct pollfd p[64];
  int n = 0;
  for (int i = 0; i < streams; i++) {
    p[i].fd = st[i].len ? st[i].fd : -1;
    p[i].events = sending ? POLLOUT : POLLIN;
    n += st[i].len && st[i].fd >= 0;
  }
  if (n == 0) return -1;
  if (poll(p, streams, 1000) < 0) die("tcp: poll");
  long moved = 0;
  for (int i = 0; i < streams; i++) {
    if (p[i].fd < 0 || p[i].revents == 0) continue;
    size_t want = st[i].len - st[i].pos;
    if (want > TCP_CALL_BYTES) want = TCP_CALL_BYTES;
    char* at = buf + st[i].off + st[i].pos;
    ssize_t got = sending ? send(st[i].fd, at, want, MSG_DONTWAIT) : recv(st[i].fd, at, want, MSG_DONTWAIT);
    if ((got == 0 && !sending) || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      if (got < 0 && sending) die("tcp: the receiver's connection failed");
      close(st[i].fd); /* the sender is done (or its connection failed) */
      st[i].fd = -1;
      continue;
    }
    if (got < 0) continue; /* nothing now */
    st[i].pos = (st[i].pos + got) % st[i].len;
    moved += got;
  }
  return moved;
}

static void tcpReceiver(int wfd, int rfd, size_t maxSize, int streams) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t alen = sizeof(a);
  if (bind(l, (struct sockaddr*)&a, sizeof(a)) || listen(l, 64) || getsockname(l, (struct sockaddr*)&a, &alen))
    die("tcp: listen");
  int port = ntohs(a.sin_port);
  if (write(wfd, &port, sizeof(port)) != sizeof(port)) die("pipe");
  size_t bytes = tcpShare(streams, maxSize) * streams;
  char* buf = malloc(bytes);
  memset(buf, 1, bytes); /* touched before the clock starts (a memset to 0 would become a calloc) */
  size_t size;
  while (read(rfd, &size, sizeof(size)) == sizeof(size)) {
    struct tcpStream st[64];
    tcpShares(st, streams, size);
    for (int i = 0; i < streams; i++)
      if ((st[i].fd = accept(l, NULL, NULL)) < 0) die("tcp: accept");
    size_t total = 0;
    double start = 0;
    for (long got; (got = tcpPump(st, streams, buf, 0)) >= 0;) {
      if (got > 0 && start == 0) start = now(); /* from the first byte: not the connection setup */
      total += got;
    }
    double mbps = start > 0 ? total / (now() - start) / 1e6 : 0;
    if (write(wfd, &mbps, sizeof(mbps)) != sizeof(mbps)) die("pipe");
  }
  close(l);
  free(buf);
}

static void tcpReceiverMain(int wfd, int rfd, const struct receiverArgs* a) {
  tcpReceiver(wfd, rfd, a->maxSize, a->streams);
}

static int tcp(const char* sizesStr, double seconds, int streams, const char* host, const char* recvNetns) {
  size_t sizes[32], maxSize;
  int n = parseSizes(sizesStr, sizes, &maxSize);
  struct receiverArgs args = {.maxSize = maxSize, .streams = streams};
  int toParent[2], toChild[2]; /* [0]: the sender's end of the first, [1] of the second */
  pid_t pid = forkReceiver(recvNetns, tcpReceiverMain, &args, &toParent[0], &toChild[1]);
  int port;
  if (read(toParent[0], &port, sizeof(port)) != sizeof(port)) die("receiver did not start");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) die("--host: not an IPv4 address");
  size_t bytes = tcpShare(streams, maxSize) * streams;
  char* buf = malloc(bytes);
  memset(buf, 7, bytes);
  printf("%-10s %10s %12s\n", "#bytes", "#streams", "BW MB/s");
  for (int k = 0; k < n; k++) {
    if (write(toChild[1], &sizes[k], sizeof(sizes[k])) != sizeof(sizes[k])) die("pipe");
    struct tcpStream st[64];
    tcpShares(st, streams, sizes[k]);
    for (int i = 0; i < streams; i++) {
      st[i].fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(st[i].fd, (struct sockaddr*)&a, sizeof(a)) != 0) die("tcp: connect");
    }
    double t0 = now();
    while (now() - t0 < seconds) tcpPump(st, streams, buf, 1);
    for (int i = 0; i < streams; i++) close(st[i].fd);
    double mbps;
    if (read(toParent[0], &mbps, sizeof(mbps)) != sizeof(mbps)) die("receiver died");
    printf("%-10zu %10d %12.1f\n", sizes[k], streams, mbps);
    fflush(stdout);
  }
  close(toChild[1]);
  waitpid(pid, NULL, 0);
  free(buf);
  return 0;
}

/* ------------------------------------------------------------------ latency */

/* Raw TCP ping-pong of 8 bytes between the two processes, the reference. */
static double rawPingPong(int isServer, int port, int iters) {
  int fd;
  if (isServer) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(l, (struct sockaddr*)&a, sizeof(a)) || listen(l, 1)) die("raw listen");
    fd = accept(l, NULL, NULL);
    close(l);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    double t0 = now();
    while (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
      if (now() - t0 > 10) die("raw connect");
      usleep(1000);
      close(fd);
      fd = socket(AF_INET, SOCK_STREAM, 0);
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char b[8] = {0};
  double t0 = now();
  for (int i = 0; i < iters; i++) {
    if (isServer) {
      if (recv(fd, b, 8, MSG_WAITALL) != 8 || send(fd, b, 8, 0) != 8) die("raw io");
    } else {
      if (send(fd, b, 8, 0) != 8 || recv(fd, b, 8, MSG_WAITALL) != 8) die("raw io");
    }
  }
  double us = (now() - t0) / iters * 1e6;
  close(fd);
  return us;
}

/* One side of the ncclNet ping-pong: `first` sends first. */
static double netPingPong(void* sc, void* rc, int first, int iters) {
  char sb[8] = {0}, rb[8];
  double t0 = now();
  for (int i = 0; i < iters; i++) {
    for (int step = 0; step < 2; step++) {
      void* req = NULL;
      int sz;
      if ((step == 0) == (first != 0)) {
        while (req == NULL) CK(net->isend(sc, sb, 8, 1, NULL, NULL, &req));
      } else {
        void* d = rb;
        size_t s = 8;
        int tag = 1;
        while (req == NULL) CK(net->irecv(rc, 1, &d, &s, &tag, NULL, NULL, &req));
      }
      waitReq(req, &sz);
    }
  }
  return (now() - t0) / iters * 1e6;
}

static int lat(int iters) {
  int toParent[2], toChild[2];
  if (pipe(toParent) || pipe(toChild)) die("pipe");
  int port = 20000 + getpid() % 20000;
  pid_t pid = fork();
  int isChild = pid == 0;
  int rfd = isChild ? toChild[0] : toParent[0], wfd = isChild ? toParent[1] : toChild[1];
  load();
  /* each side listens; they swap handles; each connects to the other */
  char mine[NCCL_NET_HANDLE_MAXSIZE], theirs[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *sc = NULL, *rc = NULL;
  ncclNetDeviceHandle_v12_t* dc;
  CK(net->listen(ctx, 0, mine, &lc));
  if (write(wfd, mine, sizeof(mine)) != sizeof(mine) || read(rfd, theirs, sizeof(theirs)) != sizeof(theirs))
    die("handle exchange");
  double t0 = now();
  while (sc == NULL || rc == NULL) {
    if (sc == NULL) CK(net->connect(ctx, 0, theirs, &sc, &dc));
    if (rc == NULL) CK(net->accept(lc, &rc, &dc));
    if (now() - t0 > 30) die("connect timeout");
  }
  netPingPong(sc, rc, !isChild, iters / 10 + 1); /* warm-up */
  double us = netPingPong(sc, rc, !isChild, iters);
  double raw = rawPingPong(isChild, port, iters);
  if (isChild) {
    CK(net->closeSend(sc));
    CK(net->closeRecv(rc));
    _exit(0);
  }
  waitpid(pid, NULL, 0);
  printf("8-byte round trip: railnet %.2f us, raw TCP %.2f us, ratio %.2f (target <= 1.25)\n", us, raw, us / raw);
  return 0;
}

/* ------------------------------------------------------------------ one process */

/* Lock-step round trips inside one process, for instruction counts. */
__attribute__((noinline)) void benchRoundTrips(void* s1, void* r1, void* s2, void* r2, int iters) {
  char sb[8] = {0}, rb[8];
  for (int i = 0; i < iters; i++) {
    void* pairs[2][2] = {{s1, r1}, {s2, r2}}; /* there and back */
    for (int p = 0; p < 2; p++) {
      void *sreq = NULL, *rreq = NULL;
      void* d = rb;
      size_t s = 8;
      int tag = 0, sz, done = 0;
      while (rreq == NULL) CK(net->irecv(pairs[p][1], 1, &d, &s, &tag, NULL, NULL, &rreq));
      while (sreq == NULL) CK(net->isend(pairs[p][0], sb, 8, 0, NULL, NULL, &sreq));
      while (!done) CK(net->test(sreq, &done, &sz));
      done = 0;
      while (!done) CK(net->test(rreq, &done, &sz));
    }
  }
}

static int rtt1(int iters) {
  load();
  char h[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *s1, *r1, *s2, *r2;
  CK(net->listen(ctx, 0, h, &lc));
  connectPair(h, lc, &s1, &r1);
  connectPair(h, lc, &s2, &r2);
  double t0 = now();
  benchRoundTrips(s1, r1, s2, r2, iters);
  printf("%d round trips in one process: %.2f us each\n", iters, (now() - t0) / iters * 1e6);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0) {
    printf("usage: socket_bench bw [--sizes LIST] [--seconds S] [--inflight N] [--bufs N] [--recv-netns NS] | lat [--iters N] |"
           " rtt1 [--iters N] |\n       tcp [--sizes LIST] [--seconds S] [--streams N] [--host ADDR] [--recv-netns NS]\n");
    return argc < 2;
  }
  const char* sizes = "4096 65536 1048576 4194304 16777216 67108864";
  double seconds = 1;
  int inflight = 4, iters = 20000, bufs = 0, streams = 1;
  const char *recvNetns = NULL, *host = "127.0.0.1";
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--sizes") == 0) sizes = argv[i + 1];
    else if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--inflight") == 0) inflight = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--bufs") == 0) bufs = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--recv-netns") == 0) recvNetns = argv[i + 1];
    else if (strcmp(argv[i], "--streams") == 0) streams = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--host") == 0) host = argv[i + 1];
    else die("unknown option (see --help)");
  }
  if (inflight < 1 || inflight > 32) die("--inflight must be 1..32");
  if (bufs == 0) bufs = inflight;
  if (bufs < 1 || bufs > inflight) die("--bufs must be 1..inflight");
  if (streams < 1 || streams > 64) die("--streams must be 1..64");
  signal(SIGPIPE, SIG_IGN);
  if (strcmp(argv[1], "bw") == 0) return bw(sizes, seconds, inflight, bufs, recvNetns);
  if (strcmp(argv[1], "lat") == 0) return lat(iters);
  if (strcmp(argv[1], "rtt1") == 0) return rtt1(iters);
  if (strcmp(argv[1], "tcp") == 0) return tcp(sizes, seconds, streams, host, recvNetns);
  die("unknown mode");
  return 1;
}
