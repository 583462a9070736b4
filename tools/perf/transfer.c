/* Messages through the comm pairs: posting (until the transport takes the request),
 * completing (what test() reports, tallied), streams of them with a window, and the acks
 * both sides stay in step with. */
#include <sched.h>
#include <string.h>
#include <unistd.h>
#include "net_window.h"
#include "perf.h"

/* Not done yet: give the transport's threads the core (this tool often shares few cores with them). */
void checkDeadline(const ends* e, const char* what) {
  sched_yield();
  if (nowSec() > e->deadline)
    die("%s did not complete within %d s (peer gone? see --timeout)", what, opt.timeoutSec);
}

void* postSend(ends* e, int c, void* data, size_t size, void* mh, int tag) {
  void* req = NULL;
  while (req == NULL) {
    NETCALL(netIsend(e->sendComm[c], data, size, tag, mh, &req));
    if (req == NULL) checkDeadline(e, "isend");
  }
  return req;
}
void* postRecv(ends* e, int c, int n, char* base, size_t stride, size_t size, void* mh) {
  void* data[MAX_RECVS];
  void* mhs[MAX_RECVS];
  size_t sizes[MAX_RECVS];
  int tags[MAX_RECVS];
  for (int k = 0; k < n; k++) {
    data[k] = base + (size_t)k * stride;
    sizes[k] = size;
    tags[k] = k;
    mhs[k] = mh;
  }
  void* req = NULL;
  while (req == NULL) {
    NETCALL(netIrecv(e->recvComm[c], n, data, sizes, tags, mhs, &req));
    if (req == NULL) checkDeadline(e, "irecv");
  }
  return req;
}
void waitReq(ends* e, void* req) {
  int done = 0, sizes[MAX_RECVS];
  while (!done) {
    NETCALL(netTest(req, &done, sizes));
    if (!done) checkDeadline(e, "a transfer");
  }
}

/* GPU buffers: make the received data visible to the GPU, as NCCL does after a receive. */
static void flushRecv(ends* e, int c, size_t size) {
  if (cudaGpu() < 0) return;
  void* data[MAX_RECVS];
  void* mhs[MAX_RECVS];
  int sizes[MAX_RECVS];
  for (int k = 0; k < e->recvs; k++) {
    data[k] = e->rbuf + (size_t)k * e->stride;
    mhs[k] = e->rmh[c];
    sizes[k] = (int)size;
  }
  void* req = NULL;
  NETCALL(netIflush(e->recvComm[c], e->recvs, data, sizes, mhs, &req));
  if (req) waitReq(e, req); /* NULL: this transport needs no flush */
}

void postMsg(ends* e, int isSend, int c, size_t size, msgReqs* m) {
  m->comm = c;
  if (isSend) {
    m->n = e->recvs;
    for (int k = 0; k < e->recvs; k++) m->req[k] = postSend(e, c, e->sbuf + (size_t)k * e->stride, size, e->smh[c], k);
  } else {
    m->n = 1;
    m->req[0] = postRecv(e, c, e->recvs, e->rbuf, e->stride, size > opt.recvSize ? size : opt.recvSize, e->rmh[c]);
  }
}
/* 1 once every request of m completed; what test() reported goes into t. */
static int testMsg(ends* e, int isSend, size_t size, msgReqs* m, tally* t) {
  for (int k = 0; k < m->n; k++) {
    if (m->req[k] == NULL) continue;
    int done = 0, sizes[MAX_RECVS] = {0};
    NETCALL(netTest(m->req[k], &done, sizes));
    if (!done) return 0;
    m->req[k] = NULL;
    int nb = isSend ? 1 : e->recvs; /* a receive reports one size per buffer */
    for (int j = 0; j < nb; j++) {
      t->bytes += sizes[j];
      t->buffers++;
      if (sizes[j] < 0 || (size_t)sizes[j] != size) t->badSizes++;
    }
  }
  if (!isSend) flushRecv(e, m->comm, size);
  t->messages++;
  return 1;
}
void waitMsg(ends* e, int isSend, size_t size, msgReqs* m, tally* t) {
  while (!testMsg(e, isSend, size, m, t)) checkDeadline(e, isSend ? "isend" : "irecv");
}

static double progressStart, progressLast;
static int progressShown;
void progress(const char* test, size_t size, int done, int total) {
  double now = nowSec();
  if (done == 0) {
    progressStart = progressLast = now;
    return;
  }
  if (progressStart == 0 || now - progressStart < 2 || now - progressLast < 1 || !isatty(2)) return;
  progressLast = now;
  progressShown = 1;
  fprintf(stderr, "\r  %s %zu bytes: %d/%d messages, %.0f s ", test, size, done, total, now - progressStart);
}
void progressEnd(void) {
  if (progressShown) fprintf(stderr, "\r%60s\r", "");
  progressShown = 0;
}

/* One stream's messages, for netWindowRun: message k on comm k % e->n, in slot k % cap. */
typedef struct {
  ends* e;
  int isSend, n, cap;
  size_t size;
  tally* t;
  double* stamps;
} streamRun;

static int streamPost(void* arg, int k) {
  streamRun* r = (streamRun*)arg;
  postMsg(r->e, r->isSend, k % r->e->n, r->size, &r->e->q[k % r->cap]);
  return 0;
}

static int streamTest(void* arg, int k) {
  streamRun* r = (streamRun*)arg;
  if (!testMsg(r->e, r->isSend, r->size, &r->e->q[k % r->cap], r->t)) return 0;
  if (r->stamps) r->stamps[k] = nowSec();
  if (((k + 1) & 63) == 0) progress(r->isSend ? "bw" : "recv", r->size, k + 1, r->n);
  return 1;
}

static int streamIdle(void* arg) {
  streamRun* r = (streamRun*)arg;
  checkDeadline(r->e, r->isSend ? "isend" : "irecv");
  return 0;
}

void stream(ends* e, int isSend, size_t size, int n, int window, tally* t, double* stamps) {
  tally ignored = {0};
  if (t == NULL) t = &ignored;
  if (window > NCCL_NET_MAX_REQUESTS) window = NCCL_NET_MAX_REQUESTS;
  /* consecutive messages: at most window on each comm */
  streamRun r = {e, isSend, n, window * e->n, size, t, stamps};
  netWindowOps ops = {streamPost, streamTest, streamIdle, &r};
  netWindowRun(&ops, n, r.cap);
}

void sendAck(ends* e, const perfAck* a) {
  perfAck none = {PERF_MAGIC, 0, 0, 0, 1, 0};
  memcpy(e->ctrlSend, a ? a : &none, sizeof(perfAck));
  waitReq(e, postSend(e, 0, e->ctrlSend, sizeof(perfAck), e->csmh, 0));
}
perfAck recvAck(ends* e) {
  perfAck a;
  waitReq(e, postRecv(e, 0, 1, e->ctrlRecv, 0, sizeof(perfAck), e->crmh));
  memcpy(&a, e->ctrlRecv, sizeof(a));
  if (a.magic != PERF_MAGIC) die("the peer sent a malformed ack");
  return a;
}
