// The data-path half of the fake verbs world (ib_fake_verbs.h has the discovery half): PDs,
// memory registrations, CQs and RC QPs of the fake HCAs, served under the real ibvwrap
// through its injected symbol table and the contexts' ops (poll_cq, post_send, post_recv,
// which ibvwrap calls inline as verbs.h does). Both ends live in one process: a QP's peer is
// the QP whose number the RTR attributes name (dest_qp_num) on the HCA whose GID table holds
// the RTR's destination GID, and only when that QP names this one back. What a QP posts is
// queued and carried out, in post order, at the next data verb (post_send, post_recv or
// poll_cq of any QP or CQ: FakeNet::progress), a NIC that is done before the CPU looks again,
// in the one thread of the test: no threads, no sleeps; hold keeps the wire still, for a test
// of what a request does while its data is in flight:
//  - RDMA_WRITE / RDMA_WRITE_WITH_IMM copy the local SGEs (lkey checked on the local HCA) into
//    the peer's registered memory (rkey, range and REMOTE_WRITE checked on the peer's HCA);
//    an immediate consumes one of the peer's posted receives and queues its
//    IBV_WC_RECV_RDMA_WITH_IMM completion (wr_id of the receive, byte_len, imm_data as posted,
//    in network order). Without a posted receive the write waits (RNR, retried for ever as
//    rnr_retry 7 does). Inline data is copied when posted, other data when carried out.
//  - RDMA_READ copies from the peer's memory (REMOTE_READ) into the local SGEs.
//  - SEND is not used by the IB transport: posting one fails with EINVAL, so that a change
//    that starts using it is noticed here.
//  - A signaled WR completes with IBV_WC_RDMA_WRITE / IBV_WC_RDMA_READ; polling its
//    completion frees its send-queue entry and those of the unsignaled WRs before it; a post
//    beyond max_send_wr / max_recv_wr fails with ENOMEM, as a provider's does.
//  - An error completes the WR (signaled or not) with its status, moves the QP to the error
//    state and flushes everything else it has posted (IBV_WC_WR_FLUSH_ERR), as hardware does.
// Injected faults: a completion with an error status (failSend), a post that fails with an
// errno (failPostSend), a path that drops every packet (drop: its WRs end in
// IBV_WC_RETRY_EXC_ERR) and a port going DOWN (portDown: the port's state, the drop, and an
// IBV_EVENT_PORT_ERR async event through the context's async_fd). hold stops the wire (holdAtPost: from a given WR on; stall: some QPs only).
#pragma once
#include <fcntl.h>
#include <functional>
#include "ib_fake_verbs.h"

namespace {

struct FakeQp;

struct FakeCq {
  struct ibv_cq cq;
  int cqe = 0;
  bool destroyed = false;
  struct Entry {
    struct ibv_wc wc;
    FakeQp* qp;     // whose completion
    uint64_t seq;   // the send WR's number on qp (send completions)
    bool send;
  };
  std::deque<Entry> q;
};

struct FakeMr {
  struct ibv_mr mr;
  int access = 0;
  bool live = true;
};

struct FakeSendWr {
  struct ibv_send_wr wr;
  std::vector<struct ibv_sge> sge;
  std::vector<char> inl;  // IBV_SEND_INLINE: the bytes, taken at post time
  uint64_t seq = 0;
};

struct FakeQp {
  struct ibv_qp qp;
  FakeHca* hca = nullptr;
  int port = 0;
  enum ibv_qp_state state = IBV_QPS_RESET;
  int access = 0;
  uint32_t destQpn = 0;
  bool global = false;
  union ibv_gid dgid;
  struct ibv_qp_cap cap;
  int sqSigAll = 0;
  bool destroyed = false;
  std::deque<FakeSendWr> sq;       // posted, not carried out yet
  std::deque<uint64_t> rq;         // posted receives (wr_id)
  uint64_t nextSeq = 0, retired = 0;  // send WRs posted / freed by a polled completion
  // what went over this QP: WRs carried out, bytes written or read, immediates delivered
  int writes = 0, reads = 0, imms = 0;
  size_t bytes = 0;
};

struct FakeNet {
  std::deque<FakeQp> qps;   // stable addresses: a QP is marked destroyed, never erased
  std::deque<FakeCq> cqs;
  std::deque<FakeMr> mrs;
  std::map<struct ibv_context*, struct ibv_pd> pds;  // one PD per context (a key is per device)
  uint32_t nextQpn = 0x11;
  uint32_t nextKey = 1;
  bool hold = false;  // the wire stands still (posts queue up) until hold is false again
  std::function<void()> regMrHook;  // runs first in every reg_mr (a test may block it there)
  int cqOverflows = 0, badDeregs = 0, flushes = 0;
  struct SendFault {
    std::function<bool(const FakeQp&, const struct ibv_send_wr&)> match;
    enum ibv_wc_status status;  // failSend; 0 for failPostSend
    int err;                    // failPostSend
    int left;
  };
  std::vector<SendFault> wcFaults, postFaults;
  std::vector<std::pair<FakeHca*, int>> dropped;  // (HCA, port) that loses every packet

  // The next `count` WRs that match, when carried out, complete with status.
  void failSend(std::function<bool(const FakeQp&, const struct ibv_send_wr&)> match, enum ibv_wc_status status,
                int count = 1) {
    wcFaults.push_back({std::move(match), status, 0, count});
  }
  // The next `count` post_send calls whose first WR matches fail with err (nothing posted).
  void failPostSend(std::function<bool(const FakeQp&, const struct ibv_send_wr&)> match, int err, int count = 1) {
    postFaults.push_back({std::move(match), IBV_WC_SUCCESS, err, count});
  }
  // hold is set when a WR that matches is posted (before it moves): a test then acts on the
  // wire with that WR in flight.
  std::function<bool(const FakeQp&, const struct ibv_send_wr&)> holdMatch;
  void holdAtPost(std::function<bool(const FakeQp&, const struct ibv_send_wr&)> match) { holdMatch = std::move(match); }
  // The QPs that match stand still (their posts queue up) while the others move.
  std::function<bool(const FakeQp&)> stall;
  void drop(FakeHca* h, int port) { dropped.push_back({h, port}); }
  bool isDropped(const FakeHca* h, int port) const {
    for (auto& d : dropped)
      if (d.first == h && d.second == port) return true;
    return false;
  }
  // The port goes DOWN: its state, every packet through it lost, and IBV_EVENT_PORT_ERR
  // queued on the HCA's async_fd (a pipe addAsyncPipe made).
  void portDown(FakeHca* h, int port) {
    h->ports[port - 1].attr.state = IBV_PORT_DOWN;
    drop(h, port);
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.event_type = IBV_EVENT_PORT_ERR;
    ev.element.port_num = port;
    {
      std::lock_guard<std::mutex> g(world->evLock);
      world->events.push_back(ev);
    }
    if (writeFd.count(&h->ctx)) {
      char b = 1;
      (void)!write(writeFd[&h->ctx], &b, 1);
    }
  }
  std::map<struct ibv_context*, int> writeFd;  // the write end of each context's async pipe
  std::vector<int> fds;
  ~FakeNet() {
    for (int fd : fds) close(fd);
  }
  // Give h an async_fd (a pipe) so that the transport's event thread reads its events.
  void addAsyncPipe(FakeHca& h) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    h.ctx.async_fd = p[0];
    writeFd[&h.ctx] = p[1];
    fds.push_back(p[0]);
    fds.push_back(p[1]);
  }

  FakeQp* qpOf(struct ibv_qp* q) {
    for (auto& f : qps)
      if (&f.qp == q) return &f;
    return nullptr;
  }
  FakeCq* cqOf(struct ibv_cq* c) {
    for (auto& f : cqs)
      if (&f.cq == c) return &f;
    return nullptr;
  }
  // The live QP with this number on the HCA whose port holds gid (RoCE) ...
  FakeQp* peerOf(const FakeQp& s) {
    if (!s.global) return nullptr;  // the fake HCAs are RoCE: an RTR without a GRH reaches nobody
    for (auto& h : world->hcas)
      for (size_t p = 0; p < h.ports.size(); p++)
        for (auto& g : h.ports[p].gids) {
          if (g.text.empty()) continue;
          union ibv_gid x = gidFromText(g.text);
          if (memcmp(x.raw, s.dgid.raw, 16) != 0) continue;
          for (auto& q : qps)
            if (!q.destroyed && q.hca == &h && q.qp.qp_num == s.destQpn) return &q;
        }
    return nullptr;
  }
  FakeMr* mrOfKey(struct ibv_context* ctx, uint32_t key, bool remote) {
    for (auto& m : mrs)
      if (m.live && m.mr.context == ctx && (remote ? m.mr.rkey : m.mr.lkey) == key) return &m;
    return nullptr;
  }
  static bool covers(const FakeMr* m, uint64_t addr, size_t len) {
    uint64_t a = (uint64_t)(uintptr_t)m->mr.addr;
    return addr >= a && addr + len <= a + m->mr.length;
  }

  void push(FakeCq* cq, const struct ibv_wc& wc, FakeQp* qp, uint64_t seq, bool send) {
    if (cq == nullptr || cq->destroyed) return;
    if ((int)cq->q.size() >= cq->cqe) {
      cqOverflows++;  // a real CQ overruns (IBV_EVENT_CQ_ERR): the test fails on this count
      return;
    }
    cq->q.push_back({wc, qp, seq, send});
  }
  void sendWc(FakeQp& s, const FakeSendWr& w, enum ibv_wc_status st, uint32_t len) {
    bool signaled = s.sqSigAll || (w.wr.send_flags & IBV_SEND_SIGNALED);
    if (st == IBV_WC_SUCCESS && !signaled) return;
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = w.wr.wr_id;
    wc.status = st;
    wc.opcode = w.wr.opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
    wc.byte_len = len;
    wc.qp_num = s.qp.qp_num;
    wc.vendor_err = st == IBV_WC_SUCCESS ? 0 : 0x81;
    push(findCq(s.qp.send_cq), wc, &s, w.seq, true);
  }
  FakeCq* findCq(struct ibv_cq* c) { return cqOf(c); }
  // The QP goes to the error state: what it has posted is flushed.
  void toError(FakeQp& q) {
    q.state = IBV_QPS_ERR;
    while (!q.sq.empty()) {
      sendWc(q, q.sq.front(), IBV_WC_WR_FLUSH_ERR, 0);
      q.sq.pop_front();
      flushes++;
    }
    while (!q.rq.empty()) {
      struct ibv_wc wc;
      memset(&wc, 0, sizeof(wc));
      wc.wr_id = q.rq.front();
      wc.status = IBV_WC_WR_FLUSH_ERR;
      wc.opcode = IBV_WC_RECV;
      wc.qp_num = q.qp.qp_num;
      push(findCq(q.qp.recv_cq), wc, &q, 0, false);
      q.rq.pop_front();
      flushes++;
    }
  }
  bool portUp(const FakeHca* h, int port) const {
    return h->ports[port - 1].attr.state == IBV_PORT_ACTIVE && !isDropped(h, port);
  }
  // Checks the local SGEs (lkey on s's HCA, in range) and gathers them; false: LOC_PROT_ERR.
  bool gather(FakeQp& s, const FakeSendWr& w, std::vector<char>* out, bool toLocal) {
    if (!w.inl.empty() && !toLocal) {
      *out = w.inl;
      return true;
    }
    for (auto& g : w.sge) {
      if (g.length == 0) continue;
      FakeMr* m = mrOfKey(&s.hca->ctx, g.lkey, false);
      if (m == nullptr || !covers(m, g.addr, g.length) || (toLocal && !(m->access & IBV_ACCESS_LOCAL_WRITE)))
        return false;
      if (!toLocal) out->insert(out->end(), (char*)(uintptr_t)g.addr, (char*)(uintptr_t)g.addr + g.length);
    }
    return true;
  }
  // Carries out s's first WR: true when it is done (either way), false when it waits (RNR).
  bool step(FakeQp& s) {
    FakeSendWr& w = s.sq.front();
    std::vector<char> data;
    enum ibv_wc_status st = IBV_WC_SUCCESS;
    FakeQp* p = peerOf(s);
    for (auto& f : wcFaults)
      if (f.left > 0 && f.match(s, w.wr)) {
        f.left--;
        st = f.status;
        break;
      }
    if (st == IBV_WC_SUCCESS && (!portUp(s.hca, s.port) || p == nullptr || p->destQpn != s.qp.qp_num ||
                                 (p->state != IBV_QPS_RTR && p->state != IBV_QPS_RTS) || !portUp(p->hca, p->port)))
      st = IBV_WC_RETRY_EXC_ERR;  // nobody acknowledges: the retries run out
    bool read = w.wr.opcode == IBV_WR_RDMA_READ;
    size_t len = 0;
    for (auto& g : w.sge) len += g.length;
    if (!w.inl.empty()) len = w.inl.size();
    if (st == IBV_WC_SUCCESS && !gather(s, w, &data, read)) st = IBV_WC_LOC_PROT_ERR;
    FakeMr* rm = nullptr;
    if (st == IBV_WC_SUCCESS && len > 0) {
      rm = mrOfKey(&p->hca->ctx, w.wr.wr.rdma.rkey, true);
      int need = read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
      if (rm == nullptr || !covers(rm, w.wr.wr.rdma.remote_addr, len) || !(rm->access & need) ||
          !(p->access & need))
        st = IBV_WC_REM_ACCESS_ERR;
    }
    if (st != IBV_WC_SUCCESS) {
      if (st == IBV_WC_REM_ACCESS_ERR && p) toError(*p);  // the responder's QP fails too
      sendWc(s, w, st, 0);
      s.sq.pop_front();
      toError(s);
      return true;
    }
    bool imm = w.wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (imm && p->rq.empty()) return false;  // receiver not ready: retried
    char* remote = (char*)(uintptr_t)w.wr.wr.rdma.remote_addr;
    if (read) {
      size_t off = 0;
      for (auto& g : w.sge) {
        memcpy((char*)(uintptr_t)g.addr, remote + off, g.length);
        off += g.length;
      }
      s.reads++;
    } else {
      if (len) memcpy(remote, data.data(), len);
      s.writes++;
    }
    s.bytes += len;
    if (imm) {
      struct ibv_wc wc;
      memset(&wc, 0, sizeof(wc));
      wc.wr_id = p->rq.front();
      p->rq.pop_front();
      wc.status = IBV_WC_SUCCESS;
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.byte_len = (uint32_t)len;
      wc.imm_data = w.wr.imm_data;
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.qp_num = p->qp.qp_num;
      wc.src_qp = s.qp.qp_num;
      push(findCq(p->qp.recv_cq), wc, p, 0, false);
      s.imms++;
    }
    sendWc(s, w, IBV_WC_SUCCESS, (uint32_t)len);
    s.sq.pop_front();
    return true;
  }
  // Carries out everything that can go now, in post order per QP.
  void progress() {
    if (hold) return;
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& q : qps) {
        if (q.destroyed || (stall && stall(q))) continue;
        if (q.state == IBV_QPS_ERR && (!q.sq.empty() || !q.rq.empty())) {
          toError(q);
          moved = true;
          continue;
        }
        while (q.state == IBV_QPS_RTS && !q.sq.empty() && step(q)) moved = true;
      }
    }
  }
  int pendingSends() const {
    int n = 0;
    for (auto& q : qps) n += q.destroyed ? 0 : (int)q.sq.size();
    return n;
  }
};
FakeNet* net;

// ---- the verbs

struct ibv_pd* fkdAllocPd(struct ibv_context* c) {
  struct ibv_pd& pd = net->pds[c];
  pd.context = c;
  return &pd;
}
int fkdDeallocPd(struct ibv_pd*) { return 0; }

struct ibv_mr* fkdRegMr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  if (net->regMrHook) net->regMrHook();
  net->mrs.emplace_back();
  FakeMr& m = net->mrs.back();
  memset(&m.mr, 0, sizeof(m.mr));
  m.mr.context = pd->context;
  m.mr.pd = pd;
  m.mr.addr = addr;
  m.mr.length = length;
  uint32_t k = net->nextKey++;
  m.mr.lkey = 0x1000 + k;     // lkeys and rkeys differ, so that one used for the other fails
  m.mr.rkey = 0x800000 + k;
  m.access = access;
  return &m.mr;
}
int fkdDeregMr(struct ibv_mr* mr) {
  for (auto& m : net->mrs)
    if (&m.mr == mr) {
      if (!m.live) break;
      m.live = false;
      return 0;
    }
  net->badDeregs++;
  return EINVAL;
}

int fkdPollCq(struct ibv_cq* c, int n, struct ibv_wc* wc) {
  FakeCq* cq = net->cqOf(c);
  if (cq == nullptr || cq->destroyed) return -EINVAL;
  net->progress();
  int k = 0;
  while (k < n && !cq->q.empty()) {
    FakeCq::Entry& e = cq->q.front();
    wc[k++] = e.wc;
    if (e.send && e.seq + 1 > e.qp->retired) e.qp->retired = e.seq + 1;  // its entry and those before
    cq->q.pop_front();
  }
  return k;
}

int fkdPostSend(struct ibv_qp* q, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  FakeQp* s = net->qpOf(q);
  *bad = wr;
  if (s == nullptr || s->destroyed) return EINVAL;
  for (auto& f : net->postFaults)
    if (f.left > 0 && f.match(*s, *wr)) {
      f.left--;
      return f.err;
    }
  if (s->state != IBV_QPS_RTS && s->state != IBV_QPS_ERR) return EINVAL;
  for (struct ibv_send_wr* w = wr; w; w = w->next) {
    *bad = w;
    if (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && w->opcode != IBV_WR_RDMA_READ)
      return EINVAL;
    if (w->num_sge > (int)s->cap.max_send_sge || w->num_sge < 0) return EINVAL;
    if (s->nextSeq - s->retired >= s->cap.max_send_wr) return ENOMEM;
    FakeSendWr f;
    f.wr = *w;
    f.wr.next = nullptr;
    f.sge.assign(w->sg_list, w->sg_list + w->num_sge);
    f.wr.sg_list = nullptr;
    if (w->send_flags & IBV_SEND_INLINE) {
      size_t len = 0;
      for (auto& g : f.sge) len += g.length;
      if (len > s->cap.max_inline_data || w->opcode == IBV_WR_RDMA_READ) return EINVAL;
      for (auto& g : f.sge) f.inl.insert(f.inl.end(), (char*)(uintptr_t)g.addr, (char*)(uintptr_t)g.addr + g.length);
    }
    f.seq = s->nextSeq++;
    if (net->holdMatch && net->holdMatch(*s, f.wr)) {
      net->hold = true;
      net->holdMatch = nullptr;
    }
    s->sq.push_back(std::move(f));
  }
  *bad = nullptr;
  net->progress();
  return 0;
}

int fkdPostRecv(struct ibv_qp* q, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  FakeQp* s = net->qpOf(q);
  *bad = wr;
  if (s == nullptr || s->destroyed || s->state == IBV_QPS_RESET) return EINVAL;
  for (struct ibv_recv_wr* w = wr; w; w = w->next) {
    *bad = w;
    if (s->rq.size() >= s->cap.max_recv_wr) return ENOMEM;
    s->rq.push_back(w->wr_id);
  }
  *bad = nullptr;
  net->progress();  // a write waiting for this receive (RNR) goes now
  return 0;
}

struct ibv_cq* fkdCreateCq(struct ibv_context* c, int cqe, void* cqCtx, struct ibv_comp_channel*, int) {
  net->cqs.emplace_back();
  FakeCq& f = net->cqs.back();
  memset(&f.cq, 0, sizeof(f.cq));
  f.cq.context = c;
  f.cq.cq_context = cqCtx;
  f.cq.cqe = cqe;
  f.cqe = cqe;
  return &f.cq;
}
int fkdDestroyCq(struct ibv_cq* c) {
  FakeCq* f = net->cqOf(c);
  if (f == nullptr || f->destroyed) return EINVAL;
  for (auto& q : net->qps)
    if (!q.destroyed && (q.qp.send_cq == c || q.qp.recv_cq == c)) return EBUSY;
  f->destroyed = true;
  return 0;
}

struct ibv_qp* fkdCreateQp(struct ibv_pd* pd, struct ibv_qp_init_attr* a) {
  if (a->qp_type != IBV_QPT_RC || a->send_cq == nullptr || a->recv_cq == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  net->qps.emplace_back();
  FakeQp& f = net->qps.back();
  memset(&f.qp, 0, sizeof(f.qp));
  memset(&f.dgid, 0, sizeof(f.dgid));
  f.qp.context = pd->context;
  f.qp.pd = pd;
  f.qp.send_cq = a->send_cq;
  f.qp.recv_cq = a->recv_cq;
  f.qp.qp_num = net->nextQpn++;
  f.qp.qp_type = IBV_QPT_RC;
  f.qp.state = IBV_QPS_RESET;
  f.hca = hcaOfContext(pd->context);
  f.cap = a->cap;
  if (f.cap.max_inline_data > 256) f.cap.max_inline_data = 256;
  a->cap = f.cap;
  f.sqSigAll = a->sq_sig_all;
  return &f.qp;
}
int fkdDestroyQp(struct ibv_qp* q) {
  FakeQp* f = net->qpOf(q);
  if (f == nullptr || f->destroyed) return EINVAL;
  f->destroyed = true;
  return 0;
}

int fkdModifyQp(struct ibv_qp* q, struct ibv_qp_attr* a, int mask) {
  FakeQp* f = net->qpOf(q);
  if (f == nullptr || f->destroyed) return EINVAL;
  if (!(mask & IBV_QP_STATE)) return 0;
  enum ibv_qp_state to = a->qp_state;
  switch (to) {
    case IBV_QPS_INIT:
      if (f->state != IBV_QPS_RESET && f->state != IBV_QPS_INIT) return EINVAL;
      if (!(mask & IBV_QP_PORT) || a->port_num < 1 || (size_t)a->port_num > f->hca->ports.size()) return EINVAL;
      f->port = a->port_num;
      f->access = (int)a->qp_access_flags;
      break;
    case IBV_QPS_RTR:
      if (f->state != IBV_QPS_INIT || !(mask & IBV_QP_DEST_QPN) || !(mask & IBV_QP_AV)) return EINVAL;
      f->destQpn = a->dest_qp_num;
      f->global = a->ah_attr.is_global;
      f->dgid = a->ah_attr.grh.dgid;
      break;
    case IBV_QPS_RTS:
      if (f->state != IBV_QPS_RTR) return EINVAL;
      break;
    case IBV_QPS_ERR:
      f->state = IBV_QPS_ERR;
      f->qp.state = IBV_QPS_ERR;
      net->toError(*f);
      return 0;
    default:
      return EINVAL;
  }
  f->state = to;
  f->qp.state = to;
  return 0;
}
int fkdQueryQp(struct ibv_qp* q, struct ibv_qp_attr* a, int, struct ibv_qp_init_attr* init) {
  FakeQp* f = net->qpOf(q);
  if (f == nullptr) return EINVAL;
  memset(a, 0, sizeof(*a));
  a->qp_state = f->state;
  a->port_num = (uint8_t)f->port;
  a->dest_qp_num = f->destQpn;
  a->cap = f->cap;
  if (init) {
    memset(init, 0, sizeof(*init));
    init->cap = f->cap;
  }
  return 0;
}
const char* fkdWcStatusStr(enum ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    default: return "other error";
  }
}

// The discovery fake's table with the data verbs, and the contexts' data ops, set on every
// HCA of the world (call after the HCAs were added).
struct railnetIbvSymbols fakeDataVerbs() {
  struct railnetIbvSymbols t = fakeVerbs(true);
  t.alloc_pd = fkdAllocPd;
  t.dealloc_pd = fkdDeallocPd;
  t.reg_mr = fkdRegMr;
  t.dereg_mr = fkdDeregMr;
  t.create_cq = fkdCreateCq;
  t.destroy_cq = fkdDestroyCq;
  t.create_qp = fkdCreateQp;
  t.destroy_qp = fkdDestroyQp;
  t.modify_qp = fkdModifyQp;
  t.query_qp = fkdQueryQp;
  t.wc_status_str = fkdWcStatusStr;
  for (auto& h : world->hcas) {
    h.ctx.ops.poll_cq = fkdPollCq;
    h.ctx.ops.post_send = fkdPostSend;
    h.ctx.ops.post_recv = fkdPostRecv;
  }
  return t;
}

}  // namespace
