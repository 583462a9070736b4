/* The pair protocol's wire format (pairproto.h): one codec per record type walks the fields
 * in order, either writing them big-endian or reading and checking them, so that the
 * encoder and the decoder cannot disagree. Plus bounded socket I/O for whole messages. */
#include "pairproto.h"
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
  uint8_t* p;   /* NULL: measure only */
  size_t len, off;
  int decode;
  const char* bad; /* first problem seen while decoding */
} pairCursor;

static void cRaw(pairCursor* c, void* v, size_t n) {
  if (c->bad) return;
  if (c->p && c->off + n > c->len) {
    c->bad = "record runs past the payload";
    return;
  }
  if (c->p) {
    if (c->decode) memcpy(v, c->p + c->off, n);
    else memcpy(c->p + c->off, v, n);
  }
  c->off += n;
}
static void cU8(pairCursor* c, uint8_t* v) { cRaw(c, v, 1); }
static void cU16(pairCursor* c, uint16_t* v) {
  uint8_t b[2] = {(uint8_t)(*v >> 8), (uint8_t)*v};
  cRaw(c, b, 2);
  if (c->decode) *v = (uint16_t)((b[0] << 8) | b[1]);
}
static void cU32(pairCursor* c, uint32_t* v) {
  uint8_t b[4] = {(uint8_t)(*v >> 24), (uint8_t)(*v >> 16), (uint8_t)(*v >> 8), (uint8_t)*v};
  cRaw(c, b, 4);
  if (c->decode) *v = ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}
static void cI32(pairCursor* c, int32_t* v) {
  uint32_t u = (uint32_t)*v;
  cU32(c, &u);
  if (c->decode) *v = (int32_t)u;
}
static void cU64(pairCursor* c, uint64_t* v) {
  uint32_t hi = (uint32_t)(*v >> 32), lo = (uint32_t)*v;
  cU32(c, &hi);
  cU32(c, &lo);
  if (c->decode) *v = ((uint64_t)hi << 32) | lo;
}
/* A fixed string field: encoded with zero padding; decoded only when it holds a NUL and
 * nothing but zeros after it (one encoding per value). */
static void cStr(pairCursor* c, char* s, size_t size) {
  if (!c->decode) {
    char tmp[256];
    size_t n = strnlen(s, size - 1);
    memset(tmp, 0, size);
    memcpy(tmp, s, n);
    cRaw(c, tmp, size);
    return;
  }
  cRaw(c, s, size);
  if (c->p == NULL || c->bad) return;
  const char* nul = (const char*)memchr(s, '\0', size);
  if (nul == NULL) {
    c->bad = "a string field without its NUL";
    s[size - 1] = '\0';
    return;
  }
  for (const char* q = nul; q < s + size; q++)
    if (*q) {
      c->bad = "a string field with bytes after its NUL";
      return;
    }
}
static void cRange(pairCursor* c, uint32_t v, uint32_t lo, uint32_t hi, const char* what) {
  if (c->decode && c->p && !c->bad && (v < lo || v > hi)) c->bad = what;
}

static void codeHello(pairCursor* c, railnetPairHello* r) {
  cStr(c, r->host, sizeof(r->host));
  cStr(c, r->version, sizeof(r->version));
  cU16(c, &r->probePort);
  cU16(c, &r->flags);
  cU32(c, &r->timeoutMs);
  cU64(c, &r->listenToken);
  cU16(c, &r->portLow);
  cU16(c, &r->portHigh);
  for (int k = 0; k < RAILNET_PAIR_EPHEMERAL; k++) cU16(c, &r->ephemeralPorts[k]);
  cU64(c, &r->jobToken);
  cRange(c, r->timeoutMs, 1, 600000, "a probe timeout outside 1 ms .. 600 s");
  cRange(c, r->portLow, 0, r->portHigh, "a local port range whose low end is above its high end");
}
static void codeGreet(pairCursor* c, railnetPairGreet* r) { cU64(c, &r->token); }
static void codeJoin(pairCursor* c, railnetClusterJoinMsg* r) {
  cU32(c, &r->rank);
  cU32(c, &r->size);
  cStr(c, r->host, sizeof(r->host));
  cU16(c, &r->listenPort);
  cU64(c, &r->listenToken);
  cU64(c, &r->jobToken);
  cRange(c, r->size, 1, RAILNET_CLUSTER_WIRE_MAX_RANKS, "a cluster size out of range");
  cRange(c, r->rank, 0, r->size ? r->size - 1 : 0, "a rank not below the size");
}
static void codeRound(pairCursor* c, railnetClusterRoundMsg* r) {
  cU32(c, &r->round);
  cU32(c, &r->rounds);
  cI32(c, &r->partner);
  cU8(c, &r->client);
  cU8(c, &r->family);
  cRaw(c, r->addr, sizeof(r->addr));
  cU16(c, &r->port);
  cU32(c, &r->boundMs);
  cRange(c, r->rounds, 0, 2 * RAILNET_CLUSTER_WIRE_MAX_RANKS, "more rounds than twice the ranks");
  cRange(c, r->round, 0, r->rounds ? r->rounds - 1 : 0, "a round not below the rounds");
  cRange(c, (uint32_t)r->partner + 1u, 0, RAILNET_CLUSTER_WIRE_MAX_RANKS, "a partner rank out of range");
  cRange(c, r->client, 0, 1, "a role other than client or server");
  if (c->decode && c->p && !c->bad && r->family != 4 && r->family != 6 && r->partner >= 0)
    c->bad = "a partner address family other than 4 or 6";
  cRange(c, r->boundMs, 1, 3600000, "a check bound outside 1 ms .. 1 h");
}
static void codeLink(pairCursor* c, railnetClusterLinkMsg* r) {
  cU32(c, &r->round);
  cU32(c, &r->a);
  cU32(c, &r->b);
  cI32(c, &r->ok);
  cU32(c, &r->kbps);
  cU32(c, &r->kbpsBack);
  cU32(c, &r->usec);
  cU32(c, &r->usecBack);
  cStr(c, r->net, sizeof(r->net));
  cStr(c, r->devA, sizeof(r->devA));
  cStr(c, r->devB, sizeof(r->devB));
  cStr(c, r->cause, sizeof(r->cause));
  cStr(c, r->fix, sizeof(r->fix));
  cRange(c, (uint32_t)r->ok, 0, 1, "a link outcome other than 0 or 1");
}
static void codeTcpRun(pairCursor* c, railnetPairTcpRun* r) {
  cU32(c, &r->budgetMs);
  cRange(c, r->budgetMs, 0, 3600000, "a probe budget over an hour");
}
static void codeDone(pairCursor* c, railnetClusterDoneMsg* r) {
  cI32(c, &r->exitCode);
  cRange(c, (uint32_t)r->exitCode, 0, 1, "an exit status other than 0 or 1");
}
static void codeIface(pairCursor* c, railnetPairIface* r) {
  cStr(c, r->name, sizeof(r->name));
  cU8(c, &r->family);
  cU8(c, &r->selected);
  cU8(c, &r->up);
  cU8(c, &r->prefix);
  cU32(c, &r->mtu);
  cRaw(c, r->addr, sizeof(r->addr));
  if (c->decode && c->p && !c->bad && r->family != 4 && r->family != 6) c->bad = "an address family other than 4 or 6";
  cRange(c, r->prefix, 0, r->family == 4 ? 32 : 128, "a prefix length longer than the address");
  cRange(c, r->selected, 0, RAILNET_PAIR_MAX_IFACES, "a selection index out of range");
}
static void codeProbe(pairCursor* c, railnetPairTcpProbe* r) {
  cU64(c, &r->token);
  cU32(c, &r->bytes);
  cStr(c, r->from, sizeof(r->from));
  cRange(c, r->bytes, 0, RAILNET_PAIR_PROBE_MAX_BYTES, "a probe larger than 1 MiB");
}
static void codeTcp(pairCursor* c, railnetPairTcpResult* r) {
  cStr(c, r->localIf, sizeof(r->localIf));
  cStr(c, r->peerIf, sizeof(r->peerIf));
  cU8(c, &r->family);
  cU8(c, &r->step);
  cI32(c, &r->err);
  cU32(c, &r->usec);
  cRaw(c, r->localAddr, sizeof(r->localAddr));
  cRaw(c, r->peerAddr, sizeof(r->peerAddr));
  cRange(c, r->step, 0, RAILNET_PAIR_TCP_SCOPE, "an unknown TCP probe step");
  if (c->decode && c->p && !c->bad && r->family != 4 && r->family != 6) c->bad = "an address family other than 4 or 6";
}
static void codeRdma(pairCursor* c, railnetPairRdmaEntry* r) {
  cStr(c, r->dev, sizeof(r->dev));
  cStr(c, r->netdev, sizeof(r->netdev));
  cU8(c, &r->port);
  cU8(c, &r->linkLayer);
  cU8(c, &r->roceVer);
  cU8(c, &r->isAuto);
  cI32(c, &r->gidIndex);
  cRange(c, r->isAuto, 0, 3, "unknown GID flags");
  cU32(c, &r->mtu);
  cRaw(c, r->gid, sizeof(r->gid));
  cRange(c, r->roceVer, 0, 2, "a RoCE version other than 1 or 2");
  cRange(c, (uint32_t)r->gidIndex, 0, 65535, "a GID index out of range");
  cRange(c, r->port, 1, 255, "port 0");
}
static void codeQp(pairCursor* c, railnetPairRdmaQp* r) {
  cU32(c, &r->id);
  cU16(c, &r->entry);
  cU16(c, &r->peerEntry);
  cU32(c, &r->qpn);
  cU32(c, &r->psn);
  cU64(c, &r->addr);
  cU32(c, &r->rkey);
  cU32(c, &r->len);
  cU32(c, &r->mtu);
  cI32(c, &r->err);
  cU8(c, &r->step);
  cRaw(c, r->gid, sizeof(r->gid));
  cU16(c, &r->lid);
  cRange(c, r->entry, 0, RAILNET_PAIR_MAX_RDMA - 1, "an RDMA entry index out of range");
  cRange(c, r->peerEntry, 0, RAILNET_PAIR_MAX_RDMA - 1, "an RDMA entry index out of range");
  cRange(c, r->qpn, 0, 0xffffff, "a QP number wider than 24 bits");
  cRange(c, r->psn, 0, 0xffffff, "a PSN wider than 24 bits");
  cRange(c, r->len, 0, 4u << 20, "a buffer larger than 4 MiB");
  cRange(c, r->mtu, 0, 5, "an unknown MTU");
  cRange(c, r->step, 0, RAILNET_PAIR_RDMA_PEER, "an unknown RDMA step");
}
static void codeRun(pairCursor* c, railnetPairRdmaRun* r) {
  cU32(c, &r->id);
  cU32(c, &r->bytes);
  cRange(c, r->bytes, 1, 4u << 20, "a transfer outside 1 B .. 4 MiB");
}
static void codeResult(pairCursor* c, railnetPairRdmaResult* r) {
  cU32(c, &r->id);
  cU8(c, &r->step);
  cI32(c, &r->err);
  cU32(c, &r->usec);
  cU32(c, &r->bytes);
  cStr(c, r->why, sizeof(r->why));
  cRange(c, r->step, 0, RAILNET_PAIR_RDMA_PEER, "an unknown RDMA step");
}
static void codeError(pairCursor* c, railnetPairError* r) {
  cI32(c, &r->code);
  cStr(c, r->text, sizeof(r->text));
}

static void codeBwStart(pairCursor* c, railnetPairBwStart* r) {
  cStr(c, r->net, sizeof(r->net));
  cStr(c, r->dev, sizeof(r->dev));
  cU8(c, &r->port);
  cU32(c, &r->bytes);
  cU32(c, &r->count);
  cU8(c, &r->reverse);
  cRaw(c, r->handle, sizeof(r->handle));
  cRange(c, r->bytes, 1, RAILNET_PAIR_BW_MAX_BYTES, "a message outside 1 B .. 4 MiB");
  cRange(c, r->reverse, 0, 1, "a direction other than 0 or 1");
  cRange(c, r->count, 1, RAILNET_PAIR_BW_MAX_COUNT, "more than 1024 messages");
}
static void codeBwHandle(pairCursor* c, railnetPairBwHandle* r) {
  cI32(c, &r->err);
  cRaw(c, r->handle, sizeof(r->handle));
  cStr(c, r->why, sizeof(r->why));
}
static void codeBwResult(pairCursor* c, railnetPairBwResult* r) {
  cI32(c, &r->err);
  cU64(c, &r->bytes);
  cU32(c, &r->usec);
  cStr(c, r->why, sizeof(r->why));
}

/* Per type: host record size, the codec, and how many records it may carry. */
typedef void (*pairCodec)(pairCursor*, void*);
static const struct {
  const char* name;
  size_t hostSize;
  pairCodec code;
  uint32_t minCount, maxCount;
} kTypes[RAILNET_PAIR_TYPE_MAX + 1] = {
    [RAILNET_PAIR_HELLO] = {"HELLO", sizeof(railnetPairHello), (pairCodec)codeHello, 1, 1},
    [RAILNET_PAIR_IFACES] = {"IFACES", sizeof(railnetPairIface), (pairCodec)codeIface, 0, RAILNET_PAIR_MAX_IFACES},
    [RAILNET_PAIR_TCP_PROBE] = {"TCP_PROBE", sizeof(railnetPairTcpProbe), (pairCodec)codeProbe, 1, 1},
    [RAILNET_PAIR_TCP_RUN] = {"TCP_RUN", sizeof(railnetPairTcpRun), (pairCodec)codeTcpRun, 0, 1},
    [RAILNET_PAIR_TCP_RESULTS] = {"TCP_RESULTS", sizeof(railnetPairTcpResult), (pairCodec)codeTcp, 0,
                                  RAILNET_PAIR_MAX_RESULTS},
    [RAILNET_PAIR_RDMA_PORTS] = {"RDMA_PORTS", sizeof(railnetPairRdmaEntry), (pairCodec)codeRdma, 0,
                                 RAILNET_PAIR_MAX_RDMA},
    [RAILNET_PAIR_RDMA_QP] = {"RDMA_QP", sizeof(railnetPairRdmaQp), (pairCodec)codeQp, 1, 1},
    [RAILNET_PAIR_RDMA_RUN] = {"RDMA_RUN", sizeof(railnetPairRdmaRun), (pairCodec)codeRun, 1, 1},
    [RAILNET_PAIR_RDMA_RESULT] = {"RDMA_RESULT", sizeof(railnetPairRdmaResult), (pairCodec)codeResult, 1, 1},
    [RAILNET_PAIR_BYE] = {"BYE", 0, NULL, 0, 0},
    [RAILNET_PAIR_ERROR] = {"ERROR", sizeof(railnetPairError), (pairCodec)codeError, 1, 1},
    [RAILNET_PAIR_BW_START] = {"BW_START", sizeof(railnetPairBwStart), (pairCodec)codeBwStart, 1, 1},
    [RAILNET_PAIR_BW_HANDLE] = {"BW_HANDLE", sizeof(railnetPairBwHandle), (pairCodec)codeBwHandle, 1, 1},
    [RAILNET_PAIR_BW_RESULT] = {"BW_RESULT", sizeof(railnetPairBwResult), (pairCodec)codeBwResult, 1, 1},
    [RAILNET_PAIR_GREET] = {"GREET", sizeof(railnetPairGreet), (pairCodec)codeGreet, 1, 1},
    [RAILNET_CLUSTER_JOIN] = {"CLUSTER_JOIN", sizeof(railnetClusterJoinMsg), (pairCodec)codeJoin, 1, 1},
    [RAILNET_CLUSTER_ROUND] = {"CLUSTER_ROUND", sizeof(railnetClusterRoundMsg), (pairCodec)codeRound, 1, 1},
    [RAILNET_CLUSTER_LINK] = {"CLUSTER_LINK", sizeof(railnetClusterLinkMsg), (pairCodec)codeLink, 1, 1},
    [RAILNET_CLUSTER_DONE] = {"CLUSTER_DONE", sizeof(railnetClusterDoneMsg), (pairCodec)codeDone, 1, 1},
};

static int knownType(int type) { return type >= 1 && type <= RAILNET_PAIR_TYPE_MAX && kTypes[type].name; }

const char* railnetPairTypeName(int type) { return knownType(type) ? kTypes[type].name : "unknown"; }

const char* railnetPairTcpStepName(int step) {
  static const char* names[] = {"ok", "connect", "send", "receive", "verify", "local interface", "greeting",
                                "not run (the check's bound)", "not probed (not the client's own address)"};
  return step >= 0 && step <= RAILNET_PAIR_TCP_SCOPE ? names[step] : "?";
}
const char* railnetPairRdmaStepName(int step) {
  static const char* names[] = {"ok", "open device", "register memory", "create QP", "QP to INIT", "QP to RTR",
                                "QP to RTS", "RDMA write", "RDMA read", "verify data", "peer side"};
  return step >= 0 && step <= RAILNET_PAIR_RDMA_PEER ? names[step] : "?";
}

size_t railnetPairRecordSize(int type) {
  /* the codec's size walk on a zeroed record of the caller's stack (callers are threads) */
  _Alignas(16) uint8_t scratch[512];
  if (!knownType(type) || kTypes[type].code == NULL || kTypes[type].hostSize > sizeof(scratch)) return 0;
  memset(scratch, 0, sizeof(scratch));
  pairCursor c = {NULL, 0, 0, 0, NULL};
  kTypes[type].code(&c, scratch);
  return c.off;
}

static void whyf(char* why, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void whyf(char* why, const char* fmt, ...) {
  if (why == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, 128, fmt, ap);
  va_end(ap);
}

ncclResult_t railnetPairDecodeHeader(const uint8_t* buf, size_t len, uint16_t* type, uint32_t* count,
                                     uint32_t* length, char* why) {
  if (len < RAILNET_PAIR_HDR_SIZE) {
    whyf(why, "a header of %zu bytes (%d wanted)", len, RAILNET_PAIR_HDR_SIZE);
    return ncclInvalidArgument;
  }
  pairCursor c = {(uint8_t*)buf, len, 0, 1, NULL};
  uint32_t magic = 0;
  uint16_t version = 0, t = 0;
  cU32(&c, &magic);
  cU16(&c, &version);
  cU16(&c, &t);
  cU32(&c, count);
  cU32(&c, length);
  if (magic != RAILNET_PAIR_MAGIC) {
    whyf(why, "bad magic 0x%08x (not railnet-diag's pair protocol)", magic);
    return ncclInvalidArgument;
  }
  if (version != RAILNET_PAIR_VERSION) {
    whyf(why, "protocol version %u (this railnet-diag speaks %d)", version, RAILNET_PAIR_VERSION);
    return ncclInvalidArgument;
  }
  if (!knownType(t)) {
    whyf(why, "unknown message type %u", t);
    return ncclInvalidArgument;
  }
  if (*count < kTypes[t].minCount || *count > kTypes[t].maxCount) {
    whyf(why, "%u records (at most %u for this type)", *count, kTypes[t].maxCount);
    return ncclInvalidArgument;
  }
  if ((uint64_t)*count * railnetPairRecordSize(t) != *length) {
    whyf(why, "a payload of %u bytes for %u records", *length, *count);
    return ncclInvalidArgument;
  }
  *type = t;
  return ncclSuccess;
}

void railnetPairFree(railnetPairMsg* msg) {
  free(msg->u.any);
  msg->u.any = NULL;
  msg->count = 0;
}

ncclResult_t railnetPairDecodePayload(uint16_t type, uint32_t count, const uint8_t* buf, size_t len,
                                      railnetPairMsg* msg, char* why) {
  memset(msg, 0, sizeof(*msg));
  if (!knownType(type) || (uint64_t)count * railnetPairRecordSize(type) != len || count > kTypes[type].maxCount) {
    whyf(why, "a payload of %zu bytes for %u records", len, count);
    return ncclInvalidArgument;
  }
  msg->type = type;
  msg->count = count;
  if (count == 0) return ncclSuccess;
  msg->u.any = calloc(count, kTypes[type].hostSize);
  if (msg->u.any == NULL) return ncclSystemError;
  pairCursor c = {(uint8_t*)buf, len, 0, 1, NULL};
  for (uint32_t i = 0; i < count && !c.bad; i++) kTypes[type].code(&c, (char*)msg->u.any + i * kTypes[type].hostSize);
  if (c.bad) {
    if (why) snprintf(why, 128, "%s record: %s", kTypes[type].name, c.bad);
    railnetPairFree(msg);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t railnetPairDecode(const uint8_t* buf, size_t len, railnetPairMsg* msg, char* why) {
  uint16_t type;
  uint32_t count, length;
  memset(msg, 0, sizeof(*msg));
  NCCLCHECK(railnetPairDecodeHeader(buf, len, &type, &count, &length, why));
  if (len - RAILNET_PAIR_HDR_SIZE != length) {
    whyf(why, "%zu bytes after the header (%u announced)", len - RAILNET_PAIR_HDR_SIZE, length);
    return ncclInvalidArgument;
  }
  return railnetPairDecodePayload(type, count, buf + RAILNET_PAIR_HDR_SIZE, length, msg, why);
}

ncclResult_t railnetPairEncode(uint16_t type, const void* records, uint32_t count, uint8_t** out, size_t* outLen) {
  if (!knownType(type) || count < kTypes[type].minCount || count > kTypes[type].maxCount) return ncclInvalidArgument;
  size_t rec = railnetPairRecordSize(type);
  size_t len = RAILNET_PAIR_HDR_SIZE + count * rec;
  uint8_t* buf = (uint8_t*)calloc(1, len);
  if (buf == NULL) return ncclSystemError;
  pairCursor c = {buf, len, 0, 0, NULL};
  uint32_t magic = RAILNET_PAIR_MAGIC, length = (uint32_t)(count * rec);
  uint16_t version = RAILNET_PAIR_VERSION;
  cU32(&c, &magic);
  cU16(&c, &version);
  cU16(&c, &type);
  cU32(&c, &count);
  cU32(&c, &length);
  for (uint32_t i = 0; i < count; i++) {
    /* the codec takes a mutable record; encoding only reads it */
    kTypes[type].code(&c, (void*)((const char*)records + i * kTypes[type].hostSize));
  }
  *out = buf;
  *outLen = len;
  return ncclSuccess;
}

/* ---------------------------------------------------------------- bounded socket I/O */

static int waitFd(int fd, short events, uint64_t deadlineNs) {
  for (;;) {
    uint64_t now = railnetClockNs();
    if (now >= deadlineNs) return ETIMEDOUT;
    uint64_t leftMs = (deadlineNs - now + 999999) / 1000000;
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, leftMs > 60000 ? 60000 : (int)leftMs);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return errno;
  }
}

int railnetPairWriteAll(int fd, const void* buf, size_t len, uint64_t deadlineNs) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = send(fd, (const char*)buf + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int e = waitFd(fd, POLLOUT, deadlineNs);
    if (e) return e;
  }
  return 0;
}

int railnetPairReadAll(int fd, void* buf, size_t len, uint64_t deadlineNs) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = recv(fd, (char*)buf + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n == 0) return ECONNRESET;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int e = waitFd(fd, POLLIN, deadlineNs);
    if (e) return e;
  }
  return 0;
}

int railnetPairSend(int fd, uint16_t type, const void* records, uint32_t count, uint64_t deadlineNs) {
  uint8_t* buf;
  size_t len;
  if (railnetPairEncode(type, records, count, &buf, &len) != ncclSuccess) return EINVAL;
  int e = railnetPairWriteAll(fd, buf, len, deadlineNs);
  free(buf);
  return e;
}

int railnetPairRecv(int fd, railnetPairMsg* msg, uint64_t deadlineNs, char* why) {
  uint8_t hdr[RAILNET_PAIR_HDR_SIZE];
  memset(msg, 0, sizeof(*msg));
  int e = railnetPairReadAll(fd, hdr, sizeof(hdr), deadlineNs);
  if (e) return e;
  uint16_t type;
  uint32_t count, length;
  if (railnetPairDecodeHeader(hdr, sizeof(hdr), &type, &count, &length, why) != ncclSuccess) return EPROTO;
  uint8_t* payload = length ? (uint8_t*)malloc(length) : NULL;
  if (length && payload == NULL) return ENOMEM;
  e = railnetPairReadAll(fd, payload, length, deadlineNs);
  if (e == 0 && railnetPairDecodePayload(type, count, payload, length, msg, why) != ncclSuccess) e = EPROTO;
  free(payload);
  return e;
}

int railnetPairExpect(int fd, uint16_t type, railnetPairMsg* msg, uint64_t deadlineNs, char* why) {
  int e = railnetPairRecv(fd, msg, deadlineNs, why);
  if (e) return e;
  if (msg->type == type) return 0;
  if (why && msg->type == RAILNET_PAIR_ERROR)
    snprintf(why, 128, "the peer answered ERROR: %.100s", msg->u.error->text);
  else if (why)
    snprintf(why, 128, "%s where %s was expected", railnetPairTypeName(msg->type), railnetPairTypeName(type));
  railnetPairFree(msg);
  return EPROTO;
}

int railnetPairRecvStep(int fd, railnetPairPartial* p, uint16_t type, railnetPairMsg* msg, char* why) {
  memset(msg, 0, sizeof(*msg));
  size_t want = RAILNET_PAIR_HDR_SIZE;
  for (;;) {
    uint16_t t = 0;
    uint32_t count = 0, length = 0;
    if (p->got >= RAILNET_PAIR_HDR_SIZE) {
      if (railnetPairDecodeHeader(p->buf, p->got, &t, &count, &length, why) != ncclSuccess) return -1;
      if (t != type) {
        whyf(why, "%s where %s was expected", railnetPairTypeName(t), railnetPairTypeName(type));
        return -1;
      }
      if (length > sizeof(p->buf) - RAILNET_PAIR_HDR_SIZE) {
        whyf(why, "a %s of %u bytes (at most %zu here)", railnetPairTypeName(t), length,
             sizeof(p->buf) - RAILNET_PAIR_HDR_SIZE);
        return -1;
      }
      want = RAILNET_PAIR_HDR_SIZE + length;
      if (p->got == want)
        return railnetPairDecodePayload(t, count, p->buf + RAILNET_PAIR_HDR_SIZE, length, msg, why) == ncclSuccess ? 1 : -1;
    }
    ssize_t n = recv(fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
    if (n > 0) {
      p->got += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    whyf(why, "%s after %zu bytes", n == 0 ? "the connection closed" : strerror(errno), p->got);
    return -1;
  }
}
