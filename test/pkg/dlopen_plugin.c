/*
 * Loads the NCCL net plugin as NCCL's loader does: the library is named by NCCL_NET_PLUGIN
 * ("railnet" -> libnccl-net-railnet.so; a name with ".so" is taken as it is) and dlopen'd by
 * that bare name, so the dynamic loader's search path decides where it comes from; then the
 * newest ncclNetPlugin_vN this program knows (12 down to 8) is looked up, and its init,
 * devices and getProperties are called, as NCCL's first use of a net does.
 *   NCCL_NET_PLUGIN=railnet dlopen_plugin
 * Prints "loaded PATH: ncclNetPlugin_vN NAME: init ok, K device(s)[, device 0 DEV]" and exits
 * 0; 1 when the variable is unset, the library or every symbol is missing, or init fails.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "railnet_net/net.h"

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (level > NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "plugin %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* v12 / v11 share init, devices and getProperties' place; v10 has init(logger, profiler);
 * v9 and v8 init(logger). Returns the device count, -1 when init failed. */
static int useNet(int version, void* sym, const char** devName) {
  int n = 0;
  *devName = NULL;
  if (version >= 11) {
    ncclNet_v12_t* net = (ncclNet_v12_t*)sym;
    void* ctx = NULL;
    ncclNetCommConfig_v12_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
    if (net->init(&ctx, 1, &cfg, logger, NULL) != ncclSuccess || net->devices(&n) != ncclSuccess) return -1;
    static ncclNetProperties_v12_t p; /* v11's layout is a prefix of v12's up to name */
    if (n > 0 && net->getProperties(0, &p) == ncclSuccess) *devName = p.name;
    if (version == 12 && net->finalize) net->finalize(ctx);
    return n;
  }
  if (version == 10) {
    ncclNet_v10_t* net = (ncclNet_v10_t*)sym;
    if (net->init(logger, NULL) != ncclSuccess || net->devices(&n) != ncclSuccess) return -1;
    return n;
  }
  ncclNet_v8_t* net = (ncclNet_v8_t*)sym; /* v9's first members are v8's */
  if (net->init(logger) != ncclSuccess || net->devices(&n) != ncclSuccess) return -1;
  return n;
}

int main(void) {
  const char* plugin = getenv("NCCL_NET_PLUGIN");
  if (plugin == NULL || plugin[0] == '\0') {
    printf("NCCL_NET_PLUGIN is not set\n");
    return 1;
  }
  char lib[256];
  if (strstr(plugin, ".so"))
    snprintf(lib, sizeof(lib), "%s", plugin);
  else
    snprintf(lib, sizeof(lib), "libnccl-net-%s.so", plugin);
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("dlopen(%s): %s\n", lib, dlerror());
    return 1;
  }
  for (int v = 12; v >= 8; v--) {
    char name[32];
    snprintf(name, sizeof(name), "ncclNetPlugin_v%d", v);
    void* sym = dlsym(h, name);
    if (sym == NULL) continue;
    Dl_info info;
    const char* path = dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "?";
    const char* netName = *(const char* const*)sym; /* every ncclNet_vN_t starts with its name */
    const char* dev = NULL;
    int n = useNet(v, sym, &dev);
    if (n < 0) {
      printf("loaded %s: %s %s: init failed\n", path, name, netName ? netName : "(no name)");
      return 1;
    }
    printf("loaded %s: %s %s: init ok, %d device(s)%s%s\n", path, name, netName ? netName : "(no name)", n,
           dev ? ", device 0 " : "", dev ? dev : "");
    return 0;
  }
  printf("%s has no ncclNetPlugin_v12 .. v8\n", lib);
  return 1;
}
