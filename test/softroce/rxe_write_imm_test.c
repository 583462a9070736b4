/*
 * rxe_write_imm_test: proof that the soft-RoCE tier carries real RDMA traffic, written
 * before railnet has any IB code. It opens two RDMA devices ($SOFTROCE_DEVS, else the
 * first two with an active port 1; one device is used as both ends if there is only
 * one), connects an RC QP on each to the other and does RDMA WRITE WITH IMMEDIATE both
 * ways, checking the bytes that arrived, the bytes around them, the immediate data, both
 * completions and, when the two ends sit on different netdevs, that the payload crossed
 * the wire (the sender's tx_bytes and the receiver's rx_bytes counters grew).
 * The output is GoogleTest's, so the tier counts its tests like any gtest binary's;
 * --gtest_list_tests and --gtest_filter=PATTERN[:PATTERN] work, other flags are ignored.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PORT 1
#define BUF_SIZE (1u << 20)
#define GUARD 0xEE
#define POLL_TIMEOUT_MS 30000 /* emulated CPUs are slow; a lost packet retries for seconds */

struct end {
  const char *name;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  uint8_t *buf;
  struct ibv_port_attr port;
  int gid_index;
  union ibv_gid gid;
  uint32_t gid_type;
  char netdev[IF_NAMESIZE];
};

static struct end ends[2];
static int ends_ready;       /* both ends opened and their QPs connected */
static char setup_error[512];
static int test_failed;

static void fail_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  printf("%s:%d: Failure\n", file, line);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  test_failed = 1;
}
#define FAIL(...) fail_at(__FILE__, __LINE__, __VA_ARGS__)
/* CHECK: on failure, report and leave the current test (returns from the function). */
#define CHECK(cond, ...)                \
  do {                                  \
    if (!(cond)) {                      \
      FAIL("Expected: " #cond "\n  " __VA_ARGS__); \
      return;                           \
    }                                   \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *gid_type_name(uint32_t t) {
  return t == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : t == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : "IB";
}

static void gid_str(const union ibv_gid *gid, char *s, size_t n) {
  inet_ntop(AF_INET6, gid->raw, s, n);
}

static int gid_is_ipv4(const union ibv_gid *g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

/* The GID index to use: word `which` of $SOFTROCE_GID_INDEXES, else the first RoCE v2
 * entry holding an IPv4 address, else the first RoCE v2 entry, else 0. */
static int choose_gid(struct end *e, int which, char *err, size_t errlen) {
  const char *env = getenv("SOFTROCE_GID_INDEXES");
  struct ibv_gid_entry ent;
  int want = -1, v2 = -1, i;
  if (env && *env) {
    const char *p = env;
    for (i = 0; i < which && p; i++) {
      p = strchr(p, ' ');
      if (p) p++;
    }
    if (p && *p) want = atoi(p);
  }
  if (want < 0 && e->port.link_layer != IBV_LINK_LAYER_ETHERNET) want = 0;
  for (i = 0; want < 0 && i < e->port.gid_tbl_len && i < 16; i++) {
    if (ibv_query_gid_ex(e->ctx, PORT, i, &ent, 0) != 0) continue; /* empty slot */
    if (ent.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    if (gid_is_ipv4(&ent.gid)) want = i;
    else if (v2 < 0) v2 = i;
  }
  if (want < 0) want = v2 >= 0 ? v2 : 0;
  if (ibv_query_gid_ex(e->ctx, PORT, want, &ent, 0) != 0) {
    snprintf(err, errlen, "%s: ibv_query_gid_ex(port %d, index %d): %s", e->name, PORT, want,
             strerror(errno));
    return -1;
  }
  e->gid_index = want;
  e->gid = ent.gid;
  e->gid_type = ent.gid_type;
  if (ent.ndev_ifindex == 0 || !if_indextoname(ent.ndev_ifindex, e->netdev)) e->netdev[0] = 0;
  return 0;
}

static int open_end(struct end *e, struct ibv_device *dev, int which, char *err, size_t n) {
  struct ibv_qp_init_attr qa;
  e->name = ibv_get_device_name(dev);
  if (!(e->ctx = ibv_open_device(dev))) {
    snprintf(err, n, "%s: ibv_open_device: %s", e->name, strerror(errno));
    return -1;
  }
  if (ibv_query_port(e->ctx, PORT, &e->port)) {
    snprintf(err, n, "%s: ibv_query_port(%d): %s", e->name, PORT, strerror(errno));
    return -1;
  }
  if (choose_gid(e, which, err, n)) return -1;
  if (!(e->pd = ibv_alloc_pd(e->ctx))) {
    snprintf(err, n, "%s: ibv_alloc_pd: %s", e->name, strerror(errno));
    return -1;
  }
  if (!(e->cq = ibv_create_cq(e->ctx, 256, NULL, NULL, 0))) {
    snprintf(err, n, "%s: ibv_create_cq: %s", e->name, strerror(errno));
    return -1;
  }
  if (posix_memalign((void **)&e->buf, 4096, BUF_SIZE)) {
    snprintf(err, n, "%s: out of memory", e->name);
    return -1;
  }
  memset(e->buf, GUARD, BUF_SIZE);
  e->mr = ibv_reg_mr(e->pd, e->buf, BUF_SIZE,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!e->mr) {
    snprintf(err, n, "%s: ibv_reg_mr(%u bytes): %s", e->name, BUF_SIZE, strerror(errno));
    return -1;
  }
  memset(&qa, 0, sizeof(qa));
  qa.send_cq = qa.recv_cq = e->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 64;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (!(e->qp = ibv_create_qp(e->pd, &qa))) {
    snprintf(err, n, "%s: ibv_create_qp(RC): %s", e->name, strerror(errno));
    return -1;
  }
  return 0;
}

/* INIT -> RTR -> RTS for e's QP, pointed at peer's QP. */
static int connect_qp(struct end *e, const struct end *peer, char *err, size_t n) {
  struct ibv_qp_attr a;
  int rc;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = PORT;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  rc = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) {
    snprintf(err, n, "%s: ibv_modify_qp(INIT): %s", e->name, strerror(rc));
    return -1;
  }
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = e->port.active_mtu < peer->port.active_mtu ? e->port.active_mtu : peer->port.active_mtu;
  a.dest_qp_num = peer->qp->qp_num;
  a.rq_psn = 0x1000 + peer->qp->qp_num % 4096;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = PORT;
  a.ah_attr.dlid = peer->port.lid;
  if (e->port.link_layer == IBV_LINK_LAYER_ETHERNET || peer->port.lid == 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer->gid;
    a.ah_attr.grh.sgid_index = e->gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  rc = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc) {
    snprintf(err, n, "%s: ibv_modify_qp(RTR, sgid_index %d): %s", e->name, e->gid_index, strerror(rc));
    return -1;
  }
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0x1000 + e->qp->qp_num % 4096;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  rc = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) {
    snprintf(err, n, "%s: ibv_modify_qp(RTS): %s", e->name, strerror(rc));
    return -1;
  }
  return 0;
}

/* Picks the devices and connects both ends; on failure leaves the reason in setup_error. */
static void setup(void) {
  struct ibv_device **list;
  struct ibv_device *pick[2] = {NULL, NULL};
  const char *want = getenv("SOFTROCE_DEVS");
  char names[2][64] = {"", ""};
  int n = 0, i, j;

  list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    snprintf(setup_error, sizeof(setup_error), "no RDMA device (ibv_get_device_list: %s)",
             list ? "empty" : strerror(errno));
    return;
  }
  if (want && *want) {
    if (sscanf(want, "%63s %63s", names[0], names[1]) < 2) strcpy(names[1], names[0]);
    for (j = 0; j < 2; j++)
      for (i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), names[j]) == 0) pick[j] = list[i];
    for (j = 0; j < 2; j++)
      if (!pick[j]) {
        snprintf(setup_error, sizeof(setup_error), "SOFTROCE_DEVS names %s, which is not an RDMA device here",
                 names[j]);
        goto out;
      }
  } else {
    for (i = 0, j = 0; i < n && j < 2; i++) {
      struct ibv_context *c = ibv_open_device(list[i]);
      struct ibv_port_attr pa;
      if (!c) continue;
      if (ibv_query_port(c, PORT, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) pick[j++] = list[i];
      ibv_close_device(c);
    }
    if (j == 0) {
      snprintf(setup_error, sizeof(setup_error), "no RDMA device with an active port %d", PORT);
      goto out;
    }
    if (j == 1) pick[1] = pick[0];
  }
  for (j = 0; j < 2; j++)
    if (open_end(&ends[j], pick[j], j, setup_error, sizeof(setup_error))) goto out;
  if (connect_qp(&ends[0], &ends[1], setup_error, sizeof(setup_error)) ||
      connect_qp(&ends[1], &ends[0], setup_error, sizeof(setup_error)))
    goto out;
  ends_ready = 1;
out:
  ibv_free_device_list(list);
}

static void teardown(void) {
  for (int j = 0; j < 2; j++) {
    struct end *e = &ends[j];
    if (e->qp) ibv_destroy_qp(e->qp);
    if (e->mr) ibv_dereg_mr(e->mr);
    if (e->cq) ibv_destroy_cq(e->cq);
    if (e->pd) ibv_dealloc_pd(e->pd);
    if (e->ctx) ibv_close_device(e->ctx);
    free(e->buf);
  }
}

/* Waits for one completion on cq; returns 0, or -1 after POLL_TIMEOUT_MS. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  double end = now_ms() + POLL_TIMEOUT_MS;
  int n;
  while ((n = ibv_poll_cq(cq, 1, wc)) == 0)
    if (now_ms() > end) return -1;
  return n == 1 ? 0 : -1;
}

static uint8_t pattern(size_t i, unsigned seed) {
  return (uint8_t)(i * 131u + (i >> 9) + seed * 29u + 1u);
}

static long long net_counter(const char *netdev, const char *what) {
  char path[128];
  long long v = -1;
  FILE *f;
  if (!netdev[0]) return -1;
  snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s", netdev, what);
  if (!(f = fopen(path, "r"))) return -1;
  if (fscanf(f, "%lld", &v) != 1) v = -1;
  fclose(f);
  return v;
}

/* The two ends use different netdevs whose counters we can read. */
static int counters_usable(const struct end *a, const struct end *b) {
  return a->netdev[0] && b->netdev[0] && strcmp(a->netdev, b->netdev) != 0 &&
         net_counter(a->netdev, "tx_bytes") >= 0 && net_counter(b->netdev, "rx_bytes") >= 0;
}

/* `count` RDMA writes with immediate of `len` bytes each, src -> dst, back to back at
 * consecutive offsets of dst's buffer (after a guard page); checks everything. */
static void write_imm(struct end *src, struct end *dst, size_t len, int count, unsigned seed) {
  const size_t off = 4096;
  struct ibv_recv_wr rwr, *bad_r;
  struct ibv_send_wr swr, *bad_s;
  struct ibv_sge sge;
  struct ibv_wc wc;
  long long tx0, rx0, tx1, rx1;
  size_t total = len * count, i;
  int k, rc, counted = counters_usable(src, dst);

  CHECK(ends_ready, "devices not set up: %s", setup_error);
  CHECK(off + total + 1 <= BUF_SIZE, "%zu bytes do not fit the buffer", total);
  memset(dst->buf, GUARD, BUF_SIZE);
  for (i = 0; i < total; i++) src->buf[i] = pattern(i, seed);
  tx0 = net_counter(src->netdev, "tx_bytes");
  rx0 = net_counter(dst->netdev, "rx_bytes");

  for (k = 0; k < count; k++) { /* a write with immediate consumes a receive WR */
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id = 1000 + k;
    rc = ibv_post_recv(dst->qp, &rwr, &bad_r);
    CHECK(rc == 0, "%s: ibv_post_recv: %s", dst->name, strerror(rc));
  }
  for (k = 0; k < count; k++) {
    sge.addr = (uintptr_t)src->buf + (size_t)k * len;
    sge.length = (uint32_t)len;
    sge.lkey = src->mr->lkey;
    memset(&swr, 0, sizeof(swr));
    swr.wr_id = 2000 + k;
    swr.sg_list = &sge;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    swr.send_flags = k == count - 1 ? IBV_SEND_SIGNALED : 0;
    swr.imm_data = htonl(0x5ee0000u + (seed << 8) + (unsigned)k);
    swr.wr.rdma.remote_addr = (uintptr_t)dst->buf + off + (size_t)k * len;
    swr.wr.rdma.rkey = dst->mr->rkey;
    rc = ibv_post_send(src->qp, &swr, &bad_s);
    CHECK(rc == 0, "%s: ibv_post_send(RDMA_WRITE_WITH_IMM, %zu bytes): %s", src->name, len, strerror(rc));
  }
  rc = poll_one(src->cq, &wc);
  CHECK(rc == 0, "%s: no send completion within %d ms", src->name, POLL_TIMEOUT_MS);
  CHECK(wc.status == IBV_WC_SUCCESS, "%s: send completion: %s (wr_id %llu)", src->name,
        ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
  CHECK(wc.opcode == IBV_WC_RDMA_WRITE, "%s: send completion opcode %d", src->name, wc.opcode);
  for (k = 0; k < count; k++) {
    rc = poll_one(dst->cq, &wc);
    CHECK(rc == 0, "%s: receive completion %d of %d missing after %d ms", dst->name, k + 1, count,
          POLL_TIMEOUT_MS);
    CHECK(wc.status == IBV_WC_SUCCESS, "%s: receive completion: %s", dst->name,
          ibv_wc_status_str(wc.status));
    CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "%s: receive completion opcode %d, want %d",
          dst->name, wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "%s: completion without IBV_WC_WITH_IMM", dst->name);
    CHECK(ntohl(wc.imm_data) == 0x5ee0000u + (seed << 8) + (unsigned)k,
          "%s: immediate 0x%x, want 0x%x (completions out of order?)", dst->name, ntohl(wc.imm_data),
          0x5ee0000u + (seed << 8) + (unsigned)k);
    CHECK(wc.byte_len == len, "%s: byte_len %u, want %zu", dst->name, wc.byte_len, len);
    CHECK(wc.wr_id == (uint64_t)(1000 + k), "%s: wr_id %llu, want %d", dst->name,
          (unsigned long long)wc.wr_id, 1000 + k);
  }
  for (i = 0; i < total; i++)
    CHECK(dst->buf[off + i] == pattern(i, seed), "%s: byte %zu is 0x%02x, want 0x%02x", dst->name, i,
          dst->buf[off + i], pattern(i, seed));
  CHECK(dst->buf[off - 1] == GUARD && dst->buf[off + total] == GUARD,
        "%s: the write touched bytes outside [%zu, %zu)", dst->name, off, off + total);
  if (counted) {
    tx1 = net_counter(src->netdev, "tx_bytes");
    rx1 = net_counter(dst->netdev, "rx_bytes");
    printf("  %s -> %s: %zu bytes in %d writes; %s tx_bytes +%lld, %s rx_bytes +%lld\n", src->name,
           dst->name, total, count, src->netdev, tx1 - tx0, dst->netdev, rx1 - rx0);
    CHECK(tx1 - tx0 >= (long long)total, "%s sent %lld bytes for a %zu-byte payload: the traffic did "
          "not cross %s", src->netdev, tx1 - tx0, total, src->netdev);
    CHECK(rx1 - rx0 >= (long long)total, "%s received %lld bytes for a %zu-byte payload", dst->netdev,
          rx1 - rx0, total);
  } else {
    printf("  %s -> %s: %zu bytes in %d writes (no per-end netdev counters to check)\n", src->name,
           dst->name, total, count);
  }
}

static void test_devices_active(void) {
  CHECK(ends_ready, "devices not set up: %s", setup_error);
  for (int j = 0; j < 2; j++) {
    struct end *e = &ends[j];
    char g[INET6_ADDRSTRLEN];
    gid_str(&e->gid, g, sizeof(g));
    printf("  %s: port %d %s, %s, active_mtu %d, gid[%d] %s (%s) on %s, qpn %u\n", e->name, PORT,
           ibv_port_state_str(e->port.state),
           e->port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
           128 << e->port.active_mtu, e->gid_index, g, gid_type_name(e->gid_type),
           e->netdev[0] ? e->netdev : "-", e->qp->qp_num);
    CHECK(e->port.state == IBV_PORT_ACTIVE, "%s port %d is %s", e->name, PORT,
          ibv_port_state_str(e->port.state));
  }
}

static void test_write_0_to_1(void) { write_imm(&ends[0], &ends[1], 65536, 1, 1); }
static void test_write_1_to_0(void) { write_imm(&ends[1], &ends[0], 65536, 1, 2); }
static void test_many_writes(void) { write_imm(&ends[0], &ends[1], 4096, 48, 3); }

static const struct {
  const char *name;
  void (*fn)(void);
} tests[] = {
    {"DevicesActive", test_devices_active},
    {"WriteWithImm0to1", test_write_0_to_1},
    {"WriteWithImm1to0", test_write_1_to_0},
    {"ManyWritesInOrder", test_many_writes},
};
#define SUITE "SoftRoceVerbs"
#define NTESTS (int)(sizeof(tests) / sizeof(tests[0]))

static int selected(const char *filter, const char *name) {
  char full[128], pat[256];
  const char *p = filter;
  if (!filter || !*filter) return 1;
  snprintf(full, sizeof(full), SUITE ".%s", name);
  while (*p) { /* positive patterns only, ':'-separated */
    size_t n = strcspn(p, ":");
    if (n < sizeof(pat)) {
      memcpy(pat, p, n);
      pat[n] = 0;
      if (fnmatch(pat, full, 0) == 0) return 1;
    }
    p += n + (p[n] == ':');
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *filter = NULL;
  int run[NTESTS], nrun = 0, npass = 0, i;
  char failed[NTESTS][128];
  int nfail = 0;
  double t0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--gtest_list_tests") == 0) {
      printf(SUITE ".\n");
      for (int k = 0; k < NTESTS; k++) printf("  %s\n", tests[k].name);
      return 0;
    }
    if (strncmp(argv[i], "--gtest_filter=", 15) == 0) filter = argv[i] + 15;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (i = 0; i < NTESTS; i++)
    if ((run[i] = selected(filter, tests[i].name))) nrun++;
  printf("[==========] Running %d test%s from 1 test suite.\n", nrun, nrun == 1 ? "" : "s");
  t0 = now_ms();
  setup();
  if (!ends_ready) printf("setup failed: %s\n", setup_error);
  printf("[----------] %d tests from " SUITE "\n", nrun);
  for (i = 0; i < NTESTS; i++) {
    double t;
    if (!run[i]) continue;
    printf("[ RUN      ] " SUITE ".%s\n", tests[i].name);
    test_failed = 0;
    t = now_ms();
    tests[i].fn();
    if (test_failed) {
      printf("[  FAILED  ] " SUITE ".%s (%.0f ms)\n", tests[i].name, now_ms() - t);
      snprintf(failed[nfail++], sizeof(failed[0]), SUITE ".%s", tests[i].name);
    } else {
      printf("[       OK ] " SUITE ".%s (%.0f ms)\n", tests[i].name, now_ms() - t);
      npass++;
    }
  }
  teardown();
  printf("[----------] %d tests from " SUITE " (%.0f ms total)\n\n", nrun, now_ms() - t0);
  printf("[==========] %d tests from 1 test suite ran. (%.0f ms total)\n", nrun, now_ms() - t0);
  printf("[  PASSED  ] %d test%s.\n", npass, npass == 1 ? "" : "s");
  if (nfail) {
    printf("[  FAILED  ] %d test%s, listed below:\n", nfail, nfail == 1 ? "" : "s");
    for (i = 0; i < nfail; i++) printf("[  FAILED  ] %s\n", failed[i]);
    printf("\n %d FAILED TEST%s\n", nfail, nfail == 1 ? "" : "S");
  }
  return nfail ? 1 : 0;
}
