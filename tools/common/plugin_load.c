/* A net plugin opened the way NCCL opens one (see plugin_load.h). */
#include "plugin_load.h"
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pluginLibName(const char* dir, const char* name, char* out, size_t len) {
  int n;
  if (name[0] == '\0')
    n = snprintf(out, len, "%s%slibnccl-net.so", dir ? dir : "", dir ? "/" : "");
  else
    n = snprintf(out, len, "%s%slibnccl-net-%s.so", dir ? dir : "", dir ? "/" : "", name);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

void* pluginOpenFirst(const char* const* candidates, int n, char* path, size_t pathLen, char* err, size_t errLen) {
  if (err && errLen) err[0] = '\0';
  for (int i = 0; i < n; i++) {
    void* lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      if (path && pathLen) snprintf(path, pathLen, "%s", candidates[i]);
      return lib;
    }
    const char* why = dlerror();
    size_t used = err ? strlen(err) : 0;
    if (err && used + 1 < errLen) snprintf(err + used, errLen - used, "%s%s", i ? "; " : "", why ? why : "?");
  }
  return NULL;
}

void* pluginOpen(const char* dir, const char* name, char* path, size_t pathLen, char* err, size_t errLen) {
  char rule[PLUGIN_PATH_MAX];
  pluginLibName(dir, name, rule, sizeof(rule));
  const char* candidates[2] = {rule, name};
  return pluginOpenFirst(candidates, 2, path, pathLen, err, errLen);
}

void* pluginFindNet(void* lib, int oldest, int newest, int* version) {
  if (oldest < PLUGIN_NET_MIN) oldest = PLUGIN_NET_MIN;
  if (newest > PLUGIN_NET_MAX) newest = PLUGIN_NET_MAX;
  for (int v = newest; v >= oldest; v--) {
    char sym[32];
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
    void* net = dlsym(lib, sym);
    if (net == NULL) continue;
    if (version) *version = v;
    return net;
  }
  return NULL;
}

const char* pluginNetName(const void* net) { return ((const ncclNet_v8_t*)net)->name; }

ncclResult_t pluginNetInit(const void* net, int version, void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                           ncclDebugLogger_t logger) {
  if (version >= 11) return ((const ncclNet_v12_t*)net)->init(ctx, commId, config, logger, NULL); /* v11's too */
  if (version == 10) return ((const ncclNet_v10_t*)net)->init(logger, NULL);
  return ((const ncclNet_v8_t*)net)->init(logger); /* v9's init is v8's */
}

pluginLogConfig pluginLog = {NCCL_LOG_WARN, NULL, NULL, NULL};

void pluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (pluginLog.watch == NULL && level > pluginLog.level) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (pluginLog.watch && pluginLog.watch(level, msg)) return;
  if (level > pluginLog.level) return;
  const char* prefix = pluginLog.prefix ? pluginLog.prefix : "";
  const char* sep = pluginLog.prefix ? ": " : "";
  if (level == NCCL_LOG_WARN)
    fprintf(stderr, "%s%sNCCL WARN %s:%d %s\n", prefix, sep, file, line, msg);
  else
    fprintf(pluginLog.infoOut ? pluginLog.infoOut : stderr, "%s%sNCCL INFO %s\n", prefix, sep, msg);
}

int pluginDeviceNamed(const ncclNet_v12_t* net, const char* name, int port) {
  int n = 0;
  if (net->devices(&n) != ncclSuccess) return -1;
  for (int i = 0; i < n; i++) {
    ncclNetProperties_v12_t p;
    memset(&p, 0, sizeof(p));
    if (net->getProperties(i, &p) != ncclSuccess || p.name == NULL || strcmp(p.name, name) != 0) continue;
    if (port == 0 || p.port == port) return i;
  }
  return -1;
}

int pluginFuseNamed(const ncclNet_v12_t* net, const char* a, const char* b, const char* missing[2]) {
  ncclNetVDeviceProps_v12_t vp;
  memset(&vp, 0, sizeof(vp));
  vp.ndevs = 2;
  vp.devs[0] = pluginDeviceNamed(net, a, 0);
  vp.devs[1] = pluginDeviceNamed(net, b, 0);
  if (missing) {
    missing[0] = vp.devs[0] < 0 ? a : NULL;
    missing[1] = vp.devs[1] < 0 ? b : NULL;
  }
  int d = -1;
  if (vp.devs[0] < 0 || vp.devs[1] < 0 || net->makeVDevice(&d, &vp) != ncclSuccess) return -1;
  return d;
}
