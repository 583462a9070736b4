/*
 * The Socket transport: ncclNet over TCP, NCCL's design.
 *
 * A comm is one control socket plus nSocks data sockets served by nThreads helper
 * threads (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, automatic on known cloud NICs).
 * Each message first sends a control record (size, tag, and the payload itself when it
 * is at most NCCL_SOCKET_INLINE bytes) on the control socket; larger payloads are cut
 * into tasks of at least NCCL_SOCKET_MIN_TASKSIZE bytes spread round-robin over the data
 * sockets (or sent on the control socket when there are none). Both ends cut and assign
 * in the same order, so no per-chunk header is needed.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core.h"
#include "param.h"
#include "socket.h"
#include "conn_stage.h"
#include "transport.h"
#include "net_socket.h"
#include "testing.h"

#define MAX_SOCKETS 64
#define MAX_THREADS 16
#define MAX_REQUESTS NCCL_NET_MAX_REQUESTS
#define MAX_COLLNET_SIZE (512 * 1024 * 1024L)
#define HANDLE_MAGIC 0x4b434f534c494152ULL /* "RAILSOCK" */

enum { P_NTHREADS, P_NSOCKS, P_INLINE, P_MIN_TASK, P_TIMEOUT };
static railnetParam netSocketParams[] = {
    [P_NTHREADS] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_NTHREADS", -2, -2, 1024,
                                         "Helper threads per comm (-2: automatic, 0 on most NICs, 2 on AWS, 4 on GCP)"),
    [P_NSOCKS] = RAILNET_PARAM_INT_DEF("NCCL_NSOCKS_PERTHREAD", -2, -2, 1024,
                                       "Data sockets per helper thread (-2: automatic, 8 on AWS, 1 elsewhere)"),
    [P_INLINE] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_INLINE", 128, 0, 1 << 20,
                                       "Messages up to this size travel inside the control record"),
    [P_MIN_TASK] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_MIN_TASKSIZE", 1 << 16, 1, INT32_MAX,
                                         "Smallest chunk a large message is cut into for the data sockets"),
    [P_TIMEOUT] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_TIMEOUT_MSEC", 600000, 100, 86400000,
                                        "A connection whose peer stops acknowledging or stops reading (dead host, "
                                        "link down, hung rank) fails after this long (TCP_USER_TIMEOUT, keepalive); "
                                        "keep it above the longest time ranks may legitimately diverge"),
};
RAILNET_PARAM_TABLE("net_socket", netSocketParams);

/* ------------------------------------------------------------------ devices */

typedef struct {
  char name[MAX_IF_NAME_SIZE];
  union ncclSocketAddress addr;
  char pciPath[PATH_MAX]; /* "" for virtual interfaces; not on the heap, so a dlclose leaks nothing */
} socketDev;

static pthread_mutex_t devLock = PTHREAD_MUTEX_INITIALIZER;
static socketDev devs[MAX_IFS];
static int ndevs = -1;

static ncclResult_t devicesInit(void) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&devLock);
  if (ndevs < 0) {
    char names[MAX_IFS * MAX_IF_NAME_SIZE];
    union ncclSocketAddress addrs[MAX_IFS];
    int n = 0;
    railnetIfStep step = RAILNET_IF_NONE;
    res = railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &n, &step);
    if (res == ncclSuccess && n <= 0) {
      WARN("NET/Socket : no usable network interface found (none is up with an address%s); "
           "check `ip addr` and NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY",
           railnetGetEnv("NCCL_SOCKET_IFNAME", NULL) ? " and matches NCCL_SOCKET_IFNAME" : "");
      res = ncclSystemError;
    }
    if (res == ncclSuccess) {
      char line[1024] = "";
      for (int i = 0; i < n; i++) {
        char a[SOCKET_NAME_MAXLEN], path[PATH_MAX];
        memcpy(devs[i].name, names + i * MAX_IF_NAME_SIZE, MAX_IF_NAME_SIZE);
        devs[i].name[MAX_IF_NAME_SIZE - 1] = '\0';
        devs[i].addr = addrs[i];
        snprintf(path, sizeof(path), "/sys/class/net/%.*s/device", MAX_IF_NAME_SIZE, devs[i].name);
        if (realpath(path, devs[i].pciPath) == NULL) devs[i].pciPath[0] = '\0';
        size_t l = strlen(line);
        snprintf(line + l, sizeof(line) - l, " [%d]%.*s:%s", i, MAX_IF_NAME_SIZE, devs[i].name,
                 ncclSocketToString(&addrs[i], a, 1));
      }
      ndevs = n;
      INFO(NCCL_INIT | NCCL_NET, "NET/Socket : Using%s (chosen by %s)", line, railnetIfStepName(step));
    }
  }
  pthread_mutex_unlock(&devLock);
  return res;
}

void railnetSocketResetDevices(void) {
  pthread_mutex_lock(&devLock);
  ndevs = -1;
  pthread_mutex_unlock(&devLock);
}

static ncclResult_t checkDev(int dev, const char* call) {
  if (dev < 0 || dev >= ndevs) {
    WARN("NET/Socket : %s on device %d, but there are %d devices (0..%d)", call, dev, ndevs < 0 ? 0 : ndevs,
         ndevs - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static int readSpeed(const char* ifName) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifName);
  FILE* f = fopen(path, "r");
  int speed = 0;
  if (f != NULL) {
    if (fscanf(f, "%d", &speed) != 1) speed = 0;
    fclose(f);
  }
  if (speed <= 0) {
    INFO(NCCL_NET, "Could not get speed from %s. Defaulting to 10 Gbps.", path);
    speed = 10000;
  }
  return speed;
}

/* NCCL's automatic threads x sockets: more streams on cloud NICs known to need them. */
static void threadsAndSockets(int dev, int* nThreads, int* nSocks) {
  int nt = (int)railnetParamInt(&netSocketParams[P_NTHREADS]);
  int ns = (int)railnetParamInt(&netSocketParams[P_NSOCKS]);
  if (nt > MAX_THREADS) {
    WARN("NET/Socket : NCCL_SOCKET_NTHREADS=%d is above the maximum; using %d", nt, MAX_THREADS);
    nt = MAX_THREADS;
  }
  if (nt == -2 || ns == -2) {
    int autoNt = 0, autoNs = 1;
    char path[PATH_MAX], vendor[16] = "";
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/vendor", devs[dev].name);
    FILE* f = fopen(path, "r");
    if (f != NULL) {
      if (fscanf(f, "%15s", vendor) != 1) vendor[0] = '\0';
      fclose(f);
    }
    if (strcmp(vendor, "0x1d0f") == 0) { /* AWS ENA */
      autoNt = 2;
      autoNs = 8;
    } else if (strcmp(vendor, "0x1ae0") == 0) { /* Google gVNIC */
      autoNt = 4;
      autoNs = 1;
    }
    if (nt == -2) nt = autoNt;
    if (ns == -2) ns = autoNs;
  }
  if (nt < 0) nt = 0;
  if (ns < 0) ns = 0;
  if (nt == 0) ns = 0;
  if (ns * nt > MAX_SOCKETS) {
    ns = MAX_SOCKETS / nt;
    WARN("NET/Socket : NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD is above %d sockets; using %d sockets per thread",
         MAX_SOCKETS, ns);
  }
  *nThreads = nt;
  *nSocks = ns * nt;
  if (*nSocks > 0) INFO(NCCL_INIT, "NET/Socket: Using %d threads and %d sockets per thread", nt, ns);
}

/* ------------------------------------------------------------------ comms */

typedef struct {
  uint64_t handleMagic;  /* HANDLE_MAGIC: tells a railnet handle from garbage */
  uint64_t socketMagic;  /* the listener's socket handshake magic */
  union ncclSocketAddress addr;
  int32_t nSocks;
  int32_t nThreads;
} socketHandle;
_Static_assert(sizeof(socketHandle) <= NCCL_NET_HANDLE_MAXSIZE, "socket handle too large");

/* One chunk of a message on one data socket. */
typedef struct {
  char* data;
  size_t size;
  size_t offset;      /* written by the helper thread */
  int done;           /* atomic: offset == size, or failed */
  ncclResult_t result;
} socketTask;

/*
 * Tasks of one data socket, in posting order. A socket holds at most one task per live
 * request (MAX_REQUESTS) plus the finished head task its thread has not popped yet, so
 * twice that many slots mean a new task never lands in a slot still in use.
 */
#define TASK_QUEUE_LEN (2 * MAX_REQUESTS)
typedef struct {
  socketTask tasks[TASK_QUEUE_LEN];
  int head, tail;     /* tail: next to post (main thread); head: next to run (helper thread) */
} taskQueue;

struct socketComm;

typedef struct {
  struct socketComm* comm;
  int first, count;   /* data sockets this thread serves */
  pthread_t thread;
  int started;
} helperThread;

/* Control record at the start of each message. */
typedef struct {
  uint64_t size;
  int32_t tag;
  int32_t pad;
} ctrlRecord;

enum { REQ_FREE = 0, REQ_CTRL, REQ_DATA };

typedef struct {
  struct socketComm* comm;
  int op;             /* NCCL_SOCKET_SEND or NCCL_SOCKET_RECV */
  int state;
  uint64_t seq;
  char* data;
  size_t size;        /* send: message size; recv: buffer size until the record arrives */
  int tag;
  char* ctrl;         /* record + inline payload */
  int ctrlLen;        /* bytes of ctrl to move (recv: grows once the size is known) */
  int ctrlOffset;
  int recordParsed;   /* recv: the sender's record has been checked */
  size_t ctrlDataOffset; /* payload sent on the control socket when there are no data sockets */
  int taskSock[MAX_SOCKETS];
  int taskIdx[MAX_SOCKETS];
  int nTasks;
} socketRequest;

typedef struct socketComm {
  struct ncclSocket ctrl;
  struct ncclSocket socks[MAX_SOCKETS];
  taskQueue queues[MAX_SOCKETS];
  int nSocks, nThreads, nextSock;
  helperThread threads[MAX_THREADS];
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  int inlineSize;
  size_t minTask;
  socketRequest requests[MAX_REQUESTS];
  char* ctrlBufs;
  uint64_t nextSeq, ctrlSeq;
  int failed;
  int isSend;
  char peer[SOCKET_NAME_MAXLEN];
} socketComm;

typedef struct {
  struct ncclSocket sock;
  int dev, nSocks, nThreads;
  /* accept in progress */
  socketComm* comm;
  struct ncclSocket pending;
  int pendingActive;
  int32_t pendingIdx;
  int pendingIdxOffset;
  int nAccepted;
} socketListenComm;

typedef struct {
  int trafficClass;
} socketCtx;

/* A connect in progress, found again by the handle NCCL passes on every call. */
typedef struct connectState {
  struct railnetConnStage link; /* link.state: which socket is being connected, 0..nSocks (nSocks = control) */
  socketComm* comm;
  int idxOffset;
  int connecting;
} connectState;

static void commFree(socketComm* c);

static void connectStateDrop(struct railnetConnStage* s) {
  connectState* st = (connectState*)s;
  commFree(st->comm);
  free(st);
}

/* Connect states live here, not in the handle, so a garbage handle can never be taken for one. */
static struct railnetConnStages connectStates = RAILNET_CONN_STAGES_INIT("NET/Socket", connectStateDrop);

static void connectStateRemove(connectState* s) {
  railnetConnStageRemove(&connectStates, &s->link);
  free(s);
}

static void setTimeouts(int fd) {
  int ms = (int)railnetParamInt(&netSocketParams[P_TIMEOUT]);
  unsigned int uto = (unsigned int)ms;
  int one = 1, idle = ms / 4000 > 0 ? ms / 4000 : 1, intvl = idle, cnt = 4;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void* helperMain(void* arg);

static ncclResult_t commAlloc(socketComm** out, int nSocks, int nThreads, int isSend) {
  socketComm* c;
  NCCLCHECK(RAILNET_CALLOC(&c, 1, "a socket comm"));
  c->nSocks = nSocks;
  c->nThreads = nThreads;
  c->isSend = isSend;
  c->inlineSize = (int)railnetParamInt(&netSocketParams[P_INLINE]);
  c->minTask = (size_t)railnetParamInt(&netSocketParams[P_MIN_TASK]);
  c->ctrl.fd = -1;
  for (int i = 0; i < MAX_SOCKETS; i++) c->socks[i].fd = -1;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->cond, NULL);
  int stride = (int)sizeof(ctrlRecord) + c->inlineSize;
  ncclResult_t res = RAILNET_CALLOC(&c->ctrlBufs, (size_t)stride * MAX_REQUESTS, "socket control records");
  if (res != ncclSuccess) {
    free(c);
    return res;
  }
  for (int i = 0; i < MAX_REQUESTS; i++) {
    c->requests[i].comm = c;
    c->requests[i].ctrl = c->ctrlBufs + (size_t)i * stride;
  }
  *out = c;
  return ncclSuccess;
}

static ncclResult_t commStartThreads(socketComm* c) {
  union ncclSocketAddress a;
  socklen_t len = sizeof(a);
  if (getpeername(c->ctrl.fd, &a.sa, &len) == 0) ncclSocketToString(&a, c->peer, 1);
  else snprintf(c->peer, sizeof(c->peer), "(unknown)");
  setTimeouts(c->ctrl.fd);
  for (int i = 0; i < c->nSocks; i++) setTimeouts(c->socks[i].fd);
  if (c->nThreads == 0) return ncclSuccess;
  int per = c->nSocks / c->nThreads;
  for (int t = 0; t < c->nThreads; t++) {
    c->threads[t].comm = c;
    c->threads[t].first = t * per;
    c->threads[t].count = per;
    if (pthread_create(&c->threads[t].thread, NULL, helperMain, &c->threads[t]) != 0) {
      WARN("NET/Socket : cannot start helper thread %d of %d: %s", t, c->nThreads, strerror(errno));
      return ncclSystemError;
    }
    c->threads[t].started = 1;
  }
  return ncclSuccess;
}

static void commFree(socketComm* c) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->lock);
  c->stop = 1;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  for (int t = 0; t < c->nThreads; t++)
    if (c->threads[t].started) pthread_join(c->threads[t].thread, NULL);
  if (c->ctrl.fd >= 0) ncclSocketClose(&c->ctrl);
  for (int i = 0; i < c->nSocks; i++)
    if (c->socks[i].fd >= 0) ncclSocketClose(&c->socks[i]);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->cond);
  free(c->ctrlBufs);
  free(c);
}

/* ------------------------------------------------------------------ helper threads */

/* Moves what the socket takes now; returns 1 if anything moved. */
static int taskProgress(socketComm* c, int s, socketTask* t) {
  int op = c->isSend ? NCCL_SOCKET_SEND : NCCL_SOCKET_RECV;
  size_t before = t->offset;
  while (t->offset < t->size) {
    size_t want = t->size - t->offset;
    if (want > (size_t)INT_MAX) want = (size_t)INT_MAX;
    int off = 0, closed = 0;
    ncclResult_t r = ncclSocketProgress(op, &c->socks[s], t->data + t->offset, (int)want, &off, &closed);
    t->offset += (size_t)off;
    if (r != ncclSuccess || closed) {
      WARN("NET/Socket : data socket %d to peer %s %s after %zu of %zu bytes of a chunk: the peer process died or "
           "the network failed",
           s, c->peer, closed ? "was closed" : "failed", t->offset, t->size);
      t->result = ncclRemoteError;
      __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
      return 1;
    }
    if (off == 0) break;
  }
  if (t->offset == t->size) __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
  return t->offset != before;
}

static void* helperMain(void* arg) {
  helperThread* h = (helperThread*)arg;
  socketComm* c = h->comm;
  struct pollfd pfds[MAX_SOCKETS];
  for (;;) {
    int active = 0, moved = 0;
    for (int k = 0; k < h->count; k++) {
      int s = h->first + k;
      taskQueue* q = &c->queues[s];
      int head = q->head, tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
      if (head == tail) continue;
      socketTask* t = &q->tasks[head % TASK_QUEUE_LEN];
      moved |= taskProgress(c, s, t);
      if (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&q->head, head + 1, __ATOMIC_RELEASE);
        moved = 1;
        if (t->result != ncclSuccess) {
          /* a failed socket keeps failing: drain its queue with the same error */
          while (__atomic_load_n(&q->head, __ATOMIC_ACQUIRE) != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) {
            socketTask* n = &q->tasks[q->head % TASK_QUEUE_LEN];
            n->result = ncclRemoteError;
            __atomic_store_n(&n->done, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&q->head, q->head + 1, __ATOMIC_RELEASE);
          }
        }
      } else {
        pfds[active].fd = c->socks[s].fd;
        pfds[active].events = c->isSend ? POLLOUT : POLLIN;
        active++;
      }
    }
    if (moved) continue;
    if (active > 0) {
      poll(pfds, active, 10);
      if (__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) return NULL;
      continue;
    }
    pthread_mutex_lock(&c->lock);
    int idle = 1;
    for (int k = 0; k < h->count && idle; k++) {
      taskQueue* q = &c->queues[h->first + k];
      if (q->head != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) idle = 0;
    }
    if (idle && !c->stop) pthread_cond_wait(&c->cond, &c->lock);
    int stop = c->stop;
    pthread_mutex_unlock(&c->lock);
    if (stop) return NULL;
  }
}

/* ------------------------------------------------------------------ init / properties */

static ncclResult_t socketInit(void** ctx, uint64_t commId, ncclNetCommConfig_t* config, ncclDebugLogger_t logger,
                               ncclProfilerCallback_t prof) {
  (void)commId;
  (void)prof;
  if (logger) railnetSetLogger(logger);
  NCCLCHECK(devicesInit());
  socketCtx* c;
  NCCLCHECK(RAILNET_CALLOC(&c, 1, "a socket context"));
  c->trafficClass = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  if (ctx) *ctx = c;
  else free(c);
  return ncclSuccess;
}

static ncclResult_t socketFinalize(void* ctx) {
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t socketDevices(int* n) {
  if (n == NULL) return ncclInvalidArgument;
  *n = ndevs < 0 ? 0 : ndevs;
  return ncclSuccess;
}

static ncclResult_t socketGetProperties(int dev, ncclNetProperties_t* props) {
  NCCLCHECK(checkDev(dev, "getProperties"));
  memset(props, 0, sizeof(*props));
  props->name = devs[dev].name;
  props->pciPath = devs[dev].pciPath[0] ? devs[dev].pciPath : NULL; /* NULL for virtual interfaces */
  props->guid = (uint64_t)dev;
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = readSpeed(devs[dev].name);
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  props->maxCollBytes = MAX_COLLNET_SIZE;
  props->maxMultiRequestSize = 1;
  props->railId = -1;
  props->planeId = -1;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ listen / connect / accept */

static ncclResult_t socketListen(void* ctx, int dev, void* opaqueHandle, void** listenComm) {
  (void)ctx;
  if (opaqueHandle == NULL || listenComm == NULL) return ncclInvalidArgument;
  NCCLCHECK(checkDev(dev, "listen"));
  socketHandle hcopy; /* NCCL's handle may be unaligned: fill a copy, then store it */
  socketHandle* handle = &hcopy;
  memset(handle, 0, sizeof(*handle));
  memset(opaqueHandle, 0, NCCL_NET_HANDLE_MAXSIZE);
  socketListenComm* lc;
  NCCLCHECK(RAILNET_CALLOC(&lc, 1, "a socket listen comm"));
  ncclResult_t res = railnetConnListen(&lc->sock, &devs[dev].addr, ncclSocketTypeNetSocket, &handle->addr);
  if (res != ncclSuccess) {
    free(lc);
    return res;
  }
  threadsAndSockets(dev, &lc->nThreads, &lc->nSocks);
  lc->dev = dev;
  handle->handleMagic = HANDLE_MAGIC;
  handle->socketMagic = railnetSocketMagic();
  handle->nSocks = lc->nSocks;
  handle->nThreads = lc->nThreads;
  memcpy(opaqueHandle, handle, sizeof(*handle));
  *listenComm = lc;
  return ncclSuccess;
}

/* A handle is read from another process (or from anything the caller got): check it all.
 * The handle is NCCL_NET_HANDLE_MAXSIZE bytes at any alignment. */
ncclResult_t railnetSocketCheckHandle(const void* handle) {
  char a[SOCKET_NAME_MAXLEN];
  socketHandle copy;
  memcpy(&copy, handle, sizeof(copy));
  const socketHandle* h = &copy;
  NCCLCHECK(railnetConnCheckMagic("NET/Socket", "Socket", h->handleMagic, HANDLE_MAGIC));
  if (!railnetSocketAddrUsable(&h->addr, a) || h->nSocks < 0 || h->nSocks > MAX_SOCKETS || h->nThreads < 0 ||
      h->nThreads > MAX_THREADS || (h->nThreads == 0 && h->nSocks != 0) ||
      (h->nThreads > 0 && h->nSocks % h->nThreads != 0)) {
    WARN("NET/Socket : connect handle is invalid (address %s, %d sockets, %d threads)", a, h->nSocks, h->nThreads);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/*
 * Non-blocking: each call advances the connection of socket `stage` (data sockets
 * first, then the control socket); each socket announces its index after the
 * handshake. *sendComm stays NULL until all are up.
 */
static ncclResult_t socketConnect(void* ctx, int dev, void* opaqueHandle, void** sendComm,
                                  ncclNetDeviceHandle_t** sendDevComm) {
  (void)ctx;
  if (opaqueHandle == NULL || sendComm == NULL) return ncclInvalidArgument;
  NCCLCHECK(checkDev(dev, "connect"));
  if (sendDevComm) *sendDevComm = NULL;
  *sendComm = NULL;
  socketHandle hcopy; /* NCCL's handle may be unaligned: read it by value */
  memcpy(&hcopy, opaqueHandle, sizeof(hcopy));
  socketHandle* h = &hcopy;
  connectState* st = (connectState*)railnetConnStageFind(&connectStates, opaqueHandle);
  ncclResult_t res = ncclSuccess;
  if (st == NULL) {
    NCCLCHECK(railnetSocketCheckHandle(opaqueHandle));
    NCCLCHECK(RAILNET_CALLOC(&st, 1, "a socket connect state"));
    res = commAlloc(&st->comm, h->nSocks, h->nThreads, 1);
    if (res != ncclSuccess) {
      free(st);
      return res;
    }
    railnetConnStageAdd(&connectStates, &st->link, opaqueHandle, sizeof(socketHandle));
  }
  socketComm* c = st->comm;
  while (st->link.state <= c->nSocks) {
    struct ncclSocket* s = st->link.state == c->nSocks ? &c->ctrl : &c->socks[st->link.state];
    if (!st->connecting) {
      NCCLCHECKGOTO(ncclSocketInit(s, &h->addr, h->socketMagic, ncclSocketTypeNetSocket, NULL, 1), res, fail);
      NCCLCHECKGOTO(ncclSocketConnect(s), res, fail);
      st->connecting = 1;
      st->idxOffset = 0;
    }
    int ready = 0;
    NCCLCHECKGOTO(ncclSocketReady(s, &ready), res, fail);
    if (!ready) return ncclSuccess;
    int32_t idx = st->link.state;
    int closed = 0;
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_SEND, s, &idx, sizeof(idx), &st->idxOffset, &closed), res, fail);
    if (closed) {
      WARN("NET/Socket : listener closed the connection while connecting socket %d", st->link.state);
      res = ncclRemoteError;
      goto fail;
    }
    if (st->idxOffset < (int)sizeof(idx)) return ncclSuccess;
    st->link.state++;
    st->connecting = 0;
  }
  NCCLCHECKGOTO(commStartThreads(c), res, fail);
  *sendComm = c;
  connectStateRemove(st);
  return ncclSuccess;
fail:
  commFree(c);
  connectStateRemove(st);
  return res;
}

/* A peer that dies while its comm is half connected closes the sockets already placed:
 * fail the accept then, rather than wait for sockets that will never come. */
static ncclResult_t acceptCheckPlaced(socketComm* c) {
  for (int i = 0; i <= c->nSocks; i++) {
    struct ncclSocket* s = i == c->nSocks ? &c->ctrl : &c->socks[i];
    if (s->fd < 0) continue;
    char b;
    ssize_t n = recv(s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      char a[SOCKET_NAME_MAXLEN];
      WARN("NET/Socket : peer %s closed its connection while the comm was being set up (%s socket %d of %d "
           "arrived): the peer process died or gave up; accept fails",
           ncclSocketToString(&s->addr, a, 1), i == c->nSocks ? "control" : "data", i, c->nSocks + 1);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

static ncclResult_t socketAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm) {
  socketListenComm* lc = (socketListenComm*)listenComm;
  if (lc == NULL || recvComm == NULL) return ncclInvalidArgument;
  if (recvDevComm) *recvDevComm = NULL;
  *recvComm = NULL;
  if (lc->comm == NULL) NCCLCHECK(commAlloc(&lc->comm, lc->nSocks, lc->nThreads, 0));
  socketComm* c = lc->comm;
  while (lc->nAccepted < c->nSocks + 1) {
    if (!lc->pendingActive) {
      memset(&lc->pending, 0, sizeof(lc->pending));
      lc->pending.fd = -1;
      lc->pending.acceptFd = -1;
      lc->pendingActive = 1;
      lc->pendingIdxOffset = 0;
    }
    NCCLCHECK(ncclSocketAccept(&lc->pending, &lc->sock));
    int ready = 0;
    NCCLCHECK(ncclSocketReady(&lc->pending, &ready));
    if (!ready) {
      ncclResult_t r = acceptCheckPlaced(c);
      if (r != ncclSuccess) { /* start afresh if the caller tries again */
        commFree(c);
        lc->comm = NULL;
        lc->nAccepted = 0;
      }
      return r;
    }
    int closed = 0;
    ncclResult_t r = ncclSocketProgress(NCCL_SOCKET_RECV, &lc->pending, &lc->pendingIdx, sizeof(lc->pendingIdx),
                                        &lc->pendingIdxOffset, &closed);
    char a[SOCKET_NAME_MAXLEN];
    if (r != ncclSuccess || closed) {
      INFO(NCCL_NET, "NET/Socket : connection from %s closed before it said which socket it is; dropped it",
           ncclSocketToString(&lc->pending.addr, a, 1));
      ncclSocketClose(&lc->pending);
      lc->pendingActive = 0;
      continue;
    }
    if (lc->pendingIdxOffset < (int)sizeof(lc->pendingIdx)) return ncclSuccess;
    int idx = lc->pendingIdx;
    struct ncclSocket* slot = idx == c->nSocks ? &c->ctrl : (idx >= 0 && idx < c->nSocks ? &c->socks[idx] : NULL);
    if (slot == NULL || slot->fd >= 0) {
      WARN("NET/Socket : connection from %s announced socket index %d, expected an unused one of 0..%d; dropped it",
           ncclSocketToString(&lc->pending.addr, a, 1), idx, c->nSocks);
      ncclSocketClose(&lc->pending);
      lc->pendingActive = 0;
      continue;
    }
    *slot = lc->pending;
    slot->acceptFd = -1;
    lc->pendingActive = 0;
    lc->nAccepted++;
  }
  NCCLCHECK(commStartThreads(c));
  *recvComm = c;
  lc->comm = NULL;
  lc->nAccepted = 0;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ memory */

static ncclResult_t socketRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)comm;
  (void)data;
  (void)size;
  if (type != NCCL_PTR_HOST) {
    WARN("NET/Socket : cannot register memory of type %d (%s): the Socket transport moves host memory only "
         "(ptrSupport is NCCL_PTR_HOST)",
         type, type == NCCL_PTR_CUDA ? "CUDA" : type == NCCL_PTR_DMABUF ? "DMA-BUF" : "unknown");
    return ncclInternalError;
  }
  if (mhandle) *mhandle = NULL;
  return ncclSuccess;
}

static ncclResult_t socketDeregMr(void* comm, void* mhandle) {
  (void)comm;
  (void)mhandle;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ data path */

static ncclResult_t postRequest(socketComm* c, int op, void* data, size_t size, int tag, void** request) {
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  if (c->failed) {
    WARN("NET/Socket : %s on a comm with peer %s that already failed", op == NCCL_SOCKET_SEND ? "isend" : "irecv",
         c->peer);
    return ncclRemoteError;
  }
  if (data == NULL && size > 0) {
    WARN("NET/Socket : %s of %zu bytes from a NULL buffer", op == NCCL_SOCKET_SEND ? "isend" : "irecv", size);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < MAX_REQUESTS; i++) {
    socketRequest* r = &c->requests[i];
    if (r->state != REQ_FREE) continue;
    r->op = op;
    r->data = (char*)data;
    r->size = size;
    r->tag = tag;
    r->seq = c->nextSeq++;
    r->ctrlOffset = 0;
    r->recordParsed = op == NCCL_SOCKET_SEND;
    r->ctrlDataOffset = 0;
    r->nTasks = 0;
    if (op == NCCL_SOCKET_SEND) {
      ctrlRecord rec = {.size = size, .tag = tag, .pad = 0};
      memcpy(r->ctrl, &rec, sizeof(rec));
      int inl = size <= (size_t)c->inlineSize ? (int)size : 0;
      if (inl) memcpy(r->ctrl + sizeof(rec), data, inl);
      r->ctrlLen = (int)sizeof(rec) + inl;
    } else {
      r->ctrlLen = (int)sizeof(ctrlRecord); /* grows by the inline payload once the size is known */
    }
    r->state = REQ_CTRL;
    *request = r;
    return ncclSuccess;
  }
  return ncclSuccess; /* out of request slots: NULL request, NCCL retries later */
}

static ncclResult_t socketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                                void** request) {
  (void)mhandle;
  (void)phandle;
  socketComm* c = (socketComm*)sendComm;
  if (c == NULL || !c->isSend) {
    WARN("NET/Socket : isend on a comm that is not a send comm");
    return ncclInvalidArgument;
  }
  return postRequest(c, NCCL_SOCKET_SEND, data, size, tag, request);
}

static ncclResult_t socketIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                                void** phandles, void** request) {
  (void)mhandles;
  (void)phandles;
  socketComm* c = (socketComm*)recvComm;
  if (c == NULL || c->isSend) {
    WARN("NET/Socket : irecv on a comm that is not a receive comm");
    return ncclInvalidArgument;
  }
  if (n != 1 || data == NULL || sizes == NULL) {
    WARN("NET/Socket : irecv with %d buffers; the Socket transport receives one at a time (maxRecvs 1)", n);
    return ncclInvalidArgument;
  }
  return postRequest(c, NCCL_SOCKET_RECV, data[0], sizes[0], tags ? tags[0] : 0, request);
}

/* Cuts the message after its inline part into tasks on the data sockets. */
static void scheduleTasks(socketComm* c, socketRequest* r, size_t start) {
  size_t left = r->size - start;
  size_t task = (left + c->nSocks - 1) / c->nSocks;
  if (task < c->minTask) task = c->minTask;
  pthread_mutex_lock(&c->lock);
  for (size_t off = start; off < r->size; off += task) {
    int s = c->nextSock;
    c->nextSock = (c->nextSock + 1) % c->nSocks;
    taskQueue* q = &c->queues[s];
    int slot = q->tail % TASK_QUEUE_LEN;
    socketTask* t = &q->tasks[slot];
    t->data = r->data + off;
    t->size = r->size - off < task ? r->size - off : task;
    t->offset = 0;
    t->result = ncclSuccess;
    __atomic_store_n(&t->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&q->tail, q->tail + 1, __ATOMIC_RELEASE);
    r->taskSock[r->nTasks] = s;
    r->taskIdx[r->nTasks] = slot;
    r->nTasks++;
  }
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
}

static ncclResult_t commError(socketComm* c, ncclResult_t res) {
  c->failed = 1;
  return res;
}

/* Drives the control socket for the oldest requests, in posting order. */
static ncclResult_t ctrlProgress(socketComm* c) {
  for (;;) {
    socketRequest* r = NULL;
    for (int i = 0; i < MAX_REQUESTS; i++)
      if (c->requests[i].state != REQ_FREE && c->requests[i].seq == c->ctrlSeq) r = &c->requests[i];
    if (r == NULL || r->state != REQ_CTRL) return ncclSuccess;
    int closed = 0;
    ncclResult_t res = ncclSocketProgress(r->op, &c->ctrl, r->ctrl, r->ctrlLen, &r->ctrlOffset, &closed);
    if (res != ncclSuccess || closed) {
      WARN("NET/Socket : control connection to peer %s %s: the peer process died or closed its comm", c->peer,
           closed ? "was closed" : "failed");
      return commError(c, ncclRemoteError);
    }
    if (!r->recordParsed && r->ctrlOffset == (int)sizeof(ctrlRecord)) {
      r->recordParsed = 1;
      ctrlRecord rec;
      memcpy(&rec, r->ctrl, sizeof(rec));
      if (rec.size > r->size) {
        WARN("NET/Socket : peer %s sent a message of %llu bytes but the receive buffer holds %zu bytes: a mismatch "
             "of sizes between ranks (check that all ranks run the same collective with the same NCCL_PROTO / "
             "NCCL_ALGO settings)",
             c->peer, (unsigned long long)rec.size, r->size);
        return commError(c, ncclInvalidUsage);
      }
      if (rec.tag != r->tag) {
        WARN("NET/Socket : peer %s sent a message with tag %d, the posted receive expects tag %d", c->peer, rec.tag,
             r->tag);
        return commError(c, ncclInvalidUsage);
      }
      r->size = rec.size;
      r->ctrlLen += rec.size <= (uint64_t)c->inlineSize ? (int)rec.size : 0;
      continue; /* receive the inline payload, if any */
    }
    if (r->ctrlOffset < r->ctrlLen) return ncclSuccess;
    if (r->op == NCCL_SOCKET_RECV && r->ctrlLen > (int)sizeof(ctrlRecord))
      memcpy(r->data, r->ctrl + sizeof(ctrlRecord), r->ctrlLen - sizeof(ctrlRecord));
    size_t start = r->size <= (size_t)c->inlineSize ? r->size : 0;
    if (start < r->size && c->nSocks > 0) {
      scheduleTasks(c, r, start);
      r->state = REQ_DATA;
      c->ctrlSeq++;
      continue;
    }
    /* no data sockets: the payload follows on the control socket, before the next record */
    while (r->ctrlDataOffset < r->size - start) {
      size_t want = r->size - start - r->ctrlDataOffset;
      if (want > (size_t)INT_MAX) want = (size_t)INT_MAX;
      int off = 0;
      res = ncclSocketProgress(r->op, &c->ctrl, r->data + start + r->ctrlDataOffset, (int)want, &off, &closed);
      r->ctrlDataOffset += (size_t)off;
      if (res != ncclSuccess || closed) {
        WARN("NET/Socket : connection to peer %s %s after %zu of %zu bytes: the peer process died or the network "
             "failed", c->peer, closed ? "was closed" : "failed", r->ctrlDataOffset, r->size);
        return commError(c, ncclRemoteError);
      }
      if (off == 0) return ncclSuccess;
    }
    r->state = REQ_DATA;
    c->ctrlSeq++;
  }
}

static ncclResult_t socketTest(void* request, int* done, int* size) {
  socketRequest* r = (socketRequest*)request;
  if (r == NULL || done == NULL || r->state == REQ_FREE) {
    WARN("NET/Socket : test called with a %s request", r == NULL ? "NULL" : "completed or unknown");
    return ncclInvalidArgument;
  }
  socketComm* c = r->comm;
  *done = 0;
  if (c->failed) return ncclRemoteError;
  NCCLCHECK(ctrlProgress(c));
  if (r->state != REQ_DATA) return ncclSuccess;
  for (int i = 0; i < r->nTasks; i++) {
    socketTask* t = &c->queues[r->taskSock[i]].tasks[r->taskIdx[i]];
    if (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) return ncclSuccess;
    if (t->result != ncclSuccess) return commError(c, t->result);
  }
  *done = 1;
  if (size) *size = r->size > (size_t)INT_MAX ? INT_MAX : (int)r->size;
  r->state = REQ_FREE;
  return ncclSuccess;
}

static ncclResult_t socketIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  /* host memory is coherent once recv() returned: nothing to flush */
  if (request) *request = NULL;
  return ncclSuccess;
}

static ncclResult_t socketCloseComm(void* comm) {
  commFree((socketComm*)comm);
  return ncclSuccess;
}

static ncclResult_t socketCloseListen(void* listenComm) {
  socketListenComm* lc = (socketListenComm*)listenComm;
  if (lc == NULL) return ncclSuccess;
  if (lc->pendingActive && lc->pending.fd >= 0) ncclSocketClose(&lc->pending);
  commFree(lc->comm);
  ncclSocketClose(&lc->sock);
  free(lc);
  return ncclSuccess;
}

static ncclResult_t socketSetNetAttr(void* ctx, ncclNetAttr_t* attr) {
  (void)ctx;
  (void)attr; /* the Socket transport has nothing to tune from these hints */
  return ncclSuccess;
}

const ncclNet_t railnetNetSocket = {
    .name = "RailSocket",
    .init = socketInit,
    .devices = socketDevices,
    .getProperties = socketGetProperties,
    .listen = socketListen,
    .connect = socketConnect,
    .accept = socketAccept,
    .regMr = socketRegMr,
    .regMrDmaBuf = NULL,
    .deregMr = socketDeregMr,
    .isend = socketIsend,
    .irecv = socketIrecv,
    .iflush = socketIflush,
    .test = socketTest,
    .closeSend = socketCloseComm,
    .closeRecv = socketCloseComm,
    .closeListen = socketCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = socketFinalize,
    .setNetAttr = socketSetNetAttr,
};
