/*
 * ibvwrap: railnet's only door to libibverbs.
 *
 * rdma-core is loaded with dlopen ("libibverbs.so", then "libibverbs.so.1"; NCCL_IBVERBS_LIB
 * first when set) and every verb the IB transport uses is resolved into one table of
 * function pointers, with the symbol versions of rdma-core's ABI. The library never links
 * libibverbs: <infiniband/verbs.h> is included for its types and inline helpers only.
 *
 * Each wrap_ibv_* checks its call the way NCCL's wrappers do and WARNs with the name of the
 * call and strerror of the error ("Call to ibv_reg_mr failed with error Cannot allocate
 * memory"); callers that know the device or peer add that. wrap_ibv_modify_qp retries as
 * NCCL does and ends a failure with a HINT; registration and queue creation failures that
 * look like the locked-memory limit end with the memlock HINT.
 *
 * Tests inject a table of fakes with railnetIbvSetSymbols() (testing.h); the wrappers then
 * run their real checking code against those fakes.
 */
#ifndef RAILNET_IBVWRAP_H
#define RAILNET_IBVWRAP_H
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One pointer per verb. Fields are named without the ibv_ prefix: verbs.h defines
 * function-like macros for some verbs (ibv_reg_mr, ibv_query_port) that would otherwise
 * rewrite calls through the table. Optional verbs may be NULL. */
struct railnetIbvSymbols {
  /* required (IBVERBS_1.1, except the comp channel calls which exist only as IBVERBS_1.0) */
  struct ibv_device** (*get_device_list)(int* num_devices);
  void (*free_device_list)(struct ibv_device** list);
  const char* (*get_device_name)(struct ibv_device* device);
  struct ibv_context* (*open_device)(struct ibv_device* device);
  int (*close_device)(struct ibv_context* context);
  int (*get_async_event)(struct ibv_context* context, struct ibv_async_event* event);
  void (*ack_async_event)(struct ibv_async_event* event);
  int (*query_device)(struct ibv_context* context, struct ibv_device_attr* device_attr);
  int (*query_port)(struct ibv_context* context, uint8_t port_num, struct ibv_port_attr* port_attr);
  int (*query_gid)(struct ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid);
  int (*query_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask, struct ibv_qp_init_attr* init_attr);
  struct ibv_pd* (*alloc_pd)(struct ibv_context* context);
  int (*dealloc_pd)(struct ibv_pd* pd);
  struct ibv_mr* (*reg_mr)(struct ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(struct ibv_mr* mr);
  struct ibv_comp_channel* (*create_comp_channel)(struct ibv_context* context);
  int (*destroy_comp_channel)(struct ibv_comp_channel* channel);
  struct ibv_cq* (*create_cq)(struct ibv_context* context, int cqe, void* cq_context,
                              struct ibv_comp_channel* channel, int comp_vector);
  int (*destroy_cq)(struct ibv_cq* cq);
  struct ibv_qp* (*create_qp)(struct ibv_pd* pd, struct ibv_qp_init_attr* qp_init_attr);
  int (*modify_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask);
  int (*destroy_qp)(struct ibv_qp* qp);
  int (*fork_init)(void);
  const char* (*event_type_str)(enum ibv_event_type event);
  const char* (*wc_status_str)(enum ibv_wc_status status);
  /* optional: NULL turns the feature off */
  struct ibv_mr* (*reg_mr_iova2)(struct ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                 unsigned int access);                                  /* IBVERBS_1.8 */
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                  int fd, int access);                                  /* IBVERBS_1.12 */
  int (*query_ece)(struct ibv_qp* qp, struct ibv_ece* ece);                             /* IBVERBS_1.10 */
  int (*set_ece)(struct ibv_qp* qp, struct ibv_ece* ece);                               /* IBVERBS_1.10 */
  int (*query_gid_ex)(struct ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      struct ibv_gid_entry* entry, uint32_t flags, size_t entry_size);  /* IBVERBS_1.11 */
  ssize_t (*query_gid_table)(struct ibv_context* context, struct ibv_gid_entry* entries,
                             size_t max_entries, uint32_t flags, size_t entry_size);    /* IBVERBS_1.11 */
  int (*query_port_speed)(struct ibv_context* context, uint32_t port_num, uint64_t* speed); /* IBVERBS_1.16 */
};

/* The table the wrappers call through (all NULL until wrap_ibv_symbols succeeds). */
extern struct railnetIbvSymbols railnetIbv;

/* Load libibverbs once per process (thread-safe). ncclSuccess when every required verb was
 * found; otherwise ncclSystemError after one INFO (no library: install rdma-core) or one
 * WARN (a library without the verbs railnet needs). The answer is remembered. */
ncclResult_t wrap_ibv_symbols(void);

/* Fill *table from a fresh dlopen, without touching the process-wide table (the loader
 * behind wrap_ibv_symbols; tests call it directly). */
ncclResult_t railnetIbvLoadSymbols(struct railnetIbvSymbols* table);

/* ---- wrappers: ncclSuccess, or ncclSystemError after a WARN naming the call */
ncclResult_t wrap_ibv_fork_init(void);
ncclResult_t wrap_ibv_get_device_list(struct ibv_device*** ret, int* num_devices);
ncclResult_t wrap_ibv_free_device_list(struct ibv_device** list);
const char* wrap_ibv_get_device_name(struct ibv_device* device);
ncclResult_t wrap_ibv_open_device(struct ibv_context** ret, struct ibv_device* device);
ncclResult_t wrap_ibv_close_device(struct ibv_context* context);
ncclResult_t wrap_ibv_get_async_event(struct ibv_context* context, struct ibv_async_event* event);
ncclResult_t wrap_ibv_ack_async_event(struct ibv_async_event* event);
ncclResult_t wrap_ibv_query_device(struct ibv_context* context, struct ibv_device_attr* device_attr);
ncclResult_t wrap_ibv_query_port(struct ibv_context* context, uint8_t port_num, struct ibv_port_attr* port_attr);
/* The port's speed in units of 100 Mb/s (NCCL_IB_QUERY_PORT_SPEED=1 and libibverbs with the
 * verb); ncclSystemError without a WARN otherwise, the caller then computes it. */
ncclResult_t wrap_ibv_query_port_speed(struct ibv_context* context, uint8_t port_num, uint64_t* speed);
ncclResult_t wrap_ibv_query_gid(struct ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid);
ncclResult_t wrap_ibv_query_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask,
                               struct ibv_qp_init_attr* init_attr);
ncclResult_t wrap_ibv_alloc_pd(struct ibv_pd** ret, struct ibv_context* context);
ncclResult_t wrap_ibv_dealloc_pd(struct ibv_pd* pd);
ncclResult_t wrap_ibv_reg_mr(struct ibv_mr** ret, struct ibv_pd* pd, void* addr, size_t length, int access);
/* ncclInternalError when the verb is absent; ret == NULL only asks whether it is present. */
ncclResult_t wrap_ibv_reg_mr_iova2(struct ibv_mr** ret, struct ibv_pd* pd, void* addr, size_t length,
                                   uint64_t iova, int access);
ncclResult_t wrap_ibv_reg_dmabuf_mr(struct ibv_mr** ret, struct ibv_pd* pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access);
/* The raw call, no WARN; when the verb is absent: NULL with errno = EOPNOTSUPP. */
struct ibv_mr* wrap_direct_ibv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                             int fd, int access);
ncclResult_t wrap_ibv_dereg_mr(struct ibv_mr* mr);
ncclResult_t wrap_ibv_create_cq(struct ibv_cq** ret, struct ibv_context* context, int cqe, void* cq_context,
                                struct ibv_comp_channel* channel, int comp_vector);
ncclResult_t wrap_ibv_destroy_cq(struct ibv_cq* cq);
ncclResult_t wrap_ibv_create_qp(struct ibv_qp** ret, struct ibv_pd* pd, struct ibv_qp_init_attr* qp_init_attr);
/* Retries ETIMEDOUT (any error with NCCL_IB_MQP_RETRY_ALL=1) up to NCCL_IB_MQP_RETRY_CNT times,
 * sleeping NCCL_IB_MQP_RETRY_SLEEP_MSEC x attempt; a final failure WARNs with the QP's
 * device, states and GIDs, then the HINT for the error. */
ncclResult_t wrap_ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask);
/* The same with the errno: 0, or the error of the last try (after the same WARN and HINT);
 * retry 0 tries once (a probe that classifies the error itself and must stay bounded). */
int railnetIbvModifyQp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask, int retry);
ncclResult_t wrap_ibv_destroy_qp(struct ibv_qp* qp);
/* Optional verbs: *supported = 0 (and ncclSuccess) when absent or ENOTSUP/EOPNOTSUPP. */
ncclResult_t wrap_ibv_query_ece(struct ibv_qp* qp, struct ibv_ece* ece, int* supported);
ncclResult_t wrap_ibv_set_ece(struct ibv_qp* qp, struct ibv_ece* ece, int* supported);
/* *count = entries written (ret >= 0); *supported = 0 when the verb is absent or unsupported. */
ncclResult_t wrap_ibv_query_gid_table(struct ibv_context* context, struct ibv_gid_entry* entries,
                                      size_t max_entries, ssize_t* count, int* supported);
ncclResult_t wrap_ibv_event_type_str(const char** ret, enum ibv_event_type event);
/* "IBV_WC_..." style text of a completion status; never NULL. */
const char* wrap_ibv_wc_status_str(enum ibv_wc_status status);

/* The memlock HINT for a call that failed with err (ENOMEM/EAGAIN style only; no-op else). */
void railnetIbvMemlockHint(const char* call, int err);
/* The HINT lines for a failed ibv_modify_qp (EINVAL/ENODATA: GID index; ETIMEDOUT: rail). */
void railnetIbvModifyQpHint(int err);

/* Data path: these are inline in verbs.h too (through the context's ops), no symbol needed. */
static inline ncclResult_t wrap_ibv_poll_cq(struct ibv_cq* cq, int num_entries, struct ibv_wc* wc, int* num_done) {
  int done = cq->context->ops.poll_cq(cq, num_entries, wc);
  if (done < 0) {
    WARN("Call to ibv_poll_cq() returned %d", done);
    return ncclSystemError;
  }
  *num_done = done;
  return ncclSuccess;
}

static inline ncclResult_t wrap_ibv_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr) {
  int ret = qp->context->ops.post_send(qp, wr, bad_wr);
  if (ret != 0) {
    WARN("ibv_post_send() failed with error %s, Bad WR %p, First WR %p", strerror(ret), (void*)wr, (void*)*bad_wr);
    return ncclSystemError;
  }
  return ncclSuccess;
}

static inline ncclResult_t wrap_ibv_post_recv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr) {
  int ret = qp->context->ops.post_recv(qp, wr, bad_wr);
  if (ret != 0) {
    WARN("ibv_post_recv() failed with error %s", strerror(ret));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* A GID as text (inet_ntop of its 16 bytes); NULL with errno set when it does not fit. */
static inline const char* ibvGetGidStr(const union ibv_gid* gid, char* str, size_t len) {
  return inet_ntop(AF_INET6, gid->raw, str, (socklen_t)len);
}

#ifdef __cplusplus
}
#endif
#endif
