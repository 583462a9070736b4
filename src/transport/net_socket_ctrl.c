/*
 * The Socket transport's control stream (net_socket_ctrl.h). Each message starts with a
 * control record (size, tag, flags), followed by the payload itself when it is at most
 * NCCL_SOCKET_INLINE bytes, or all of it when the comm has no data sockets or the record is
 * flagged RAILNET_SOCKET_REC_ON_CTRL (net_socket_wire.h); other payloads go to the data
 * sockets as tasks. Requests use the stream in posting order.
 *
 * Sends gather the records (and payloads) of every request waiting for the stream into one
 * sendmsg. Receives read the stream into a staging buffer, as much as is there, and parse
 * the records of the posted receives from it, so that a burst of small messages costs one
 * system call rather than two per message; a large payload on the stream is received
 * straight into the user's buffer.
 */
#include <limits.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <linux/sockios.h>
#include "net_socket_ctrl.h"
#include "net_socket_helper.h"
#include "net_socket_types.h"
#include "net_prof.h"

/* Requests whose control bytes one sendmsg carries at most. */
#define CTRL_BATCH 16

/* Payload bytes of r that travel on the control socket after its record and inline part:
 * all of a larger message when there are no data sockets, or when its record says so
 * (RAILNET_SOCKET_REC_ON_CTRL). */
static size_t payloadOnCtrl(const socketRequest* r) {
  return r->onCtrl ? r->size : 0;
}

/* The profiler event of the control socket's part of r: the payload bytes it carries (the
 * inline part, or all of it on the control socket; the record itself is framing). Started
 * once the size is known (a receive learns it from the record), stopped when that part is
 * done or failed. */
static void ctrlEventStart(socketComm* c, socketRequest* r) {
  if (r->ctrlEvent != 0) return;
  r->ctrlEvent = 1;
  if (c->prof == NULL) return;
  size_t onCtrl = r->size <= (size_t)c->inlineSize || r->onCtrl ? r->size : 0;
  railnetProfSockStart(c->prof, &r->eh, r->phandle, c->ctrl.fd, r->op, onCtrl);
}

static void ctrlEventStop(socketComm* c, socketRequest* r) {
  if (r->ctrlEvent != 1) return;
  r->ctrlEvent = 2;
  if (c->prof != NULL) railnetProfStop(c->prof, &r->eh);
}

static ncclResult_t requestError(socketComm* c, socketRequest* r, ncclResult_t res) {
  ctrlEventStop(c, r);
  c->failed = 1;
  return res;
}

/* A received record without a socket set, or one whose set names only sockets this comm has,
 * and as many as the payload makes chunks on them; otherwise the receive fails with a WARN. */
static __attribute__((noinline)) int sockSetValid(socketComm* c, socketRequest* r) {
  ctrlRecord rec;
  ctrlSockSet set;
  memcpy(&rec, r->ctrl, sizeof(rec));
  if (!(rec.flags & RAILNET_SOCKET_REC_SOCK_SET)) return 1;
  memcpy(&set, r->ctrl + sizeof(rec), sizeof(set));
  int k = __builtin_popcountll(set);
  int chunks = 0;
  if (k > 0) {
    size_t task = railnetSocketTaskSize(c, r->size, rec.flags, k);
    chunks = (int)((r->size + task - 1) / task);
  }
  if (k > 0 && (c->nSocks == 64 || (set >> c->nSocks) == 0) && chunks == k) return 1;
  WARN("NET/Socket : peer %s sent a message of %zu bytes for data sockets 0x%llx, which do not fit this comm's %d data "
       "sockets in one chunk each (%d chunks): the peer is not this railnet version, or is broken; run the same railnet "
       "at both ends (or set RAILNET_SOCKET_BALANCE=0 at both)",
       c->peer, r->size, (unsigned long long)set, c->nSocks, chunks);
  return 0;
}

/* r's part of the control stream is through: its payload, if any is left, goes to the data
 * sockets (touched collects the sockets that got tasks). A received socket set that does not
 * fit fails the comm, and the stream stops at r (REQ_FAILED). */
static void ctrlDone(socketComm* c, socketRequest* r, uint64_t* touched) {
  if (r->size > (size_t)c->inlineSize && !r->onCtrl) {
    if (!c->isSend && !sockSetValid(c, r)) {
      requestError(c, r, ncclRemoteError);
      r->state = REQ_FAILED;
      return;
    }
    railnetSocketTasksPost(c, r, touched);
  }
  ctrlEventStop(c, r);
  r->state = REQ_DATA;
  c->ctrlSeq++;
}

static socketRequest* ctrlHead(socketComm* c, uint64_t seq) {
  socketRequest* r = c->bySeq[seq % MAX_REQUESTS];
  return r != NULL && r->seq == seq && r->state == REQ_CTRL ? r : NULL;
}

static void ctrlBroken(socketComm* c, int closed) {
  WARN("NET/Socket : control connection to peer %s %s: the peer process died or closed its comm", c->peer,
       closed ? "was closed" : "failed");
}

/* Sends, the usual case: one request waits, with only its record and inline payload. */
static ncclResult_t ctrlSendOne(socketComm* c, socketRequest* r, uint64_t* touched) {
  ctrlEventStart(c, r);
  struct iovec iov = {.iov_base = r->ctrl + r->ctrlOffset, .iov_len = (size_t)(r->ctrlLen - r->ctrlOffset)};
  struct railnetSocketIo io = {0};
  ncclResult_t res = railnetSocketProgressV(NCCL_SOCKET_SEND, &c->ctrl, &iov, 1, &io);
  if (res != ncclSuccess || io.closed) {
    ctrlBroken(c, io.closed);
    return requestError(c, r, ncclRemoteError);
  }
  r->ctrlOffset += (int)io.moved;
  if (r->ctrlOffset < r->ctrlLen && c->ctrlMax > 0) c->ctrlSpill = RAILNET_SOCKET_CTRL_SPILL;
  if (r->ctrlOffset == r->ctrlLen) ctrlDone(c, r, touched);
  return ncclSuccess;
}

/* Payloads on the control socket (RAILNET_SOCKET_CTRL_PAYLOAD): after a send that left bytes
 * (full), or one with payloads after which the kernel still holds unsent bytes (the flow
 * lags: a per-flow rate limit, a small window), the next payloads take the data sockets. */
static void ctrlBehind(socketComm* c, int full, int payloads) {
  int unsent = 0;
  if (full || (payloads && ioctl(c->ctrl.fd, SIOCOUTQNSD, &unsent) == 0 && unsent > 0))
    c->ctrlSpill = RAILNET_SOCKET_CTRL_SPILL;
}

/* Sends: the control bytes of the waiting requests, CTRL_BATCH at a time (out of line: its
 * arrays would make every call pay for their stack frame). */
static __attribute__((noinline)) ncclResult_t ctrlSendBatch(socketComm* c, uint64_t* touched) {
  for (;;) {
    struct iovec iov[2 * CTRL_BATCH];
    socketRequest* reqs[CTRL_BATCH];
    size_t onCtrl[CTRL_BATCH];
    int n = 0, nr = 0, payloads = 0, capped = 0; /* capped: the last payload goes in part (one call's bytes) */
    size_t want = 0;
    for (socketRequest* r; !capped && nr < CTRL_BATCH && want < RAILNET_SOCKET_SYSCALL_BYTES &&
                           (r = ctrlHead(c, c->ctrlSeq + nr)) != NULL;
         nr++) {
      ctrlEventStart(c, r);
      reqs[nr] = r;
      onCtrl[nr] = payloadOnCtrl(r);
      if (r->ctrlOffset < r->ctrlLen) {
        iov[n].iov_base = r->ctrl + r->ctrlOffset;
        iov[n].iov_len = (size_t)(r->ctrlLen - r->ctrlOffset);
        want += iov[n++].iov_len;
      }
      size_t data = onCtrl[nr] - r->ctrlDataOffset;
      size_t room = want < RAILNET_SOCKET_SYSCALL_BYTES ? RAILNET_SOCKET_SYSCALL_BYTES - want : 0;
      if (data > room) { /* the rest in the next call; no record may go before it */
        data = room;
        capped = 1;
      }
      if (data > 0) {
        payloads = 1;
        iov[n].iov_base = r->data + r->ctrlDataOffset;
        iov[n].iov_len = data;
        want += iov[n++].iov_len;
      }
    }
    if (nr == 0) return ncclSuccess;
    struct railnetSocketIo io = {0};
    ncclResult_t res = railnetSocketProgressV(NCCL_SOCKET_SEND, &c->ctrl, iov, n, &io);
    size_t left = io.moved;
    int k = 0;
    for (; k < nr; k++) {
      socketRequest* r = reqs[k];
      size_t part = (size_t)(r->ctrlLen - r->ctrlOffset);
      if (part > left) part = left;
      r->ctrlOffset += (int)part;
      left -= part;
      size_t data = onCtrl[k] - r->ctrlDataOffset;
      if (data > left) data = left;
      r->ctrlDataOffset += data;
      left -= data;
      if (r->ctrlOffset < r->ctrlLen || r->ctrlDataOffset < onCtrl[k]) break;
      ctrlDone(c, r, touched);
    }
    if (res != ncclSuccess || io.closed) {
      ctrlBroken(c, io.closed);
      return requestError(c, reqs[k < nr ? k : nr - 1], ncclRemoteError);
    }
    if (c->ctrlMax > 0) ctrlBehind(c, io.moved < want, payloads);
    if (io.moved < want) return ncclSuccess;              /* the socket is full */
    if (ctrlHead(c, c->ctrlSeq) == NULL) return ncclSuccess; /* all that waited went */
  }
}

static ncclResult_t ctrlSend(socketComm* c, uint64_t* touched) {
  socketRequest* head = ctrlHead(c, c->ctrlSeq);
  if (head == NULL) return ncclSuccess;
  if (ctrlHead(c, c->ctrlSeq + 1) == NULL && payloadOnCtrl(head) == 0 && head->ctrlOffset < head->ctrlLen)
    return ctrlSendOne(c, head, touched);
  return ctrlSendBatch(c, touched);
}

/* Receives: bytes of the stream, from the staging buffer first. */
static size_t stageTake(socketComm* c, void* dst, size_t len) {
  size_t have = (size_t)(c->stageTail - c->stageHead);
  if (len > have) len = have;
  if (len == 0) return 0;
  memcpy(dst, c->stage + c->stageHead, len);
  c->stageHead += (int)len;
  if (c->stageHead == c->stageTail) c->stageHead = c->stageTail = 0;
  return len;
}

/* One read of the stream: straight into `direct` (the rest of a large payload, nothing
 * staged; *toDirect bytes) or into the staging buffer (the bytes staged are returned).
 * Returns -1 with a WARN if the connection failed. */
static long ctrlRead(socketComm* c, char* direct, size_t directLen, size_t* toDirect) {
  struct iovec iov;
  *toDirect = 0;
  int straight = direct != NULL && c->stageHead == c->stageTail && directLen >= RAILNET_SOCKET_STAGE / 2;
  if (straight) {
    iov.iov_base = direct;
    iov.iov_len = directLen > RAILNET_SOCKET_SYSCALL_BYTES ? RAILNET_SOCKET_SYSCALL_BYTES : directLen;
  } else {
    if (c->stageHead == c->stageTail) c->stageHead = c->stageTail = 0;
    iov.iov_base = c->stage + c->stageTail;
    iov.iov_len = (size_t)(RAILNET_SOCKET_STAGE - c->stageTail);
  }
  struct railnetSocketIo io = {0};
  ncclResult_t res = railnetSocketProgressV(NCCL_SOCKET_RECV, &c->ctrl, &iov, 1, &io);
  if (res != ncclSuccess || io.closed) {
    ctrlBroken(c, io.closed);
    return -1;
  }
  if (straight) {
    *toDirect = io.moved;
    return 0;
  }
  c->stageTail += (int)io.moved;
  return (long)io.moved;
}

/* Whether the record's flags are ones this receive comm offered, on a message they fit: a
 * payload on the control socket, or one on the data sockets cut by the stated chunk size
 * and on the sockets it names (its set is checked once it arrives, in ctrlDone); none on a
 * message the receiver takes as inline. */
static int recordFlagsOffered(const socketComm* c, const ctrlRecord* rec) {
  uint32_t offered = (c->ctrlMax ? RAILNET_SOCKET_REC_ON_CTRL : 0u) | (c->statedTask ? RAILNET_SOCKET_REC_TASK_SIZE : 0u) |
                     (c->balance ? RAILNET_SOCKET_REC_SOCK_SET : 0u);
  if ((rec->flags & ~offered) != 0 || rec->size <= (uint64_t)c->inlineSize) return 0;
  if (rec->flags & RAILNET_SOCKET_REC_ON_CTRL) return rec->flags == RAILNET_SOCKET_REC_ON_CTRL;
  /* a set comes with the stated chunk size: both ends cut by the same one */
  return !(rec->flags & RAILNET_SOCKET_REC_SOCK_SET) || (rec->flags & RAILNET_SOCKET_REC_TASK_SIZE);
}

/* A record of a payload larger than inline, or with flags: whether the flags are offered and
 * fit, and where the payload goes. (Out of line: the small, inline messages' path stays short.) */
static __attribute__((noinline)) ncclResult_t recordLayout(socketComm* c, socketRequest* r, const ctrlRecord* rec) {
  if (rec->flags != 0 && !recordFlagsOffered(c, rec)) {
    WARN("NET/Socket : peer %s sent a control record with flags 0x%x for a message of %llu bytes, which this "
         "comm did not offer (payloads on the control socket: %s; chunk size: %zu, 0 none; data sockets named: %s, "
         "of %d; inline size %d): the peer is not this railnet version, sets another NCCL_SOCKET_INLINE, or is "
         "broken; run the same railnet with the same NCCL_SOCKET_INLINE at both ends (or set "
         "RAILNET_SOCKET_CTRL_PAYLOAD=0, RAILNET_SOCKET_MIN_TASKSIZE=0 and RAILNET_SOCKET_BALANCE=0 at both)",
         c->peer, rec->flags, (unsigned long long)rec->size, c->ctrlMax ? "yes" : "no", c->statedTask,
         c->balance ? "yes" : "no", c->nSocks, c->inlineSize);
    return requestError(c, r, ncclRemoteError);
  }
  r->onCtrl = c->nSocks == 0 || (rec->flags & RAILNET_SOCKET_REC_ON_CTRL);
  if (rec->flags & RAILNET_SOCKET_REC_SOCK_SET) {
    r->ctrlLen += (int)sizeof(ctrlSockSet);
    r->afterRecord = r->ctrl + sizeof(*rec);
  }
  ctrlEventStart(c, r);
  return ncclSuccess;
}

/* The sender's record of r is in r->ctrl: check it against the posted receive. */
static ncclResult_t recordParse(socketComm* c, socketRequest* r) {
  r->recordParsed = 1;
  ctrlRecord rec;
  memcpy(&rec, r->ctrl, sizeof(rec));
  if (rec.size > r->size) {
    WARN("NET/Socket : peer %s sent a message of %llu bytes but the receive buffer holds %zu bytes: a mismatch "
         "of sizes between ranks (check that all ranks run the same collective with the same NCCL_PROTO / "
         "NCCL_ALGO settings)",
         c->peer, (unsigned long long)rec.size, r->size);
    return requestError(c, r, ncclInvalidUsage);
  }
  if (rec.tag != r->tag) {
    WARN("NET/Socket : peer %s sent a message with tag %d, the posted receive expects tag %d", c->peer, rec.tag,
         r->tag);
    return requestError(c, r, ncclInvalidUsage);
  }
  r->size = rec.size;
  if (rec.flags != 0 || rec.size > (uint64_t)c->inlineSize) return recordLayout(c, r, &rec);
  r->onCtrl = 0;
  r->ctrlLen += (int)rec.size; /* the inline payload */
  ctrlEventStart(c, r);
  return ncclSuccess;
}

/* Moves what the stage holds (then the socket) into r; returns 1 when r's part is complete. */
static int recvStep(socketComm* c, socketRequest* r, ncclResult_t* res, int* readAgain) {
  const int rec = (int)sizeof(ctrlRecord);
  if (!r->recordParsed) {
    if (r->ctrlOffset == 0 && c->stageTail - c->stageHead >= rec) { /* the usual case: a whole record staged */
      memcpy(r->ctrl, c->stage + c->stageHead, sizeof(ctrlRecord));
      c->stageHead += rec;
      if (c->stageHead == c->stageTail) c->stageHead = c->stageTail = 0;
      r->ctrlOffset = rec;
    } else if (c->stageHead != c->stageTail) {
      r->ctrlOffset += (int)stageTake(c, r->ctrl + r->ctrlOffset, rec - r->ctrlOffset);
    }
    if (r->ctrlOffset == rec) {
      *res = recordParse(c, r);
      if (*res != ncclSuccess) return 0;
    }
  }
  if (r->recordParsed && r->ctrlOffset < r->ctrlLen) /* the socket set, or the inline payload straight into the buffer */
    r->ctrlOffset += (int)stageTake(c, r->afterRecord + (r->ctrlOffset - rec), r->ctrlLen - r->ctrlOffset);
  size_t onCtrl = r->recordParsed ? payloadOnCtrl(r) : 0;
  if (r->ctrlOffset == r->ctrlLen && r->ctrlDataOffset < onCtrl)
    r->ctrlDataOffset += stageTake(c, r->data + r->ctrlDataOffset, onCtrl - r->ctrlDataOffset);
  if (r->recordParsed && r->ctrlOffset == r->ctrlLen && r->ctrlDataOffset == onCtrl) return 1;
  /* r took all that was staged: read more */
  int payload = r->recordParsed && r->ctrlOffset == r->ctrlLen;
  size_t direct = 0;
  long n = ctrlRead(c, payload ? r->data + r->ctrlDataOffset : NULL, payload ? onCtrl - r->ctrlDataOffset : 0,
                    &direct);
  if (n < 0) {
    *res = requestError(c, r, ncclRemoteError);
    return 0;
  }
  r->ctrlDataOffset += direct;
  *readAgain = n > 0 || direct > 0;
  return 0;
}

static ncclResult_t ctrlRecv(socketComm* c, uint64_t* touched) {
  for (socketRequest* r; (r = ctrlHead(c, c->ctrlSeq)) != NULL;) {
    ncclResult_t res = ncclSuccess;
    int again = 0;
    if (recvStep(c, r, &res, &again)) {
      ctrlDone(c, r, touched);
      if (r->state == REQ_FAILED) return ncclRemoteError;
      continue;
    }
    if (res != ncclSuccess) return res;
    if (!again) return ncclSuccess; /* nothing more has arrived */
  }
  return ncclSuccess;
}

int railnetSocketCtrlCanWait(socketComm* c) {
  if (!c->isSend) return 0;
  socketRequest* r = ctrlHead(c, c->ctrlSeq);
  return r == NULL || r->size < c->minTask;
}

ncclResult_t railnetSocketCtrlProgress(socketComm* c) {
  uint64_t touched = 0;
  ncclResult_t res = c->isSend ? ctrlSend(c, &touched) : ctrlRecv(c, &touched);
  if (touched != 0) railnetSocketTasksKick(c, touched);
  return res;
}
