/*
 * railnet: the network events a net plugin reports to NCCL's profiler plugins (NCCL 2.30's
 * profiler ABI, written from its documentation). A plugin starts an event with the
 * callback NCCL gave to init(), under the phandle NCCL passed to isend/irecv, with a plugin
 * id that says which transport sent it (high bits) and which descriptor version follows
 * (low NCCL_PROFILER_NET_VER_BITS bits); it stops the event with the handle it got back.
 */
#ifndef RAILNET_NET_PROFILER_NET_H_
#define RAILNET_NET_PROFILER_NET_H_
#include <stddef.h>
#include <stdint.h>

#define NCCL_PROFILER_NET_VER_BITS (16)
#define NCCL_PROFILER_NET_VER_MASK (~0U >> NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_MASK (~0U << NCCL_PROFILER_NET_VER_BITS)

typedef enum {
  NCCL_PROFILER_NET_TYPE_IB = (1U << NCCL_PROFILER_NET_VER_BITS),
  NCCL_PROFILER_NET_TYPE_SOCK = (2U << NCCL_PROFILER_NET_VER_BITS),
} ncclProfilerNetType;

/* IB: one event per work request posted on a QP. */
#define NCCL_PROFILER_NET_IB_VER 1
enum { ncclProfileQp = (1 << 0) };
typedef struct {
  uint8_t type; /* ncclProfileQp */
  union {
    struct {
      int device;     /* the IB device of the QP (index in the plugin's device list) */
      uint64_t wr_id; /* the work request's id */
      int opcode;     /* its ibv_wr_opcode (IBV_WR_RDMA_WRITE, ...) or IBV_WC_RECV for a receive */
      int qpNum;      /* the QP's number */
      size_t length;  /* bytes the work request moves */
    } qp;
  };
} ncclProfilerNetIbDescr_v1_t;

/* Socket: one event per operation on one socket (a chunk on a data socket, or what a
 * message carries on the control socket). */
#define NCCL_PROFILER_NET_SOCKET_VER 1
enum { ncclProfileSocket = (1 << 0) };
typedef struct {
  uint8_t type; /* ncclProfileSocket */
  union {
    struct {
      int fd;        /* the socket */
      int op;        /* NCCL_SOCKET_SEND (0) or NCCL_SOCKET_RECV (1) */
      size_t length; /* bytes of the operation */
    } sock;
  };
} ncclProfilerNetSockDescr_v1_t;

#endif
