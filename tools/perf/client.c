/* The sender. It sends its settings (sizes, iterations, tests, buffers per irecv, comm
 * pairs, CUDA) as the first message, so the server needs only --plugin/--dev, then drives
 * the sweep and prints the tables. Set-up order: the mirror of server.c's. */
#include <stdlib.h>
#include <string.h>
#include "perf.h"

/* The settings this client runs with, and its listen handles for the reverse comms. */
static void fillSettings(ends* e, perfConfig* cfg, const size_t* sizes, int nSizes) {
  cfg->magic = PERF_MAGIC;
  cfg->nSizes = nSizes;
  cfg->iters = opt.iters;
  cfg->warmup = opt.warmup;
  cfg->window = opt.window;
  cfg->bw = opt.bw;
  cfg->lat = opt.lat;
  cfg->recvs = opt.recvs;
  cfg->comms = opt.comms;
  cfg->cuda = opt.cuda;
  cfg->recvSize = (int32_t)opt.recvSize;
  for (int i = 0; i < nSizes; i++) cfg->sizes[i] = sizes[i];
  for (int c = 0; c < e->n; c++) NETCALL(netListen(opt.dev, cfg->handles[c], &e->listenComm[c]));
}

/* Every comm pair up, the buffers registered, and the server's ack that it is ready. */
static void connectPairs(ends* e, char* handle, const size_t* sizes, int nSizes) {
  static perfConfig cfg;
  fillSettings(e, &cfg, sizes, nSizes);
  connectTo(e, 0, handle, "connect to the server");
  NETCALL(netRegMr(e->sendComm[0], e->ctrlSend, sizeof(e->ctrlSend), NCCL_PTR_HOST, &e->csmh));
  e->ctrlSendReg = 1;
  memcpy(e->ctrlSend, &cfg, sizeof(cfg));
  waitReq(e, postSend(e, 0, e->ctrlSend, sizeof(cfg), e->csmh, 0));
  for (int c = 0; c < e->n; c++) acceptOn(e, c, "accept the server's connection");
  NETCALL(netRegMr(e->recvComm[0], e->ctrlRecv, sizeof(e->ctrlRecv), NCCL_PTR_HOST, &e->crmh));
  e->ctrlRecvReg = 1;
  waitReq(e, postRecv(e, 0, 1, e->ctrlRecv, 0, sizeof(e->ctrlRecv), e->crmh));
  static perfReply reply;
  memcpy(&reply, e->ctrlRecv, sizeof(reply));
  if (reply.magic != PERF_MAGIC || reply.comms != e->n) die("the server did not answer the settings");
  for (int c = 1; c < e->n; c++) connectTo(e, c, reply.handles[c], "connect to the server");
  setupBuffers(e, sizes[nSizes - 1] > opt.recvSize ? sizes[nSizes - 1] : opt.recvSize);
  recvAck(e);
}

int runClient(char* handle, const size_t* sizes, int nSizes) {
  static ends e;
  e.n = opt.comms;
  e.recvs = opt.recvs;
  e.deadline = nowSec() + opt.timeoutSec;
  connectPairs(&e, handle, sizes, nSizes);
  settingsLine("");
  resultsBegin(&e);
  double* stamps = malloc(sizeof(double) * (size_t)(opt.iters + opt.warmup));
  if (stamps == NULL) die("out of memory");
  int bad = 0;
  if (opt.bw) bad += clientBandwidth(&e, sizes, nSizes, stamps);
  if (opt.lat) bad += clientLatency(&e, sizes, nSizes, stamps);
  resultsEnd();
  sendAck(&e, NULL);
  free(stamps);
  closeEnds(&e);
  if (bad) fprintf(stderr, "railnet-perf: the receiver counted wrong bytes, sizes or contents for %d size(s)\n", bad);
  return bad ? 1 : 0;
}
