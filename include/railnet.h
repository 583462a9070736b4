/*
 * railnet: NCCL's network transports (IB verbs and TCP sockets) as a library.
 *
 * Collective libraries link librailnet and drive a transport through the ncclNet
 * interface (the newest version, v12):
 *
 *   const ncclNet_t* net = railnetGetNet("socket");   // or "ib"
 *   void* ctx;
 *   net->init(&ctx, 0, NULL, NULL, NULL);              // NULL logger: NCCL's format on stdout
 *   net->devices(&ndev); ...
 *
 * Progress, as with NCCL's own transports: nothing moves between calls (no progress
 * thread), and an isend may return a NULL request ("not yet", call it again) until the peer
 * has made progress calls of its own. On IB with eager small messages (on by default,
 * RAILNET_IB_EAGER_SIZE), a message larger than the eager size that follows small ones asks
 * the receiver for its clear-to-send, and only the receiver's test() or irecv answers; NCCL's
 * proxy calls them all the time. A single thread that drives both ends of a comm must test
 * its receives while an isend returns NULL (or set RAILNET_IB_EAGER_SIZE=0).
 *
 * NCCL itself loads the same code as a plugin: NCCL_NET_PLUGIN=railnet loads
 * libnccl-net-railnet.so, which exports ncclNetPlugin_v8 ... ncclNetPlugin_v12, and NCCL 2.30
 * finds its one-sided RMA there too (ncclRmaPlugin_v14 and _v13).
 */
#ifndef RAILNET_H
#define RAILNET_H
#include <railnet_net/net.h>
#include <railnet_net/rma.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_API __attribute__((visibility("default")))

#define RAILNET_VERSION_MAJOR 0
#define RAILNET_VERSION_MINOR 1
#define RAILNET_VERSION_PATCH 0

/* The version is written here and nowhere else: railnetVersion() returns
 * "MAJOR.MINOR.PATCH" of these macros, and the build (railnet.pc, the man pages) and
 * the Debian package (scripts/version.sh) take it from this header. */
RAILNET_API const char* railnetVersion(void);

/*
 * The transport called `name` ("ib" or "socket"; also its ncclNet name "RailIB" or
 * "RailSocket"), or NULL when railnet has no such transport. Its init() still decides
 * whether the machine can run it (no RDMA device, no interface: init returns an error
 * with a WARN that says why).
 */
RAILNET_API const ncclNet_t* railnetGetNet(const char* name);

/*
 * One-sided RMA over IB verbs (NCCL 2.30's RMA plugin interface, version 14; docs/ib-rma.md):
 * a group of ranks (listen on every rank, the handles all-gathered by the caller, connect),
 * symmetric registrations, put, put with signal, get, flush. Host memory is served as well as
 * GPU memory; unlike the table the plugin exports to NCCL (ncclRmaPlugin_v14), its init does
 * not ask for GPUDirect RDMA.
 */
RAILNET_API const ncclRma_v14_t* railnetGetRma(void);

#ifdef __cplusplus
}
#endif
#endif
