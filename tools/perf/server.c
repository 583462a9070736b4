/* The receiver. It takes the settings from the client, receives the sweep, acks each size
 * with its counts and answers pings. Set-up order (the client mirrors it):
 *   1. accept data comm 0 on the listen comm whose handle the client got; receive the settings
 *   2. connect the reverse comms 0..comms-1 to the client's handles
 *   3. listen comms-1 more times; send those handles over reverse comm 0
 *   4. accept data comms 1..comms-1, one per listen comm */
#include <string.h>
#include "perf.h"

/* Step 1: data comm 0 and the client's settings in cfg, which take over opt's. */
static void receiveSettings(ends* e, void* listenComm, perfConfig* cfg) {
  e->n = 1;
  e->recvs = 1;
  e->listenComm[0] = listenComm;
  e->deadline = nowSec() + opt.timeoutSec;
  acceptOn(e, 0, "accept");
  NETCALL(netRegMr(e->recvComm[0], e->ctrlRecv, sizeof(e->ctrlRecv), NCCL_PTR_HOST, &e->crmh));
  e->ctrlRecvReg = 1;
  waitReq(e, postRecv(e, 0, 1, e->ctrlRecv, 0, sizeof(e->ctrlRecv), e->crmh));
  memcpy(cfg, e->ctrlRecv, sizeof(*cfg));
  if (cfg->magic != PERF_MAGIC || cfg->nSizes <= 0 || cfg->nSizes > MAX_SIZES || cfg->recvs < 1 ||
      cfg->recvs > MAX_RECVS || cfg->comms < 1 || cfg->comms > MAX_COMMS || cfg->window < 1 || cfg->iters < 1 ||
      cfg->warmup < 0 || cfg->recvSize < 0 || cfg->recvSize > MAX_RECV_SIZE)
    die("the client sent no valid settings");
  for (int i = 0; i < cfg->nSizes; i++)
    if (cfg->sizes[i] > MAX_MSG_SIZE)
      die("the client asked for messages of %llu bytes; railnet-perf moves at most %llu (is it a railnet-perf "
          "client of this version?)", (unsigned long long)cfg->sizes[i], (unsigned long long)MAX_MSG_SIZE);
  e->n = opt.comms = cfg->comms;
  e->recvs = opt.recvs = cfg->recvs;
}

/* Steps 2-4, then the buffers, and the ack that every comm is up. */
static void connectPairs(ends* e, perfConfig* cfg) {
  for (int c = 0; c < e->n; c++) connectTo(e, c, cfg->handles[c], "connect back to the client");
  NETCALL(netRegMr(e->sendComm[0], e->ctrlSend, sizeof(e->ctrlSend), NCCL_PTR_HOST, &e->csmh));
  e->ctrlSendReg = 1;
  static perfReply reply;
  reply.magic = PERF_MAGIC;
  reply.comms = e->n;
  for (int c = 1; c < e->n; c++) NETCALL(netListen(opt.dev, reply.handles[c], &e->listenComm[c]));
  memcpy(e->ctrlSend, &reply, sizeof(reply));
  waitReq(e, postSend(e, 0, e->ctrlSend, sizeof(reply), e->csmh, 0));
  for (int c = 1; c < e->n; c++) acceptOn(e, c, "accept the client's data comms");
  size_t maxSize = 0;
  for (int i = 0; i < cfg->nSizes; i++) maxSize = cfg->sizes[i] > maxSize ? cfg->sizes[i] : maxSize;
  opt.recvSize = (size_t)cfg->recvSize;
  setupBuffers(e, maxSize > opt.recvSize ? maxSize : opt.recvSize);
  sendAck(e, NULL); /* every comm is up */
}

/* Every size of the tests the client asked for; returns how many arrived wrong. */
static int receiveSweep(ends* e, const perfConfig* cfg) {
  int bad = 0;
  for (int t = 0; t < 2; t++) {
    if ((t == 0 && !cfg->bw) || (t == 1 && !cfg->lat)) continue;
    for (int i = 0; i < cfg->nSizes; i++) {
      size_t size = cfg->sizes[i];
      tally got = {0};
      e->deadline = nowSec() + opt.timeoutSec;
      int n = cfg->warmup + cfg->iters;
      clearSlots(e, size);
      if (t == 0) serverBandwidth(e, cfg, size, &got);
      else serverLatency(e, cfg, size, &got);
      long long want = (long long)size * e->recvs * n;
      int ok = got.bytes == want && got.buffers == (long long)e->recvs * n && got.messages == n && got.badSizes == 0 &&
               slotsRight(e, size);
      bad += !ok;
      receivedRow(t ? "lat" : "bw", size, &got, ok);
      perfAck a = {PERF_MAGIC, got.bytes, got.buffers, got.messages, ok, 0};
      sendAck(e, &a);
    }
  }
  return bad;
}

int runServer(void* listenComm) {
  static ends e;
  perfConfig cfg;
  receiveSettings(&e, listenComm, &cfg);
  if (cudaGpu() < 0 && cfg.cuda >= 0) cudaSetup(opt.cuda >= 0 ? opt.cuda : cfg.cuda);
  checkDevice(cfg.recvs, cudaGpu() >= 0);
  connectPairs(&e, &cfg);
  settingsLine(" (from the client)");
  receivedBegin(&e);
  int bad = receiveSweep(&e, &cfg);
  receivedEnd();
  recvAck(&e); /* the client is done */
  closeEnds(&e);
  if (bad) fprintf(stderr, "railnet-perf: %d size(s) arrived with wrong byte counts, sizes or contents\n", bad);
  return bad ? 1 : 0;
}
