/*
 * The Socket transport's devices: the interfaces ncclFindInterfaces chose at the first
 * init, their properties, and how many helper threads and data sockets a comm on each one
 * gets (net_socket_devices.h).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "net_socket_devices.h"
#include "net_socket_types.h"
#include "param.h"
#include "testing.h"

#define MAX_COLLNET_SIZE (512 * 1024 * 1024L)

/* NCCL caps the helper threads at MAX_THREADS, and threads x sockets at MAX_SOCKETS. */
static railnetParamVerdict threadsCheck(const char* str, int64_t nt, char* note, size_t size) {
  (void)str;
  if (nt <= MAX_THREADS) return RAILNET_PARAM_TAKEN;
  snprintf(note, size, "NCCL_SOCKET_NTHREADS=%" PRId64 " is above the maximum %d: the Socket transport uses %d "
           "helper threads per comm", nt, MAX_THREADS, MAX_THREADS);
  return RAILNET_PARAM_ADJUSTED;
}
static railnetParamVerdict nsocksCheck(const char* str, int64_t ns, char* note, size_t size);

enum { P_NTHREADS, P_NSOCKS };
static const railnetParam netSocketParams[] = {
    [P_NTHREADS] = RAILNET_PARAM_INT_CHECKED("NCCL_SOCKET_NTHREADS", -2, -2, 1024, threadsCheck,
                                             "Helper threads per comm (-2: automatic, 0 on most NICs, 2 on AWS, 4 on "
                                             "GCP; at most 16)"),
    [P_NSOCKS] = RAILNET_PARAM_INT_CHECKED("NCCL_NSOCKS_PERTHREAD", -2, -2, 1024, nsocksCheck,
                                           "Data sockets per helper thread (-2: automatic, 8 on AWS, 1 elsewhere; "
                                           "threads x sockets at most 64)"),
};

/* With NCCL_SOCKET_NTHREADS set (not automatic), threads x sockets above MAX_SOCKETS is cut. */
static railnetParamVerdict nsocksCheck(const char* str, int64_t ns, char* note, size_t size) {
  (void)str;
  int64_t nt = railnetParamInt(&netSocketParams[P_NTHREADS]);
  if (nt > MAX_THREADS) nt = MAX_THREADS;
  if (nt <= 0 || ns <= 0 || ns * nt <= MAX_SOCKETS) return RAILNET_PARAM_TAKEN;
  snprintf(note, size, "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %" PRId64 " x %" PRId64 " is above %d "
           "sockets: the Socket transport uses %" PRId64 " sockets per thread", nt, ns, MAX_SOCKETS, MAX_SOCKETS / nt);
  return RAILNET_PARAM_ADJUSTED;
}
RAILNET_PARAM_TABLE("net_socket", netSocketParams);

typedef struct {
  char name[MAX_IF_NAME_SIZE];
  union ncclSocketAddress addr;
  char pciPath[PATH_MAX]; /* "" for virtual interfaces; not on the heap, so a dlclose leaks nothing */
} socketDev;

static pthread_mutex_t devLock = PTHREAD_MUTEX_INITIALIZER;
static socketDev devs[MAX_IFS];
static int ndevs = -1;

ncclResult_t railnetSocketDevicesInit(void) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&devLock);
  if (ndevs < 0) {
    char names[MAX_IFS * MAX_IF_NAME_SIZE];
    union ncclSocketAddress addrs[MAX_IFS];
    int n = 0;
    railnetIfStep step = RAILNET_IF_NONE;
    res = railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &n, &step);
    if (res == ncclSuccess && n <= 0) {
      int said = railnetIfacesSaidNoMatch(); /* the cause is WARNed already: INFO */
      railnetDebugLog(said ? NCCL_LOG_INFO : NCCL_LOG_WARN, NCCL_NET | NCCL_INIT, said ? __func__ : __FILE__, __LINE__,
                      "NET/Socket : no usable network interface found (none is up with an address%s); "
                      "check `ip addr` and NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY",
                      railnetParamRaw("NCCL_SOCKET_IFNAME", NULL) ? " and matches NCCL_SOCKET_IFNAME" : "");
      res = ncclSystemError;
    }
    if (res == ncclSuccess) {
      char line[1024] = "";
      for (int i = 0; i < n; i++) {
        char a[SOCKET_NAME_MAXLEN], path[PATH_MAX];
        memcpy(devs[i].name, names + i * MAX_IF_NAME_SIZE, MAX_IF_NAME_SIZE);
        devs[i].name[MAX_IF_NAME_SIZE - 1] = '\0';
        devs[i].addr = addrs[i];
        snprintf(path, sizeof(path), "/sys/class/net/%.*s/device", MAX_IF_NAME_SIZE, devs[i].name);
        if (realpath(path, devs[i].pciPath) == NULL) devs[i].pciPath[0] = '\0';
        size_t l = strlen(line);
        snprintf(line + l, sizeof(line) - l, " [%d]%.*s:%s", i, MAX_IF_NAME_SIZE, devs[i].name,
                 ncclSocketToString(&addrs[i], a, 1));
      }
      ndevs = n;
      INFO(NCCL_INIT | NCCL_NET, "NET/Socket : Using%s (chosen by %s)", line, railnetIfStepName(step));
    }
  }
  pthread_mutex_unlock(&devLock);
  return res;
}

void railnetSocketResetDevices(void) {
  pthread_mutex_lock(&devLock);
  ndevs = -1;
  pthread_mutex_unlock(&devLock);
}

ncclResult_t railnetSocketCheckDev(int dev, const char* call) {
  if (dev < 0 || dev >= ndevs) {
    WARN("NET/Socket : %s on device %d, but there are %d devices (0..%d)", call, dev, ndevs < 0 ? 0 : ndevs,
         ndevs - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static int readSpeed(const char* ifName) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifName);
  FILE* f = fopen(path, "r");
  int speed = 0;
  if (f != NULL) {
    if (fscanf(f, "%d", &speed) != 1) speed = 0;
    fclose(f);
  }
  if (speed <= 0) {
    INFO(NCCL_NET, "Could not get speed from %s. Defaulting to 10 Gbps.", path);
    speed = 10000;
  }
  return speed;
}

/* NCCL's automatic threads x sockets: more streams on cloud NICs known to need them. */
void railnetSocketThreadsAndSockets(int dev, int* nThreads, int* nSocks) {
  int nt = (int)railnetParamInt(&netSocketParams[P_NTHREADS]);
  int ns = (int)railnetParamInt(&netSocketParams[P_NSOCKS]);
  char note[256];
  if (railnetParamJudge(&netSocketParams[P_NTHREADS], note, sizeof(note)) == RAILNET_PARAM_ADJUSTED &&
      nt > MAX_THREADS) {
    WARN("NET/Socket : %s", note);
    nt = MAX_THREADS;
  }
  if (nt == -2 || ns == -2) {
    int autoNt = 0, autoNs = 1;
    char path[PATH_MAX], vendor[16] = "";
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/vendor", devs[dev].name);
    FILE* f = fopen(path, "r");
    if (f != NULL) {
      if (fscanf(f, "%15s", vendor) != 1) vendor[0] = '\0';
      fclose(f);
    }
    if (strcmp(vendor, "0x1d0f") == 0) { /* AWS ENA */
      autoNt = 2;
      autoNs = 8;
    } else if (strcmp(vendor, "0x1ae0") == 0) { /* Google gVNIC */
      autoNt = 4;
      autoNs = 1;
    }
    if (nt == -2) nt = autoNt;
    if (ns == -2) ns = autoNs;
  }
  if (nt < 0) nt = 0;
  if (ns < 0) ns = 0;
  if (nt == 0) ns = 0;
  if (ns * nt > MAX_SOCKETS) {
    ns = MAX_SOCKETS / nt;
    WARN("NET/Socket : NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD is above %d sockets; using %d sockets per thread",
         MAX_SOCKETS, ns);
  }
  *nThreads = nt;
  *nSocks = ns * nt;
  if (*nSocks > 0) INFO(NCCL_INIT, "NET/Socket: Using %d threads and %d sockets per thread", nt, ns);
}

const union ncclSocketAddress* railnetSocketDevAddr(int dev) { return &devs[dev].addr; }

ncclResult_t ncclNetSocketDevices(int* n) {
  if (n == NULL) return ncclInvalidArgument;
  *n = ndevs < 0 ? 0 : ndevs;
  return ncclSuccess;
}

ncclResult_t ncclNetSocketGetProperties(int dev, ncclNetProperties_t* props) {
  NCCLCHECK(railnetSocketCheckDev(dev, "getProperties"));
  memset(props, 0, sizeof(*props));
  props->name = devs[dev].name;
  props->pciPath = devs[dev].pciPath[0] ? devs[dev].pciPath : NULL; /* NULL for virtual interfaces */
  props->guid = (uint64_t)dev;
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = readSpeed(devs[dev].name);
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  props->maxCollBytes = MAX_COLLNET_SIZE;
  props->maxMultiRequestSize = 1;
  props->railId = -1;
  props->planeId = -1;
  return ncclSuccess;
}
