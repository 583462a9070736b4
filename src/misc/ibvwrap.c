/*
 * ibvwrap: libibverbs through dlopen, one checked wrapper per verb (see ibvwrap.h).
 */
#include "ibvwrap.h"
#include "testing.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "param.h"

enum { P_RETRY_ALL, P_RETRY_CNT, P_RETRY_SLEEP, P_IBVERBS_LIB, P_QUERY_PORT_SPEED };
static const railnetParam ibvParams[] = {
    [P_RETRY_ALL] = RAILNET_PARAM_INT_DEF("NCCL_IB_MQP_RETRY_ALL", 0, 0, 1,
                                          "Retry ibv_modify_qp on any error, not only ETIMEDOUT"),
    [P_RETRY_CNT] = RAILNET_PARAM_INT_DEF("NCCL_IB_MQP_RETRY_CNT", 34, 0, 100000,
                                          "Retries of a failing ibv_modify_qp before giving up"),
    [P_RETRY_SLEEP] = RAILNET_PARAM_INT_DEF("NCCL_IB_MQP_RETRY_SLEEP_MSEC", 100, 0, 3600000,
                                            "Sleep before ibv_modify_qp retry n is n times this (ms)"),
    [P_IBVERBS_LIB] = RAILNET_PARAM_STR_DEF("NCCL_IBVERBS_LIB", NULL,
                                            "libibverbs to load before libibverbs.so / libibverbs.so.1"),
    [P_QUERY_PORT_SPEED] = RAILNET_PARAM_INT_DEF("NCCL_IB_QUERY_PORT_SPEED", 1, 0, 1,
                                                 "Port speed from ibv_query_port_speed where libibverbs has it, "
                                                 "else from the port's rate and width"),
};
RAILNET_PARAM_TABLE("ibvwrap", ibvParams);

struct railnetIbvSymbols railnetIbv;

/* ------------------------------------------------------------------ loading */

static const char* const defaultLibNames[] = {"libibverbs.so", "libibverbs.so.1", NULL};
static const char* const* libNames = defaultLibNames;

void railnetIbvSetLibNames(const char* const* names) { libNames = names ? names : defaultLibNames; }

#define SYM_OFF(field) offsetof(struct railnetIbvSymbols, field)
static const struct {
  const char* name;
  const char* version;
  size_t offset;
  const char* feature; /* NULL: required; else what is off without it */
} symSpecs[] = {
    {"ibv_get_device_list", "IBVERBS_1.1", SYM_OFF(get_device_list), NULL},
    {"ibv_free_device_list", "IBVERBS_1.1", SYM_OFF(free_device_list), NULL},
    {"ibv_get_device_name", "IBVERBS_1.1", SYM_OFF(get_device_name), NULL},
    {"ibv_open_device", "IBVERBS_1.1", SYM_OFF(open_device), NULL},
    {"ibv_close_device", "IBVERBS_1.1", SYM_OFF(close_device), NULL},
    {"ibv_get_async_event", "IBVERBS_1.1", SYM_OFF(get_async_event), NULL},
    {"ibv_ack_async_event", "IBVERBS_1.1", SYM_OFF(ack_async_event), NULL},
    {"ibv_query_device", "IBVERBS_1.1", SYM_OFF(query_device), NULL},
    {"ibv_query_port", "IBVERBS_1.1", SYM_OFF(query_port), NULL},
    {"ibv_query_gid", "IBVERBS_1.1", SYM_OFF(query_gid), NULL},
    {"ibv_query_qp", "IBVERBS_1.1", SYM_OFF(query_qp), NULL},
    {"ibv_alloc_pd", "IBVERBS_1.1", SYM_OFF(alloc_pd), NULL},
    {"ibv_dealloc_pd", "IBVERBS_1.1", SYM_OFF(dealloc_pd), NULL},
    {"ibv_reg_mr", "IBVERBS_1.1", SYM_OFF(reg_mr), NULL},
    {"ibv_dereg_mr", "IBVERBS_1.1", SYM_OFF(dereg_mr), NULL},
    {"ibv_create_comp_channel", "IBVERBS_1.0", SYM_OFF(create_comp_channel), NULL},
    {"ibv_destroy_comp_channel", "IBVERBS_1.0", SYM_OFF(destroy_comp_channel), NULL},
    {"ibv_create_cq", "IBVERBS_1.1", SYM_OFF(create_cq), NULL},
    {"ibv_destroy_cq", "IBVERBS_1.1", SYM_OFF(destroy_cq), NULL},
    {"ibv_create_qp", "IBVERBS_1.1", SYM_OFF(create_qp), NULL},
    {"ibv_modify_qp", "IBVERBS_1.1", SYM_OFF(modify_qp), NULL},
    {"ibv_destroy_qp", "IBVERBS_1.1", SYM_OFF(destroy_qp), NULL},
    {"ibv_fork_init", "IBVERBS_1.1", SYM_OFF(fork_init), NULL},
    {"ibv_event_type_str", "IBVERBS_1.1", SYM_OFF(event_type_str), NULL},
    {"ibv_wc_status_str", "IBVERBS_1.1", SYM_OFF(wc_status_str), NULL},
    {"ibv_reg_mr_iova2", "IBVERBS_1.8", SYM_OFF(reg_mr_iova2), "PCI relaxed ordering"},
    {"ibv_reg_dmabuf_mr", "IBVERBS_1.12", SYM_OFF(reg_dmabuf_mr), "DMA-BUF"},
    {"ibv_query_ece", "IBVERBS_1.10", SYM_OFF(query_ece), "ECE"},
    {"ibv_set_ece", "IBVERBS_1.10", SYM_OFF(set_ece), "ECE"},
    {"_ibv_query_gid_ex", "IBVERBS_1.11", SYM_OFF(query_gid_ex), "GID types without sysfs"},
    {"_ibv_query_gid_table", "IBVERBS_1.11", SYM_OFF(query_gid_table), "GID types without sysfs"},
    {"ibv_query_port_speed", "IBVERBS_1.16", SYM_OFF(query_port_speed), "port speed beyond XDR"},
};

static void appendStr(char* buf, size_t len, const char* sep, const char* s) {
  size_t used = strlen(buf);
  if (used + 1 >= len) return;
  snprintf(buf + used, len - used, "%s%s", used ? sep : "", s);
}

ncclResult_t railnetIbvLoadSymbols(struct railnetIbvSymbols* table) {
  memset(table, 0, sizeof(*table));
  const char* envLib = railnetParamStr(&ibvParams[P_IBVERBS_LIB]);
  void* handle = NULL;
  const char* loaded = NULL;
  char tried[512] = "", lastError[512] = "";

  if (envLib != NULL && envLib[0] != '\0') {
    handle = dlopen(envLib, RTLD_NOW | RTLD_LOCAL);
    if (handle) loaded = envLib;
    else {
      const char* e = dlerror();
      INFO(NCCL_INIT | NCCL_NET | NCCL_ENV, "NET/IB : could not open NCCL_IBVERBS_LIB=%s: %s", envLib, e ? e : "?");
    }
  }
  for (int i = 0; handle == NULL && libNames[i] != NULL; i++) {
    handle = dlopen(libNames[i], RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      loaded = libNames[i];
    } else {
      const char* e = dlerror();
      appendStr(tried, sizeof(tried), ", ", libNames[i]);
      snprintf(lastError, sizeof(lastError), "%s", e ? e : "?");
    }
  }
  if (handle == NULL) {
    INFO(NCCL_INIT | NCCL_NET,
         "NET/IB : libibverbs not found (tried %s: %s); InfiniBand/RoCE is unavailable. Install rdma-core "
         "(Debian/Ubuntu: apt install libibverbs1 ibverbs-providers; RHEL/SUSE: rdma-core libibverbs) to use it",
         tried, lastError);
    return ncclSystemError;
  }

  char missing[512] = "", features[256] = "";
  for (size_t i = 0; i < RAILNET_ARRAY_SIZE(symSpecs); i++) {
    void* sym = dlvsym(handle, symSpecs[i].name, symSpecs[i].version);
    if (sym == NULL) sym = dlsym(handle, symSpecs[i].name); /* a library built without symbol versions */
    if (sym == NULL && symSpecs[i].feature == NULL) {
      WARN("NET/IB : %s has no %s (version %s): this libibverbs is too old or not rdma-core's; "
           "InfiniBand/RoCE is unavailable",
           loaded, symSpecs[i].name, symSpecs[i].version);
      memset(table, 0, sizeof(*table));
      dlclose(handle);
      return ncclSystemError;
    }
    if (sym == NULL) {
      appendStr(missing, sizeof(missing), ", ", symSpecs[i].name);
      if (strstr(features, symSpecs[i].feature) == NULL) appendStr(features, sizeof(features), ", ", symSpecs[i].feature);
      continue;
    }
    memcpy((char*)table + symSpecs[i].offset, &sym, sizeof(sym));
  }
  if (missing[0] != '\0')
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s lacks %s (rdma-core too old): %s off", loaded, missing, features);
  INFO(NCCL_INIT | NCCL_NET, "NET/IB : using %s", loaded);
  return ncclSuccess;
}

static pthread_mutex_t symLock = PTHREAD_MUTEX_INITIALIZER;
static int symState; /* 0: not tried, 1: loaded or injected, -1: failed */

ncclResult_t wrap_ibv_symbols(void) {
  int state = __atomic_load_n(&symState, __ATOMIC_ACQUIRE);
  if (state == 0) {
    pthread_mutex_lock(&symLock);
    state = symState;
    if (state == 0) {
      struct railnetIbvSymbols table;
      state = railnetIbvLoadSymbols(&table) == ncclSuccess ? 1 : -1;
      if (state == 1) railnetIbv = table;
      __atomic_store_n(&symState, state, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&symLock);
  }
  return state == 1 ? ncclSuccess : ncclSystemError;
}

void railnetIbvSetSymbols(const struct railnetIbvSymbols* table) {
  pthread_mutex_lock(&symLock);
  if (table) railnetIbv = *table;
  else memset(&railnetIbv, 0, sizeof(railnetIbv));
  __atomic_store_n(&symState, table ? 1 : 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&symLock);
}

/* ------------------------------------------------------------------ check macros */

/* The error of an int-returning verb: rdma-core returns an errno value, or -1 with errno set. */
static int ibvRetErrno(int ret) {
  if (ret == -1 && errno != 0) return errno;
  return ret < 0 ? -ret : ret;
}

#define IBV_REQUIRE(field, name)                                                          \
  do {                                                                                    \
    if (railnetIbv.field == NULL) {                                                       \
      WARN("lib wrapper not initialized: " name " is not loaded (libibverbs unavailable)"); \
      return ncclInternalError;                                                           \
    }                                                                                     \
  } while (0)

/* Pointer-returning verb: NULL means failure, the reason is in errno. HINT adds advice. */
#define IBV_PTR_CHECK_ERRNO_HINT(field, call, retval, name, HINT)          \
  do {                                                                     \
    IBV_REQUIRE(field, name);                                              \
    errno = 0;                                                             \
    (retval) = railnetIbv.call;                                            \
    if ((retval) == NULL) {                                                \
      int err_ = errno;                                                    \
      WARN("Call to " name " failed with error %s", strerror(err_));       \
      HINT(name, err_);                                                    \
      return ncclSystemError;                                              \
    }                                                                      \
    return ncclSuccess;                                                    \
  } while (0)
#define IBV_NO_HINT(name, err) (void)(err)
#define IBV_PTR_CHECK_ERRNO(field, call, retval, name) \
  IBV_PTR_CHECK_ERRNO_HINT(field, call, retval, name, IBV_NO_HINT)
#define IBV_PTR_CHECK_ERRNO_MEMLOCK(field, call, retval, name) \
  IBV_PTR_CHECK_ERRNO_HINT(field, call, retval, name, railnetIbvMemlockHint)

/* Int-returning verb: anything but success_value is an errno (or -1 and errno). */
#define IBV_INT_CHECK_RET_ERRNO(field, call, success_value, name)                   \
  do {                                                                              \
    IBV_REQUIRE(field, name);                                                       \
    errno = 0;                                                                      \
    int ret_ = railnetIbv.call;                                                     \
    if (ret_ != (success_value)) {                                                  \
      int err_ = ibvRetErrno(ret_);                                                 \
      WARN("Call to " name " failed with error %s errno %d", strerror(err_), err_); \
      return ncclSystemError;                                                       \
    }                                                                               \
    return ncclSuccess;                                                             \
  } while (0)

/* Int-returning verb with one error value and nothing more to say. */
#define IBV_INT_CHECK(field, call, error_value, name) \
  do {                                                \
    IBV_REQUIRE(field, name);                         \
    int ret_ = railnetIbv.call;                       \
    if (ret_ == (error_value)) {                      \
      WARN("Call to " name " failed");                \
      return ncclSystemError;                         \
    }                                                 \
    return ncclSuccess;                               \
  } while (0)

/* Optional verb: absent or ENOTSUP/EOPNOTSUPP -> *supported = 0, not a failure. */
#define IBV_INT_CHECK_RET_ERRNO_OPTIONAL(field, call, success_value, name, supported)  \
  do {                                                                                 \
    if (railnetIbv.field == NULL) {                                                    \
      INFO(NCCL_NET, "Call to " name " skipped, not in this libibverbs");              \
      *(supported) = 0;                                                                \
      return ncclSuccess;                                                              \
    }                                                                                  \
    errno = 0;                                                                         \
    int ret_ = railnetIbv.call;                                                        \
    int err_ = ret_ == (success_value) ? 0 : ibvRetErrno(ret_);                        \
    if (err_ == ENOTSUP || err_ == EOPNOTSUPP) {                                       \
      INFO(NCCL_NET, "Call to " name " not supported");                                \
      *(supported) = 0;                                                                \
      return ncclSuccess;                                                              \
    }                                                                                  \
    *(supported) = 1;                                                                  \
    if (err_ != 0) {                                                                   \
      WARN("Call to " name " failed with error %s errno %d", strerror(err_), err_);    \
      return ncclSystemError;                                                          \
    }                                                                                  \
    return ncclSuccess;                                                                \
  } while (0)

/* Verb without a result. */
#define IBV_PASSTHRU(field, call) \
  do {                            \
    IBV_REQUIRE(field, #field);   \
    railnetIbv.call;              \
    return ncclSuccess;           \
  } while (0)

/* ------------------------------------------------------------------ hints */

static void formatLimit(rlim_t v, char* buf, size_t len) {
  if (v == RLIM_INFINITY) snprintf(buf, len, "unlimited");
  else snprintf(buf, len, "%llu KiB", (unsigned long long)(v / 1024));
}

void railnetIbvMemlockHint(const char* call, int err) {
  if (err != ENOMEM && err != EAGAIN) return;
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return;
  char soft[32], hard[32];
  formatLimit(rl.rlim_cur, soft, sizeof(soft));
  formatLimit(rl.rlim_max, hard, sizeof(hard));
  if (rl.rlim_cur == RLIM_INFINITY) {
    WARN("HINT: %s failed with %s while the locked-memory limit (RLIMIT_MEMLOCK) is unlimited: "
         "the host or the NIC ran out of memory or resources; memlock is not the cause",
         call, strerror(err));
    return;
  }
  WARN("HINT: %s failed with %s: RDMA pins the memory it registers and this process may lock only %s "
       "(RLIMIT_MEMLOCK soft limit; hard limit %s)",
       call, strerror(err), soft, hard);
  WARN("HINT: To fix it, add '* soft memlock unlimited' and '* hard memlock unlimited' to "
       "/etc/security/limits.conf, log in again or restart the job, and check with 'ulimit -l' "
       "(containers: --ulimit memlock=-1:-1)");
}

void railnetIbvModifyQpHint(int err) {
  switch (err) {
    case EINVAL:
    case ENODATA: /* rxe answers ENODATA for an empty GID slot */
      WARN("HINT: In many cases this error occurs when the incorrect GID index is forced by NCCL_IB_GID_INDEX");
      WARN("HINT: To confirm and fix the problem, set NCCL_IB_GID_INDEX=-1 (or unset it) to enable automatic "
           "detection");
      WARN("HINT: See https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-gid-index for "
           "more information");
      return;
    case ETIMEDOUT:
      WARN("HINT: In many cases this error occurs when NICs are not cross-rail connected (check the cabling)");
      WARN("HINT: To confirm, set NCCL_CROSS_NIC=0 to disable cross-rail communication");
      WARN("HINT: See https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-cross-nic for "
           "more information");
      return;
    default:
      return;
  }
}

/* ------------------------------------------------------------------ wrappers */

ncclResult_t wrap_ibv_fork_init(void) { IBV_INT_CHECK(fork_init, fork_init(), -1, "ibv_fork_init"); }

ncclResult_t wrap_ibv_get_device_list(struct ibv_device*** ret, int* num_devices) {
  IBV_REQUIRE(get_device_list, "ibv_get_device_list");
  errno = 0;
  *ret = railnetIbv.get_device_list(num_devices);
  if (*ret == NULL) {
    int err = errno;
    *num_devices = 0;
    if (err != 0) INFO(NCCL_NET | NCCL_INIT, "NET/IB : ibv_get_device_list found no devices: %s", strerror(err));
  }
  return ncclSuccess;
}

ncclResult_t wrap_ibv_free_device_list(struct ibv_device** list) {
  IBV_PASSTHRU(free_device_list, free_device_list(list));
}

const char* wrap_ibv_get_device_name(struct ibv_device* device) {
  if (railnetIbv.get_device_name == NULL) {
    WARN("lib wrapper not initialized: ibv_get_device_name is not loaded (libibverbs unavailable)");
    return "N/A";
  }
  const char* name = railnetIbv.get_device_name(device);
  return name ? name : "N/A";
}

ncclResult_t wrap_ibv_open_device(struct ibv_context** ret, struct ibv_device* device) {
  IBV_PTR_CHECK_ERRNO(open_device, open_device(device), *ret, "ibv_open_device");
}

ncclResult_t wrap_ibv_close_device(struct ibv_context* context) {
  IBV_INT_CHECK(close_device, close_device(context), -1, "ibv_close_device");
}

ncclResult_t wrap_ibv_get_async_event(struct ibv_context* context, struct ibv_async_event* event) {
  IBV_INT_CHECK(get_async_event, get_async_event(context, event), -1, "ibv_get_async_event");
}

ncclResult_t wrap_ibv_ack_async_event(struct ibv_async_event* event) {
  IBV_PASSTHRU(ack_async_event, ack_async_event(event));
}

ncclResult_t wrap_ibv_query_device(struct ibv_context* context, struct ibv_device_attr* device_attr) {
  IBV_INT_CHECK_RET_ERRNO(query_device, query_device(context, device_attr), 0, "ibv_query_device");
}

ncclResult_t wrap_ibv_query_port(struct ibv_context* context, uint8_t port_num, struct ibv_port_attr* port_attr) {
  /* As verbs.h's inline ibv_query_port: the provider's extended op fills the whole struct
   * (active_speed_ex, ...); the exported symbol only its older part. */
  struct verbs_context* vctx = verbs_get_ctx_op(context, query_port);
  if (vctx != NULL) {
    int ret = vctx->query_port(context, port_num, port_attr, sizeof(*port_attr));
    if (ret == 0) return ncclSuccess;
  }
  memset(port_attr, 0, sizeof(*port_attr));
  IBV_INT_CHECK_RET_ERRNO(query_port, query_port(context, port_num, port_attr), 0, "ibv_query_port");
}

ncclResult_t wrap_ibv_query_port_speed(struct ibv_context* context, uint8_t port_num, uint64_t* speed) {
  if (!railnetParamInt(&ibvParams[P_QUERY_PORT_SPEED]) || railnetIbv.query_port_speed == NULL) return ncclSystemError;
  errno = 0;
  int ret = railnetIbv.query_port_speed(context, port_num, speed);
  if (ret == 0) return ncclSuccess;
  INFO(NCCL_NET, "NET/IB : ibv_query_port_speed on port %d failed: %s; the speed comes from the port's rate and "
       "width", port_num, strerror(ret > 0 ? ret : errno));
  return ncclSystemError;
}

ncclResult_t wrap_ibv_query_gid(struct ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  IBV_INT_CHECK_RET_ERRNO(query_gid, query_gid(context, port_num, index, gid), 0, "ibv_query_gid");
}

ncclResult_t wrap_ibv_query_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask,
                               struct ibv_qp_init_attr* init_attr) {
  IBV_INT_CHECK_RET_ERRNO(query_qp, query_qp(qp, attr, attr_mask, init_attr), 0, "ibv_query_qp");
}

ncclResult_t wrap_ibv_alloc_pd(struct ibv_pd** ret, struct ibv_context* context) {
  IBV_PTR_CHECK_ERRNO(alloc_pd, alloc_pd(context), *ret, "ibv_alloc_pd");
}

ncclResult_t wrap_ibv_dealloc_pd(struct ibv_pd* pd) {
  IBV_INT_CHECK_RET_ERRNO(dealloc_pd, dealloc_pd(pd), 0, "ibv_dealloc_pd");
}

ncclResult_t wrap_ibv_reg_mr(struct ibv_mr** ret, struct ibv_pd* pd, void* addr, size_t length, int access) {
  IBV_PTR_CHECK_ERRNO_MEMLOCK(reg_mr, reg_mr(pd, addr, length, access), *ret, "ibv_reg_mr");
}

ncclResult_t wrap_ibv_reg_mr_iova2(struct ibv_mr** ret, struct ibv_pd* pd, void* addr, size_t length,
                                   uint64_t iova, int access) {
  if (railnetIbv.reg_mr_iova2 == NULL) return ncclInternalError;
  if (ret == NULL) return ncclSuccess; /* only asking whether the verb exists */
  IBV_PTR_CHECK_ERRNO_MEMLOCK(reg_mr_iova2, reg_mr_iova2(pd, addr, length, iova, (unsigned int)access), *ret,
                              "ibv_reg_mr_iova2");
}

ncclResult_t wrap_ibv_reg_dmabuf_mr(struct ibv_mr** ret, struct ibv_pd* pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access) {
  /* no memlock hint: DMA-BUF memory is pinned by its exporter, not charged to RLIMIT_MEMLOCK */
  IBV_PTR_CHECK_ERRNO(reg_dmabuf_mr, reg_dmabuf_mr(pd, offset, length, iova, fd, access), *ret, "ibv_reg_dmabuf_mr");
}

struct ibv_mr* wrap_direct_ibv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                             int fd, int access) {
  if (railnetIbv.reg_dmabuf_mr == NULL) {
    errno = EOPNOTSUPP; /* what the DMA-BUF probe classifies as "unsupported" */
    return NULL;
  }
  return railnetIbv.reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

ncclResult_t wrap_ibv_dereg_mr(struct ibv_mr* mr) {
  IBV_INT_CHECK_RET_ERRNO(dereg_mr, dereg_mr(mr), 0, "ibv_dereg_mr");
}

ncclResult_t wrap_ibv_create_cq(struct ibv_cq** ret, struct ibv_context* context, int cqe, void* cq_context,
                                struct ibv_comp_channel* channel, int comp_vector) {
  IBV_PTR_CHECK_ERRNO_MEMLOCK(create_cq, create_cq(context, cqe, cq_context, channel, comp_vector), *ret,
                              "ibv_create_cq");
}

ncclResult_t wrap_ibv_destroy_cq(struct ibv_cq* cq) {
  IBV_INT_CHECK_RET_ERRNO(destroy_cq, destroy_cq(cq), 0, "ibv_destroy_cq");
}

ncclResult_t wrap_ibv_create_qp(struct ibv_qp** ret, struct ibv_pd* pd, struct ibv_qp_init_attr* qp_init_attr) {
  IBV_PTR_CHECK_ERRNO_MEMLOCK(create_qp, create_qp(pd, qp_init_attr), *ret, "ibv_create_qp");
}

ncclResult_t wrap_ibv_destroy_qp(struct ibv_qp* qp) {
  IBV_INT_CHECK_RET_ERRNO(destroy_qp, destroy_qp(qp), 0, "ibv_destroy_qp");
}

static const char* qpStateName(enum ibv_qp_state s, char* buf, size_t len) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"};
  if ((unsigned)s < RAILNET_ARRAY_SIZE(names)) return names[s];
  snprintf(buf, len, "NOT RECOGNIZED (%d)", (int)s);
  return buf;
}

/* What NCCL prints about a QP whose modify failed: device:port, states, GID index and GIDs.
 * The attributes the caller passed win over those the QP reports. Never WARNs. */
static void modifyQpDescribe(struct ibv_qp* qp, const struct ibv_qp_attr* userAttr, int userMask, char* msg,
                             size_t len) {
  char curBuf[32], nextBuf[32], localGid[INET6_ADDRSTRLEN] = "N/A", remoteGid[INET6_ADDRSTRLEN] = "N/A";
  struct ibv_context* ctx = (qp && qp->pd) ? qp->pd->context : (qp ? qp->context : NULL);
  const char* dev = (ctx && ctx->device && railnetIbv.get_device_name) ? railnetIbv.get_device_name(ctx->device) : NULL;
  struct ibv_qp_attr queried;
  struct ibv_qp_init_attr initAttr;
  const struct ibv_qp_attr* known = NULL;
  if (qp && railnetIbv.query_qp && railnetIbv.query_qp(qp, &queried, IBV_QP_PORT | IBV_QP_AV, &initAttr) == 0)
    known = &queried;
  const struct ibv_qp_attr* portAttr = (userMask & IBV_QP_PORT) ? userAttr : known;
  const struct ibv_qp_attr* avAttr = (userMask & IBV_QP_AV) ? userAttr : known;
  int port = portAttr ? portAttr->port_num : (avAttr ? avAttr->ah_attr.port_num : -1);
  int gidIndex = -1;
  if (avAttr && avAttr->ah_attr.is_global) {
    union ibv_gid remote = avAttr->ah_attr.grh.dgid, local;
    if (ibvGetGidStr(&remote, remoteGid, sizeof(remoteGid)) == NULL) snprintf(remoteGid, sizeof(remoteGid), "N/A");
    gidIndex = avAttr->ah_attr.grh.sgid_index;
    if (ctx && railnetIbv.query_gid && port >= 0 && railnetIbv.query_gid(ctx, (uint8_t)port, gidIndex, &local) == 0 &&
        ibvGetGidStr(&local, localGid, sizeof(localGid)) == NULL)
      snprintf(localGid, sizeof(localGid), "N/A");
  }
  snprintf(msg, len, "on dev %s:%d, curr state %s, next state %s, local GID index %d, local GID %s, remote GID %s",
           dev ? dev : "N/A", port, qp ? qpStateName(qp->state, curBuf, sizeof(curBuf)) : "N/A",
           userAttr && (userMask & IBV_QP_STATE) ? qpStateName(userAttr->qp_state, nextBuf, sizeof(nextBuf)) : "N/A",
           gidIndex, localGid, remoteGid);
}

static void sleepMs(unsigned int ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int modifyQpShouldRetry(int err, int retryAll) { return retryAll ? err != 0 : err == ETIMEDOUT; }

int railnetIbvModifyQp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask, int retry) {
  if (railnetIbv.modify_qp == NULL) {
    WARN("lib wrapper not initialized: ibv_modify_qp is not loaded (libibverbs unavailable)");
    return ENOSYS;
  }
  char qpMsg[512];
  int retryAll = (int)railnetParamInt(&ibvParams[P_RETRY_ALL]);
  int maxAttempts = retry ? (int)railnetParamInt(&ibvParams[P_RETRY_CNT]) + 1 : 1;
  unsigned int sleepMsec = (unsigned int)railnetParamInt(&ibvParams[P_RETRY_SLEEP]);
  int err = 0, attempts = 0;
  do {
    if (attempts > 0) {
      unsigned int sleepTime = sleepMsec * (unsigned int)attempts;
      modifyQpDescribe(qp, attr, attr_mask, qpMsg, sizeof(qpMsg));
      INFO(NCCL_NET, "Call to ibv_modify_qp failed with %d %s, %s, retrying %d/%d after %u msec of sleep", err,
           strerror(err), qpMsg, attempts, maxAttempts, sleepTime);
      sleepMs(sleepTime);
    }
    errno = 0;
    int ret = railnetIbv.modify_qp(qp, attr, attr_mask);
    err = ret == 0 ? 0 : ibvRetErrno(ret);
    attempts++;
  } while (modifyQpShouldRetry(err, retryAll) && attempts < maxAttempts);
  if (err != 0) {
    modifyQpDescribe(qp, attr, attr_mask, qpMsg, sizeof(qpMsg));
    WARN("Call to ibv_modify_qp failed with %d %s, %s", err, strerror(err), qpMsg);
    railnetIbvModifyQpHint(err);
  }
  return err;
}

ncclResult_t wrap_ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask) {
  IBV_REQUIRE(modify_qp, "ibv_modify_qp");
  return railnetIbvModifyQp(qp, attr, attr_mask, 1) == 0 ? ncclSuccess : ncclSystemError;
}

ncclResult_t wrap_ibv_query_ece(struct ibv_qp* qp, struct ibv_ece* ece, int* supported) {
  IBV_INT_CHECK_RET_ERRNO_OPTIONAL(query_ece, query_ece(qp, ece), 0, "ibv_query_ece", supported);
}

ncclResult_t wrap_ibv_set_ece(struct ibv_qp* qp, struct ibv_ece* ece, int* supported) {
  IBV_INT_CHECK_RET_ERRNO_OPTIONAL(set_ece, set_ece(qp, ece), 0, "ibv_set_ece", supported);
}

ncclResult_t wrap_ibv_query_gid_table(struct ibv_context* context, struct ibv_gid_entry* entries,
                                      size_t max_entries, ssize_t* count, int* supported) {
  *count = 0;
  if (railnetIbv.query_gid_table == NULL) {
    INFO(NCCL_NET, "Call to ibv_query_gid_table skipped, not in this libibverbs");
    *supported = 0;
    return ncclSuccess;
  }
  errno = 0;
  ssize_t n = railnetIbv.query_gid_table(context, entries, max_entries, 0, sizeof(*entries));
  if (n >= 0) {
    *supported = 1;
    *count = n;
    return ncclSuccess;
  }
  int err = (n == -1 && errno != 0) ? errno : (int)-n;
  if (err == ENOTSUP || err == EOPNOTSUPP) {
    INFO(NCCL_NET, "Call to ibv_query_gid_table not supported");
    *supported = 0;
    return ncclSuccess;
  }
  *supported = 1;
  WARN("Call to ibv_query_gid_table failed with error %s errno %d", strerror(err), err);
  return ncclSystemError;
}

ncclResult_t wrap_ibv_event_type_str(const char** ret, enum ibv_event_type event) {
  IBV_REQUIRE(event_type_str, "ibv_event_type_str");
  *ret = railnetIbv.event_type_str(event);
  return ncclSuccess;
}

const char* wrap_ibv_wc_status_str(enum ibv_wc_status status) {
  const char* s = railnetIbv.wc_status_str ? railnetIbv.wc_status_str(status) : NULL;
  return s ? s : "unknown completion status";
}
