/*
 * railnet's test seams: every hook that exists only so that tests (and fuzz targets) can
 * reset or inspect internal state. Library code never calls these; tools never include
 * this header. Each section belongs to the layer named in its title.
 */
#ifndef RAILNET_TESTING_H
#define RAILNET_TESTING_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- misc: params and logging (src/misc/env.c, param.c, debug.c) ---- */
/* Forget the conf files read so far (the next lookup reads them again). */
void railnetEnvReset(void);
/* railnetEnvReset, and forget every param's cached value. */
void railnetParamReset(void);
/* Forget the cached NCCL_DEBUG* settings (re-read at the next message; closes the file). */
void railnetDebugReset(void);

/* ---- misc: verbs loader (src/misc/ibvwrap.c) ---- */
/* The library names the loader tries after NCCL_IBVERBS_LIB (a NULL-terminated list; NULL
 * restores "libibverbs.so", "libibverbs.so.1"). */
void railnetIbvSetLibNames(const char* const* names);
/* Make the wrappers call *table (copied, a struct railnetIbvSymbols of ibvwrap.h) as if it had
 * been loaded: a test's fake verbs. NULL forgets any table so that the next wrap_ibv_symbols
 * loads libibverbs again. */
struct railnetIbvSymbols;
void railnetIbvSetSymbols(const struct railnetIbvSymbols* table);


/* ---- transport: Socket (src/transport/net_socket*.c) ---- */
/* Forget the interfaces found by the first init, so that the next init looks again (under
 * the test's NCCL_SOCKET_IFNAME). Comms already made keep their sockets. */
void railnetSocketResetDevices(void);

/* ---- transport: IB (src/transport/net_ib/) ---- */
/* Tear every IB device down now whatever the reference count: event threads, abandoned
 * connects, registrations, contexts (init.c). */
void railnetIbResetDevices(void);
/* Registrations alive on physical device ibDevN, and cache hits since the process started
 * (reg.c). */
int railnetIbMrCacheCount(int ibDevN);
long railnetIbMrCacheHits(void);
/* Forget every remembered GPUDirect answer (peermem and DMA-BUF), so that the next question
 * probes again (gdr.c). */
void railnetIbGdrReset(void);

#ifdef __cplusplus
}
#endif
#endif
