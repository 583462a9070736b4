/* The comm pairs of one end and their buffers: set-up (accept, connect, register),
 * the contents check of the receive slots, and tear-down. */
#include <stdlib.h>
#include <string.h>
#include "perf.h"

/* Byte i of buffer slot k: distinct per slot, so a buffer landing in the wrong slot shows. */
static char slotByte(size_t i, int k) { return (char)(i * 7 + 1 + (size_t)k * 29); }

void setupBuffers(ends* e, size_t maxSize) {
  int type = cudaGpu() < 0 ? NCCL_PTR_HOST : NCCL_PTR_CUDA;
  e->stride = ((maxSize ? maxSize : 1) + 4095) / 4096 * 4096;
  size_t total = e->stride * (size_t)e->recvs;
  e->expect = malloc(total);
  if (e->expect == NULL || (cudaGpu() >= 0 && (e->stage = malloc(e->stride)) == NULL))
    die("cannot allocate %zu bytes", total);
  for (int k = 0; k < e->recvs; k++)
    for (size_t i = 0; i < e->stride; i++) e->expect[(size_t)k * e->stride + i] = slotByte(i, k);
  e->sbuf = bufAlloc(total);
  e->rbuf = bufAlloc(total);
  bufWrite(e->sbuf, e->expect, total);
  bufClear(e->rbuf, total);
  for (int c = 0; c < e->n; c++) {
    NETCALL(netRegMr(e->sendComm[c], e->sbuf, total, type, &e->smh[c]));
    NETCALL(netRegMr(e->recvComm[c], e->rbuf, total, type, &e->rmh[c]));
  }
  e->dataReg = 1;
}
void clearSlots(ends* e, size_t size) {
  for (int k = 0; k < e->recvs; k++) bufClear(e->rbuf + (size_t)k * e->stride, size);
}
int slotsRight(ends* e, size_t size) {
  for (int k = 0; k < e->recvs; k++) {
    size_t off = (size_t)k * e->stride;
    if (memcmp(bufRead(e->stage, e->rbuf + off, size), e->expect + off, size) != 0) return 0;
  }
  return 1;
}

/* Set-up of the comm pairs (see runServer/runClient for the order both sides follow). */
void acceptOn(ends* e, int c, const char* what) {
  while (e->recvComm[c] == NULL) {
    NETCALL(netAccept(e->listenComm[c], &e->recvComm[c]));
    if (e->recvComm[c] == NULL) checkDeadline(e, what);
  }
}
void connectTo(ends* e, int c, void* handle, const char* what) {
  while (e->sendComm[c] == NULL) {
    NETCALL(netConnect(opt.dev, handle, &e->sendComm[c]));
    if (e->sendComm[c] == NULL) checkDeadline(e, what);
  }
}

void closeEnds(ends* e) {
  for (int c = 0; c < e->n && e->dataReg; c++) {
    NETCALL(netDeregMr(e->sendComm[c], e->smh[c]));
    NETCALL(netDeregMr(e->recvComm[c], e->rmh[c]));
  }
  if (e->ctrlSendReg) NETCALL(netDeregMr(e->sendComm[0], e->csmh));
  if (e->ctrlRecvReg) NETCALL(netDeregMr(e->recvComm[0], e->crmh));
  for (int c = 0; c < MAX_COMMS; c++) {
    if (e->sendComm[c]) netCloseSend(e->sendComm[c]);
    if (e->recvComm[c]) netCloseRecv(e->recvComm[c]);
    if (e->listenComm[c]) netCloseListen(e->listenComm[c]);
  }
  netFinalize();
  bufFree(e->sbuf);
  bufFree(e->rbuf);
  free(e->expect);
  free(e->stage);
  cudaTeardown();
}
