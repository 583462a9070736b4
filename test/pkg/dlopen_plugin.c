/*
 * Loads the NCCL net plugin the way NCCL does: dlopen by the bare name (the dynamic
 * loader's search path decides where it comes from), then dlsym ncclNetPlugin_v8.
 *   dlopen_plugin [LIBNAME]     (default libnccl-net-railnet.so)
 * Prints "loaded PATH: ncclNetPlugin_v8 NAME" with the file the loader took, and exits 0;
 * 1 when the library or the symbol is missing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  const char* lib = argc > 1 ? argv[1] : "libnccl-net-railnet.so";
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("dlopen(%s): %s\n", lib, dlerror());
    return 1;
  }
  void* sym = dlsym(h, "ncclNetPlugin_v8");
  if (sym == NULL) {
    printf("%s has no ncclNetPlugin_v8: %s\n", lib, dlerror());
    return 1;
  }
  Dl_info info;
  const char* path = dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "?";
  /* every ncclNet_vN_t starts with the net's name */
  const char* name = *(const char* const*)sym;
  printf("loaded %s: ncclNetPlugin_v8 %s\n", path, name ? name : "(no name)");
  return 0;
}
