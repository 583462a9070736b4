/* --use-cuda: the CUDA driver API by dlopen (no CUDA header or library at build time), and
 * the data buffers, in host memory or GPU memory. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "perf.h"

/* The few driver API calls used, declared here: no CUDA header or library at build time. */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef unsigned long long CUdeviceptr;

typedef struct {
  int gpu; /* -1: host buffers */
  CUdevice dev;
  CUcontext ctx;
  CUresult (*init)(unsigned int);
  CUresult (*deviceGetCount)(int*);
  CUresult (*deviceGet)(CUdevice*, int);
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*primaryCtxRelease)(CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*memAlloc)(CUdeviceptr*, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*memsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*getErrorName)(CUresult, const char**);
} cudaApi;
static cudaApi cu = {.gpu = -1};

static const char* cuErr(CUresult r) {
  const char* s = NULL;
  if (cu.getErrorName == NULL || cu.getErrorName(r, &s) != 0 || s == NULL) {
    static char buf[32];
    snprintf(buf, sizeof(buf), "CUresult %d", r);
    return buf;
  }
  return s;
}
#define CUCHECK(call, status, ...)                                                        \
  do {                                                                                    \
    CUresult r_ = (call);                                                                 \
    if (r_ != 0) {                                                                        \
      char what_[256];                                                                    \
      snprintf(what_, sizeof(what_), __VA_ARGS__);                                        \
      dieWith(status, "--use-cuda=%d: %s: %s", cu.gpu, what_, cuErr(r_));                 \
    }                                                                                     \
  } while (0)

void cudaSetup(int gpu) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* err = dlerror();
    if (err && strstr(err, "No such file"))
      dieWith(2, "--use-cuda: libcuda.so.1 not found (no NVIDIA driver on this host)");
    dieWith(2, "--use-cuda: cannot load libcuda.so.1: %s", err ? err : "?");
  }
  static const struct {
    const char* name;
    const char* fallback;
    size_t off;
  } syms[] = {
#define CUSYM(field, name, fallback) {name, fallback, offsetof(cudaApi, field)}
      CUSYM(init, "cuInit", NULL),
      CUSYM(deviceGetCount, "cuDeviceGetCount", NULL),
      CUSYM(deviceGet, "cuDeviceGet", NULL),
      CUSYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
      CUSYM(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
      CUSYM(ctxSetCurrent, "cuCtxSetCurrent", NULL),
      CUSYM(memAlloc, "cuMemAlloc_v2", NULL),
      CUSYM(memFree, "cuMemFree_v2", NULL),
      CUSYM(memcpyHtoD, "cuMemcpyHtoD_v2", NULL),
      CUSYM(memcpyDtoH, "cuMemcpyDtoH_v2", NULL),
      CUSYM(memsetD8, "cuMemsetD8_v2", NULL),
      CUSYM(getErrorName, "cuGetErrorName", NULL),
#undef CUSYM
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    void* f = dlsym(lib, syms[i].name);
    if (f == NULL && syms[i].fallback) f = dlsym(lib, syms[i].fallback);
    if (f == NULL) dieWith(2, "--use-cuda: libcuda.so.1 has no %s (NVIDIA driver too old?)", syms[i].name);
    memcpy((char*)&cu + syms[i].off, &f, sizeof(f));
  }
  cu.gpu = gpu;
  CUCHECK(cu.init(0), 2, "cuInit (the driver sees no usable GPU; check nvidia-smi)");
  int n = 0;
  CUCHECK(cu.deviceGetCount(&n), 2, "cuDeviceGetCount");
  if (gpu >= n) dieWith(2, "--use-cuda=%d: cuDeviceGet(GPU %d): only %d GPU%s", gpu, gpu, n, n == 1 ? "" : "s");
  CUCHECK(cu.deviceGet(&cu.dev, gpu), 2, "cuDeviceGet(GPU %d)", gpu);
  CUCHECK(cu.primaryCtxRetain(&cu.ctx, cu.dev), 2, "cuDevicePrimaryCtxRetain(GPU %d)", gpu);
  CUCHECK(cu.ctxSetCurrent(cu.ctx), 2, "cuCtxSetCurrent(GPU %d)", gpu);
}

int cudaGpu(void) { return cu.gpu; }

void cudaTeardown(void) {
  if (cu.gpu >= 0 && cu.ctx) cu.primaryCtxRelease(cu.dev);
  cu.ctx = NULL;
}

char* bufAlloc(size_t bytes) {
  if (cu.gpu < 0) {
    void* p = NULL;
    if (posix_memalign(&p, 4096, bytes)) die("cannot allocate %zu bytes", bytes);
    return p;
  }
  CUdeviceptr d = 0;
  CUCHECK(cu.memAlloc(&d, bytes), 1, "cuMemAlloc(%zu bytes)", bytes);
  return (char*)(uintptr_t)d;
}
void bufFree(char* p) {
  if (p == NULL) return;
  if (cu.gpu < 0) free(p);
  else CUCHECK(cu.memFree((CUdeviceptr)(uintptr_t)p), 1, "cuMemFree");
}
void bufWrite(char* dst, const char* host, size_t n) {
  if (cu.gpu < 0) memcpy(dst, host, n);
  else CUCHECK(cu.memcpyHtoD((CUdeviceptr)(uintptr_t)dst, host, n), 1, "cuMemcpyHtoD(%zu bytes)", n);
}
const char* bufRead(char* stage, const char* src, size_t n) {
  if (cu.gpu < 0) return src;
  CUCHECK(cu.memcpyDtoH(stage, (CUdeviceptr)(uintptr_t)src, n), 1, "cuMemcpyDtoH(%zu bytes)", n);
  return stage;
}
void bufClear(char* p, size_t n) {
  if (cu.gpu < 0) memset(p, 0, n);
  else CUCHECK(cu.memsetD8((CUdeviceptr)(uintptr_t)p, 0, n), 1, "cuMemsetD8(%zu bytes)", n);
}
const char* memoryName(void) { return cu.gpu < 0 ? "host" : "cuda"; }
