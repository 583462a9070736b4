/*
 * What the two transports share around connection setup (implemented in src/transport/conn_stage.c):
 *   - the registry of connects in progress. NCCL's connect is non-blocking: it is called
 *     again with the same handle until the comm is ready, so each transport keeps its
 *     progress in the process, keyed by the handle's address, never in the handle. The
 *     registry also keeps what the handle held: a new handle at the same address (the caller
 *     abandoned the first connect and reused its buffer) is a new connect, and the abandoned
 *     one is dropped;
 *   - the check of a handle's magic, with the hint every rank needs to hear;
 *   - the listen socket on the transport's interface, on a port the kernel picks;
 *   - the context init hands out: the comm config that connect reads.
 * Both transports (net_socket_connect.c, net_ib/connect.c) sit on top of this; it calls
 * back into them only through the drop function a registry is made with.
 */
#ifndef RAILNET_TRANSPORT_CONN_STAGE_H
#define RAILNET_TRANSPORT_CONN_STAGE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The head of a transport's connect state (its first member). */
struct railnetConnStage {
  struct railnetConnStage* next;
  const void* key;                               /* the handle's address */
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE]; /* what it held when the connect began */
  size_t handleLen;                              /* bytes of it that make the handle */
  int state;                                     /* the transport's step (for its logs and ours) */
};

/* stages by the handle's address (NCCL connects every channel of every peer at once: hundreds
 * of connects in progress, each looked up at each call) */
#define RAILNET_CONN_STAGE_BUCKETS 64
struct railnetConnStages {
  const char* net;                               /* "NET/IB", "NET/Socket": prefix of the log lines */
  void (*drop)(struct railnetConnStage* s);      /* frees a stage and its half-made comm */
  pthread_mutex_t lock;
  struct railnetConnStage* buckets[RAILNET_CONN_STAGE_BUCKETS];
};
#define RAILNET_CONN_STAGES_INIT(NET, DROP) {(NET), (DROP), PTHREAD_MUTEX_INITIALIZER, {NULL}}

/* Registers s for the handle at key, remembering its first handleLen bytes. */
void railnetConnStageAdd(struct railnetConnStages* r, struct railnetConnStage* s, const void* key, size_t handleLen);
/* The connect in progress for the handle at key; NULL when there is none, or when the
 * handle there is not the one it began with (that stage is dropped: INFO, r->drop). */
struct railnetConnStage* railnetConnStageFind(struct railnetConnStages* r, const void* key);
/* Takes s out of the registry (the caller frees it). */
void railnetConnStageRemove(struct railnetConnStages* r, struct railnetConnStage* s);
/* Teardown: drops every connect its caller abandoned. */
void railnetConnStageDropAll(struct railnetConnStages* r);

/* A connect handle's magic against the transport's: ncclSuccess, or a WARN naming what
 * the handle is not (kind: "IB", "Socket") and ncclInvalidArgument. */
ncclResult_t railnetConnCheckMagic(const char* net, const char* kind, uint64_t magic, uint64_t want);

/* The context init hands out (*ctx; ctx NULL: none is kept): the comm config's traffic
 * class (NCCL_NET_TRAFFIC_CLASS_UNDEF without a config), which connect reads. what names it
 * in the out-of-memory WARN. The transport's finalize frees it. */
ncclResult_t railnetConnCtxCreate(const ncclNetCommConfig_t* config, const char* what, void** ctx);

/* A listening ncclSocket on ifAddr with port 0 (the kernel picks one; *bound gets the
 * address to put in the handle). On failure the socket is closed. */
ncclResult_t railnetConnListen(struct ncclSocket* sock, const union ncclSocketAddress* ifAddr,
                               enum ncclSocketType type, union ncclSocketAddress* bound);

#ifdef __cplusplus
}
#endif
#endif
