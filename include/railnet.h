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
 * libnccl-net-railnet.so, which exports ncclNetPlugin_v8 ... ncclNetPlugin_v12.
 */
#ifndef RAILNET_H
#define RAILNET_H
#include <railnet_net/net.h>

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

#ifdef __cplusplus
}
#endif
#endif
