/*
 * A net plugin opened the way NCCL opens one, for railnet-perf, railnet-demo, the
 * benchmarks and the tests: the library by NCCL_NET_PLUGIN's naming rule and dlopen, the
 * newest ncclNetPlugin_vN this code drives (v8 ... v12, the structs of ext-net/include),
 * its init with the logger NCCL would hand it, and devices found by name and fused.
 * Plain C11 over ext-net/include and libdl only, so that test/pkg/tier.sh can build it
 * beside a program against the installed package.
 */
#ifndef RAILNET_TOOLS_COMMON_PLUGIN_LOAD_H_
#define RAILNET_TOOLS_COMMON_PLUGIN_LOAD_H_

#include <stdint.h>
#include <stdio.h>
#include "railnet_net/net.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PLUGIN_NET_MIN 8   /* the oldest ncclNetPlugin_vN this code drives */
#define PLUGIN_NET_MAX 12  /* the newest */
#define PLUGIN_PATH_MAX 4096

/* NCCL_NET_PLUGIN=<name>: "libnccl-net-<name>.so" ("libnccl-net.so" for ""), under "dir/"
 * when dir is not NULL, into out (len bytes). Returns 0, or -1 when it was cut to fit. */
int pluginLibName(const char* dir, const char* name, char* out, size_t len);
/* dlopen(RTLD_NOW | RTLD_LOCAL) of each of the n candidates in turn: the first handle that
 * opens, its candidate copied to path (when path is not NULL). NULL when none opens, with
 * every dlerror() in err (when not NULL), "; " between them. */
void* pluginOpenFirst(const char* const* candidates, int n, char* path, size_t pathLen, char* err, size_t errLen);
/* NCCL's order for NCCL_NET_PLUGIN=<name>: pluginLibName(dir, name), then name as it is;
 * the rest as pluginOpenFirst. */
void* pluginOpen(const char* dir, const char* name, char* path, size_t pathLen, char* err, size_t errLen);
/* The newest ncclNetPlugin_vN of lib with oldest <= N <= newest (within PLUGIN_NET_MIN ..
 * PLUGIN_NET_MAX), N in *version (when not NULL); NULL when lib exports none of them
 * (dlerror() then tells the last dlsym's failure). */
void* pluginFindNet(void* lib, int oldest, int newest, int* version);
/* The net's name: the first field of every version's struct. */
const char* pluginNetName(const void* net);
/* init of the ncclNet_vN at net: v11/v12 init(ctx, commId, config, logger, NULL), v10
 * init(logger, NULL), v8/v9 init(logger). */
ncclResult_t pluginNetInit(const void* net, int version, void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                           ncclDebugLogger_t logger);

/* What pluginLogger prints; set it before the plugin's init. */
typedef struct {
  ncclDebugLogLevel level; /* print the lines at this level or below (NCCL_LOG_WARN: WARNs only) */
  FILE* infoOut;           /* where the lines other than WARNs go: NULL for stderr */
  const char* prefix;      /* "<prefix>: " before every line; NULL for none */
  /* Sees every message, formatted, before it is printed; returns nonzero when it has done
   * with the message (pluginLogger then prints nothing). NULL for none. */
  int (*watch)(ncclDebugLogLevel level, const char* msg);
} pluginLogConfig;
extern pluginLogConfig pluginLog; /* level NCCL_LOG_WARN, the rest NULL */

/* The ncclDebugLogger_t to hand to init, in NCCL's words (without its host:pid:tid
 * [dev] prefix): "NCCL WARN file:line msg" on stderr, "NCCL INFO msg" on pluginLog.infoOut. */
void pluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The index of net's device whose getProperties name is name (and port, unless port is 0);
 * -1 when none is. */
int pluginDeviceNamed(const ncclNet_v12_t* net, const char* name, int port);
/* makeVDevice of net's devices named a and b: the fused device's index, or -1 when a device
 * is missing or makeVDevice fails. missing (when not NULL): a's and b's name, each where
 * that device is missing, else NULL. */
int pluginFuseNamed(const ncclNet_v12_t* net, const char* a, const char* b, const char* missing[2]);

#ifdef __cplusplus
}
#endif
#endif
