/* The RDMA probes of `railnet-diag --pair` (pairprobe.h), on ibvwrap: the ports x GIDs of
 * interest, and one side of an RC QP pair with a registered buffer, brought up step by step
 * (each failure keeps its step and errno, and ibvwrap's HINT is logged), then RDMA write and
 * read of a pattern within a deadline. The raw verbs are called through ibvwrap's table
 * where the errno must be classified (ibv_modify_qp's wrapper retries ETIMEDOUT for seconds). */
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include "ib_explain.h"
#include "ibvqp.h"
#include "ibvwrap.h"
#include "pairprobe.h"
#include "param.h"
#include "socket.h"

struct railnetPairRdmaSide {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t* buf; /* [peer writes here | source | read back], bufBytes each */
  uint32_t bufBytes;
  railnetPairRdmaEntry e;
  uint32_t psn;
  enum ibv_mtu mtu;
};


static void addEntry(railnetPairRdmaEntry* out, int max, int* n, const char* dev, int port,
                     const struct ibv_port_attr* a, int index, const union ibv_gid* gid, int roceVer, int flags) {
  if (*n >= max) return;
  railnetPairRdmaEntry* e = &out[(*n)++];
  memset(e, 0, sizeof(*e));
  snprintf(e->dev, sizeof(e->dev), "%s", dev);
  e->port = (uint8_t)port;
  e->linkLayer = a->link_layer;
  e->roceVer = (uint8_t)roceVer;
  e->isAuto = (uint8_t)flags;
  e->gidIndex = index;
  e->mtu = 128u << a->active_mtu;
  if (gid) memcpy(e->gid, gid->raw, 16);
}

static int gidEmpty(const uint8_t* g) {
  static const uint8_t zero[16];
  return memcmp(g, zero, 16) == 0;
}

/* The entries of one active port: the chosen index, then every other non-empty RoCE entry. */
static void portEntries(struct ibv_context* ctx, const char* dev, int port, const struct ibv_port_attr* a,
                        railnetPairRdmaEntry* out, int max, int* n) {
  int chosen = railnetIbExplainGidIndex(ctx, dev, port, a);
  int flags = RAILNET_PAIR_GID_CHOSEN | (railnetParamIntByName("NCCL_IB_GID_INDEX") >= 0 ? RAILNET_PAIR_GID_FORCED : 0);
  struct ibv_gid_entry tbl[512];
  ssize_t cnt = 0;
  int supported = 0;
  if (a->link_layer == IBV_LINK_LAYER_ETHERNET &&
      (wrap_ibv_query_gid_table(ctx, tbl, RAILNET_ARRAY_SIZE(tbl), &cnt, &supported) != ncclSuccess || !supported))
    cnt = 0;
  int chosenVer = 0;
  union ibv_gid g;
  memset(&g, 0, sizeof(g));
  for (ssize_t i = 0; i < cnt; i++)
    if (tbl[i].port_num == (uint32_t)port && (int)tbl[i].gid_index == chosen)
      chosenVer = tbl[i].gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1, g = tbl[i].gid;
  if (chosenVer == 0 && chosen >= 0 && railnetIbv.query_gid) railnetIbv.query_gid(ctx, (uint8_t)port, chosen, &g);
  if (chosen >= 0) addEntry(out, max, n, dev, port, a, chosen, &g, chosenVer, flags);
  for (ssize_t i = 0; i < cnt; i++) {
    if (tbl[i].port_num != (uint32_t)port || (int)tbl[i].gid_index == chosen || gidEmpty(tbl[i].gid.raw)) continue;
    if (tbl[i].gid_type != IBV_GID_TYPE_ROCE_V2 && tbl[i].gid_type != IBV_GID_TYPE_ROCE_V1) continue;
    addEntry(out, max, n, dev, port, a, (int)tbl[i].gid_index, &tbl[i].gid,
             tbl[i].gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1, 0);
  }
}

ncclResult_t railnetPairRdmaList(railnetPairRdmaEntry* out, int max, int* n, char* why, size_t whySize) {
  *n = 0;
  snprintf(why, whySize, "%s", "");
  if (wrap_ibv_symbols() != ncclSuccess) {
    snprintf(why, whySize, "libibverbs not found (install rdma-core): TCP only");
    return ncclSuccess;
  }
  struct ibv_device** list = NULL;
  int nDev = 0;
  if (wrap_ibv_get_device_list(&list, &nDev) != ncclSuccess || list == NULL || nDev == 0) {
    snprintf(why, whySize, "no RDMA device: TCP only");
    if (list) wrap_ibv_free_device_list(list);
    return ncclSuccess;
  }
  for (int d = 0; d < nDev; d++) {
    const char* dev = wrap_ibv_get_device_name(list[d]);
    struct ibv_context* ctx = NULL;
    struct ibv_device_attr da;
    if (wrap_ibv_open_device(&ctx, list[d]) != ncclSuccess || ctx == NULL) continue;
    if (wrap_ibv_query_device(ctx, &da) == ncclSuccess) {
      for (int p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr a;
        memset(&a, 0, sizeof(a));
        if (wrap_ibv_query_port(ctx, (uint8_t)p, &a) != ncclSuccess || a.state != IBV_PORT_ACTIVE) continue;
        if (!railnetIbExplainPortUsed(dev, p, &a)) continue;
        portEntries(ctx, dev, p, &a, out, max, n);
      }
    }
    wrap_ibv_close_device(ctx);
  }
  wrap_ibv_free_device_list(list);
  if (*n == 0) snprintf(why, whySize, "no active RDMA port%s: TCP only", railnetParamRaw("NCCL_IB_HCA", NULL) ? " allowed by NCCL_IB_HCA" : "");
  return ncclSuccess;
}

/* ---------------------------------------------------------------- one side of a path */

static struct ibv_context* openByName(const char* name) {
  struct ibv_device** list = NULL;
  int nDev = 0;
  struct ibv_context* ctx = NULL;
  if (wrap_ibv_get_device_list(&list, &nDev) != ncclSuccess || list == NULL) return NULL;
  for (int d = 0; d < nDev && ctx == NULL; d++)
    if (strcmp(wrap_ibv_get_device_name(list[d]), name) == 0 && wrap_ibv_open_device(&ctx, list[d]) != ncclSuccess)
      ctx = NULL;
  wrap_ibv_free_device_list(list);
  return ctx;
}

/* Device, PD, buffer, CQ, QP; 0 or the errno with *step set. */
static int sideResources(struct railnetPairRdmaSide* s, int* step) {
  *step = RAILNET_PAIR_RDMA_OPEN;
  if ((s->ctx = openByName(s->e.dev)) == NULL) return ENODEV;
  if (wrap_ibv_alloc_pd(&s->pd, s->ctx) != ncclSuccess) return ENOMEM;
  *step = RAILNET_PAIR_RDMA_REG;
  size_t len = (size_t)s->bufBytes * 3;
  if ((s->buf = (uint8_t*)aligned_alloc(4096, len)) == NULL) return ENOMEM;
  memset(s->buf, 0, len);
  errno = 0;
  /* raw (the errno is the probe's result; the hint below is the only log line) */
  s->mr = railnetIbv.reg_mr ? railnetIbv.reg_mr(s->pd, s->buf, len,
                                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
                            : NULL;
  if (s->mr == NULL) {
    int e = errno ? errno : ENOMEM;
    railnetIbvMemlockHint("ibv_reg_mr", e);
    return e;
  }
  *step = RAILNET_PAIR_RDMA_CREATE;
  errno = 0;
  if ((s->cq = railnetIbv.create_cq(s->ctx, 16, NULL, NULL, 0)) == NULL) {
    int e = errno ? errno : ENOMEM;
    railnetIbvMemlockHint("ibv_create_cq", e);
    return e;
  }
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof(qa));
  qa.send_cq = qa.recv_cq = s->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  errno = 0;
  if ((s->qp = railnetIbv.create_qp(s->pd, &qa)) == NULL) {
    int e = errno ? errno : ENOMEM;
    railnetIbvMemlockHint("ibv_create_qp", e);
    return e;
  }
  return 0;
}

void railnetPairRdmaOpen(const railnetPairRdmaEntry* e, uint32_t bufBytes, struct railnetPairRdmaSide** out,
                         railnetPairRdmaQp* q) {
  memset(q, 0, sizeof(*q));
  *out = NULL;
  struct railnetPairRdmaSide* s = (struct railnetPairRdmaSide*)calloc(1, sizeof(*s));
  int step = RAILNET_PAIR_RDMA_OPEN, err = ENOMEM;
  if (s) {
    s->e = *e;
    s->bufBytes = bufBytes;
    err = sideResources(s, &step);
  }
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  if (err == 0) {
    step = RAILNET_PAIR_RDMA_INIT;
    err = railnetIbvQpInit(s->qp, e->port, 0, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0);
    if (err == 0 && wrap_ibv_query_port(s->ctx, e->port, &pa) != ncclSuccess) err = EIO;
  }
  if (err) {
    q->step = (uint8_t)step;
    q->err = err;
    railnetPairRdmaClose(s);
    return;
  }
  s->psn = (uint32_t)(railnetClockNs() ^ (uintptr_t)s) & 0xffffff;
  s->mtu = pa.active_mtu;
  q->qpn = s->qp->qp_num;
  q->psn = s->psn;
  q->addr = (uint64_t)(uintptr_t)s->buf;
  q->rkey = s->mr->rkey;
  q->len = bufBytes;
  q->mtu = (uint32_t)pa.active_mtu;
  q->lid = pa.lid;
  memcpy(q->gid, e->gid, 16);
  *out = s;
}

int railnetPairRdmaConnect(struct railnetPairRdmaSide* s, const railnetPairRdmaQp* peer, int* step) {
  struct railnetIbvQpPath p;
  memset(&p, 0, sizeof(p));
  p.port = s->e.port;
  p.mtu = (enum ibv_mtu)(peer->mtu && peer->mtu < (uint32_t)s->mtu ? peer->mtu : (uint32_t)s->mtu);
  p.remoteQpn = peer->qpn;
  p.remotePsn = peer->psn;
  p.localPsn = s->psn;
  p.remoteLid = peer->lid;
  p.global = s->e.linkLayer == IBV_LINK_LAYER_ETHERNET || !gidEmpty(peer->gid);
  memcpy(p.remoteGid.raw, peer->gid, 16);
  p.gidIndex = (uint8_t)s->e.gidIndex;
  /* a probe answers within seconds: 4.096 us x 2^16 = 268 ms per try, 5 tries (1.3 s, inside
   * PAIR_RDMA_MS; 67 ms x 4 failed healthy 1 MiB reads on a busy emulated soft-RoCE), no
   * waiting for a receiver that is not ready, one ibv_modify_qp each (its errno is the result) */
  p.timeout = 16;
  p.retryCnt = 4;
  p.rnrRetry = 3;
  p.retryModify = 0;
  enum ibv_qp_state failed = IBV_QPS_RTR;
  int e = railnetIbvQpConnect(s->qp, &p, &failed);
  *step = e == 0 ? RAILNET_PAIR_RDMA_OK : failed == IBV_QPS_RTR ? RAILNET_PAIR_RDMA_RTR : RAILNET_PAIR_RDMA_RTS;
  return e;
}

/* One signalled RDMA op and its completion by the deadline; 0, or an errno with r->why. */
static int rdmaOp(struct railnetPairRdmaSide* s, enum ibv_wr_opcode op, uint8_t* local, const railnetPairRdmaQp* peer,
                  uint32_t bytes, uint64_t deadline, railnetPairRdmaResult* r) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)local, bytes, s->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peer->addr;
  wr.wr.rdma.rkey = peer->rkey;
  int ret = s->qp->context->ops.post_send(s->qp, &wr, &bad);
  if (ret) {
    snprintf(r->why, sizeof(r->why), "ibv_post_send: %s", strerror(ret));
    return ret;
  }
  for (;;) {
    struct ibv_wc wc;
    int done = 0;
    if (wrap_ibv_poll_cq(s->cq, 1, &wc, &done) != ncclSuccess) {
      snprintf(r->why, sizeof(r->why), "ibv_poll_cq failed");
      return EIO;
    }
    if (done == 1) {
      if (wc.status == IBV_WC_SUCCESS) return 0;
      snprintf(r->why, sizeof(r->why), "completion %s", wrap_ibv_wc_status_str(wc.status));
      return wc.status == IBV_WC_RETRY_EXC_ERR ? ETIMEDOUT
             : wc.status == IBV_WC_REM_ACCESS_ERR ? EACCES
                                                  : EIO;
    }
    if (railnetClockNs() >= deadline) {
      snprintf(r->why, sizeof(r->why), "no completion by the deadline");
      return ETIMEDOUT;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

void railnetPairRdmaWriteRead(struct railnetPairRdmaSide* s, const railnetPairRdmaQp* peer, uint32_t bytes,
                              int timeoutMs, railnetPairRdmaResult* r) {
  uint64_t start = railnetClockNs(), deadline = start + (uint64_t)timeoutMs * 1000000ull;
  memset(r, 0, sizeof(*r));
  r->id = peer->id;
  r->bytes = bytes;
  if (bytes > s->bufBytes || bytes > peer->len) {
    r->step = RAILNET_PAIR_RDMA_WRITE, r->err = EMSGSIZE;
    snprintf(r->why, sizeof(r->why), "%u bytes do not fit the buffers", bytes);
    return;
  }
  uint8_t* src = s->buf + s->bufBytes;
  uint8_t* back = s->buf + 2 * (size_t)s->bufBytes;
  for (uint32_t i = 0; i < bytes; i++) src[i] = (uint8_t)(i * 7u + peer->qpn + bytes);
  memset(back, 0, bytes);
  r->step = RAILNET_PAIR_RDMA_WRITE;
  if ((r->err = rdmaOp(s, IBV_WR_RDMA_WRITE, src, peer, bytes, deadline, r)) == 0) {
    r->step = RAILNET_PAIR_RDMA_READ;
    if ((r->err = rdmaOp(s, IBV_WR_RDMA_READ, back, peer, bytes, deadline, r)) == 0) {
      r->step = memcmp(src, back, bytes) ? RAILNET_PAIR_RDMA_VERIFY : RAILNET_PAIR_RDMA_OK;
      if (r->step) r->err = EIO, snprintf(r->why, sizeof(r->why), "the bytes read back differ");
    }
  }
  r->usec = (uint32_t)((railnetClockNs() - start) / 1000);
}

void railnetPairRdmaClose(struct railnetPairRdmaSide* s) {
  if (s == NULL) return;
  if (s->qp) railnetIbv.destroy_qp(s->qp);
  if (s->cq) railnetIbv.destroy_cq(s->cq);
  if (s->mr) railnetIbv.dereg_mr(s->mr);
  if (s->pd) railnetIbv.dealloc_pd(s->pd);
  if (s->ctx) railnetIbv.close_device(s->ctx);
  free(s->buf);
  free(s);
}

const char* railnetPairRdmaHint(int step, int err) {
  if ((err == ENOMEM || err == EAGAIN) && step >= RAILNET_PAIR_RDMA_REG && step <= RAILNET_PAIR_RDMA_CREATE)
    return "memlock: RDMA pins what it registers; add '* soft memlock unlimited' and '* hard memlock unlimited' to "
           "/etc/security/limits.conf and log in again (containers: --ulimit memlock=-1:-1)";
  if ((err == EINVAL || err == ENODATA) && (step == RAILNET_PAIR_RDMA_RTR || step == RAILNET_PAIR_RDMA_INIT))
    return "GID: the GID index names an empty or unusable slot; unset NCCL_IB_GID_INDEX (automatic choice) or "
           "use an index that works in the table above";
  if (err == ETIMEDOUT && (step == RAILNET_PAIR_RDMA_RTR || step == RAILNET_PAIR_RDMA_RTS))
    return "rail/route: the two ports are not connected to each other (cross-rail?); check the cabling, or set "
           "NCCL_CROSS_NIC=0";
  if (err == ETIMEDOUT && (step == RAILNET_PAIR_RDMA_WRITE || step == RAILNET_PAIR_RDMA_READ))
    return "firewall/ACL: the QPs came up but no RoCE packet got an answer; UDP port 4791 (RoCE v2) is dropped on "
           "the path (nftables/iptables, security group, switch ACL) or the fabric loses it (PFC/ECN, VLAN); allow "
           "UDP 4791 between these addresses. rail/route: or the two ports cannot reach each other (different rails "
           "or subnets without a route between them): check the cabling and routing, or keep NCCL on one rail with "
           "NCCL_CROSS_NIC=0";
  if (err == EACCES) return "remote access refused: the peer's buffer key or access flags";
  if (step == RAILNET_PAIR_RDMA_OPEN)
    return "cannot open the device: check /dev/infiniband permissions and rdma-core (ibv_devinfo)";
  return "run again with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET for the verbs' messages";
}
