/*
 * Loads the NCCL net plugin as NCCL's loader does: the library is named by NCCL_NET_PLUGIN
 * ("railnet" -> libnccl-net-railnet.so; a name with ".so" is taken as it is) and dlopen'd by
 * that bare name, so the dynamic loader's search path decides where it comes from; then the
 * newest ncclNetPlugin_vN this program knows (12 down to 8) is looked up, and its init,
 * devices and getProperties are called, as NCCL's first use of a net does.
 *   NCCL_NET_PLUGIN=railnet dlopen_plugin
 * Prints "loaded PATH: ncclNetPlugin_vN NAME: init ok, K device(s)[, device 0 DEV]" and exits
 * 0; 1 when the variable is unset, the library or every symbol is missing, or init fails.
 * Built with the tools' loader beside it (test/pkg/tier.sh: cc ... tools/common/plugin_load.c),
 * against the headers of ext-net/include only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plugin_load.h"

/* init (any version, the WARNs on stderr), devices and device 0's name (v11 / v12).
 * Returns the device count, -1 when init failed. */
static int useNet(int version, void* sym, const char** devName) {
  int n = 0;
  void* ctx = NULL;
  ncclNetCommConfig_v12_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  *devName = NULL;
  const ncclNet_v8_t* any = (const ncclNet_v8_t*)sym; /* devices has the same place in every version */
  if (pluginNetInit(sym, version, &ctx, 1, &cfg, pluginLogger) != ncclSuccess || any->devices(&n) != ncclSuccess)
    return -1;
  if (version >= 11) {
    ncclNet_v12_t* net = (ncclNet_v12_t*)sym;
    static ncclNetProperties_v12_t p; /* v11's layout is a prefix of v12's up to name */
    if (n > 0 && net->getProperties(0, &p) == ncclSuccess) *devName = p.name;
    if (version == 12 && net->finalize) net->finalize(ctx);
  }
  return n;
}

int main(void) {
  const char* plugin = getenv("NCCL_NET_PLUGIN");
  if (plugin == NULL || plugin[0] == '\0') {
    printf("NCCL_NET_PLUGIN is not set\n");
    return 1;
  }
  char lib[256], err[1024];
  if (strstr(plugin, ".so"))
    snprintf(lib, sizeof(lib), "%s", plugin);
  else
    pluginLibName(NULL, plugin, lib, sizeof(lib));
  const char* candidates[1] = {lib};
  void* h = pluginOpenFirst(candidates, 1, NULL, 0, err, sizeof(err));
  if (h == NULL) {
    printf("dlopen(%s): %s\n", lib, err);
    return 1;
  }
  int v = 0;
  void* sym = pluginFindNet(h, PLUGIN_NET_MIN, PLUGIN_NET_MAX, &v);
  if (sym == NULL) {
    printf("%s has no ncclNetPlugin_v12 .. v8\n", lib);
    return 1;
  }
  char name[32];
  snprintf(name, sizeof(name), "ncclNetPlugin_v%d", v);
  Dl_info info;
  const char* path = dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "?";
  const char* netName = pluginNetName(sym);
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
