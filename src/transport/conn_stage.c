/*
 * Connection setup shared by the Socket and IB transports: the registry of connects in
 * progress, the handle's magic check, the listen socket. See conn_stage.h.
 */
#include "conn_stage.h"
#include <stdlib.h>
#include <string.h>

static struct railnetConnStage** bucket(struct railnetConnStages* r, const void* key) {
  uint64_t k = (uint64_t)(uintptr_t)key;
  k ^= k >> 17; /* handles sit NCCL_NET_HANDLE_MAXSIZE apart, or anywhere */
  k *= 0x9e3779b97f4a7c15ull;
  return &r->buckets[(k >> 32) % RAILNET_CONN_STAGE_BUCKETS];
}

void railnetConnStageAdd(struct railnetConnStages* r, struct railnetConnStage* s, const void* key, size_t handleLen) {
  if (handleLen > sizeof(s->handle)) handleLen = sizeof(s->handle);
  s->key = key;
  s->handleLen = handleLen;
  memcpy(s->handle, key, handleLen);
  pthread_mutex_lock(&r->lock);
  struct railnetConnStage** b = bucket(r, key);
  s->next = *b;
  *b = s;
  pthread_mutex_unlock(&r->lock);
}

void railnetConnStageRemove(struct railnetConnStages* r, struct railnetConnStage* s) {
  pthread_mutex_lock(&r->lock);
  for (struct railnetConnStage** p = bucket(r, s->key); *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&r->lock);
}

struct railnetConnStage* railnetConnStageFind(struct railnetConnStages* r, const void* key) {
  pthread_mutex_lock(&r->lock);
  struct railnetConnStage* s = *bucket(r, key);
  while (s && s->key != key) s = s->next;
  pthread_mutex_unlock(&r->lock);
  if (s && memcmp(s->handle, key, s->handleLen) != 0) {
    /* a connect abandoned by its caller, and a new handle in the same place */
    INFO(NCCL_NET, "%s : dropping an abandoned connect (state %d) for a new handle at %p", r->net, s->state, key);
    railnetConnStageRemove(r, s);
    r->drop(s);
    s = NULL;
  }
  return s;
}

void railnetConnStageDropAll(struct railnetConnStages* r) {
  for (int b = 0; b < RAILNET_CONN_STAGE_BUCKETS; b++) {
    pthread_mutex_lock(&r->lock);
    struct railnetConnStage* s = r->buckets[b];
    r->buckets[b] = NULL;
    pthread_mutex_unlock(&r->lock);
    while (s) {
      struct railnetConnStage* n = s->next;
      r->drop(s);
      s = n;
    }
  }
}

ncclResult_t railnetConnCheckMagic(const char* net, const char* kind, uint64_t magic, uint64_t want) {
  if (magic == want) return ncclSuccess;
  WARN("%s : connect handle is not a railnet %s handle (magic 0x%016llx): truncated, corrupted, or from another "
       "network plugin; make sure every rank uses the same NCCL_NET_PLUGIN and RAILNET_TRANSPORT",
       net, kind, (unsigned long long)magic);
  return ncclInvalidArgument;
}

ncclResult_t railnetConnCtxCreate(const ncclNetCommConfig_t* config, const char* what, void** ctx) {
  ncclNetCommConfig_t* c;
  NCCLCHECK(RAILNET_CALLOC(&c, 1, what));
  c->trafficClass = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  if (ctx) *ctx = c;
  else free(c);
  return ncclSuccess;
}

ncclResult_t railnetConnListen(struct ncclSocket* sock, const union ncclSocketAddress* ifAddr,
                               enum ncclSocketType type, union ncclSocketAddress* bound) {
  union ncclSocketAddress addr = *ifAddr;
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0;
  else addr.sin6.sin6_port = 0;
  ncclResult_t res;
  NCCLCHECKGOTO(ncclSocketInit(sock, &addr, railnetSocketMagic(), type, NULL, 1), res, fail);
  NCCLCHECKGOTO(ncclSocketListen(sock), res, fail);
  NCCLCHECKGOTO(ncclSocketGetAddr(sock, bound), res, fail);
  return ncclSuccess;
fail:
  ncclSocketClose(sock);
  return res;
}
