/*
 * Every wr_id and immediate layout of the IB data path, with its encode and decode functions
 * (docs/ib-eager.md and docs/ib-resiliency.md describe the protocols that use them).
 * The wr_ids never leave this host (the NIC hands them back in completions); the immediates
 * cross the wire (the peer's receive completion carries them), so a change to an immediate's
 * layout is a change of the protocol (the handle's flags negotiate the variants).
 *
 * wr_id, send side (the sender's QPs; what completion.c and failover_state.c classify):
 *   data write           slot (bits 0-7) | chunk (8-15) | eager writes it ends (24-31)
 *   eager ring write     bit 62 | WRs its completion ends (0-7); under failover also
 *                        bit 60 | (position & 0xffff) << 32
 *   records read         bit 19 | round & 0xffff      (failover: the receiver's records)
 *   path probe           bit 18 | device index          (failover)
 *   alive write          bit 17                         (failover: a recovering QP)
 * wr_id, receive side:
 *   clear-to-send write  slot | bit 16 when it is a failover rewrite
 *   eager credit write   bit 62
 *   NIC copy             bit 61 | ring slot            (on the device's flush QP)
 *   flush read           the flush request's number    (on the device's flush QP)
 *   receive              the fifo slot when posted on demand, all ones when pre-posted
 *
 * Immediates (big-endian on the wire; these are the host values):
 *   data, plain          the size of the one message
 *   data, by id          the request id (31 bits on an eager comm: bit 31 says eager)
 *   data, failover       (id & 0xffffff) | chunk << 24
 *   eager                bit 31 | kind (RTS 30, MARK 29, CLOSE 28; RTS_SMALL bit 0 with RTS)
 *                        | size; under failover the size takes bits 0-13 and the
 *                        position's low 14 bits go in bits 14-27
 */
#ifndef RAILNET_NET_IB_WRID_H
#define RAILNET_NET_IB_WRID_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- wr_id flags */
#define RAILNET_IB_EAGER_WR (1ull << 62)       /* eager ring and credit writes */
#define RAILNET_IB_EAGER_COPY (1ull << 61)     /* the receiver's NIC copies into GPU buffers */
#define RAILNET_IB_EAGER_FO_WR (1ull << 60)    /* a sender's eager message under failover */
#define RAILNET_IB_FO_READ (1ull << 19)        /* the sender's read of the receiver's records */
#define RAILNET_IB_FO_PROBE (1ull << 18)       /* the sender's path probes */
#define RAILNET_IB_FO_ALIVE (1ull << 17)       /* the sender's alive writes on a recovering QP */
#define RAILNET_IB_FO_CTS_REWRITE (1ull << 16) /* the receiver's rewritten clear-to-send entries */
#define RAILNET_IB_WRID_PREPOSTED UINT64_MAX   /* a pre-posted receive */
#define RAILNET_IB_EAGER_FOLD_SHIFT 24         /* a data write's wr_id: the eager writes it ends */

/* ---- immediate flags and fields */
#define RAILNET_IB_EAGER_IMM 0x80000000u   /* an eager ring write */
#define RAILNET_IB_EAGER_RTS 0x40000000u   /* ... a request-to-send of no bytes (no header) */
#define RAILNET_IB_EAGER_RTS_SMALL 1u      /* ... with RTS: a small message whose memory cannot go eagerly */
#define RAILNET_IB_EAGER_MARK 0x20000000u  /* ... split over QPs: a write of no bytes on QP i > 0 */
#define RAILNET_IB_EAGER_CLOSE 0x10000000u /* ... the sender's close, of no bytes */
/* ... RTS and MARK together: the comm's first message, into the receiver's first-message box
 * (wire.h RAILNET_IB_EAGER_FIRST_BYTES), with its header and bytes */
#define RAILNET_IB_EAGER_FIRST (RAILNET_IB_EAGER_RTS | RAILNET_IB_EAGER_MARK)
#define RAILNET_IB_EAGER_KINDS 0xf0000000u /* the flags above the size (without failover) */
#define RAILNET_IB_EAGER_FO_BITS 14        /* failover: the size's bits, and the position's above them */
#define RAILNET_IB_EAGER_FO_MASK ((1u << RAILNET_IB_EAGER_FO_BITS) - 1)

/* What a send-side completion is, from its wr_id alone (ibv_wc.opcode is undefined on an
 * error completion). The failover kinds exist only on comms that fail over. */
enum railnetIbSendWr {
  RAILNET_IB_SWR_DATA = 0,
  RAILNET_IB_SWR_EAGER,
  RAILNET_IB_SWR_FO_READ,
  RAILNET_IB_SWR_FO_PROBE,
  RAILNET_IB_SWR_FO_ALIVE,
  RAILNET_IB_SWR_RECV, /* all ones: not a send at all */
};
static inline enum railnetIbSendWr railnetIbSendWrKind(uint64_t w) {
  if (w == RAILNET_IB_WRID_PREPOSTED) return RAILNET_IB_SWR_RECV;
  if (w & RAILNET_IB_EAGER_WR) return RAILNET_IB_SWR_EAGER;
  if (w & RAILNET_IB_FO_READ) return RAILNET_IB_SWR_FO_READ;
  if (w & RAILNET_IB_FO_PROBE) return RAILNET_IB_SWR_FO_PROBE;
  if (w & RAILNET_IB_FO_ALIVE) return RAILNET_IB_SWR_FO_ALIVE;
  return RAILNET_IB_SWR_DATA;
}

/* ---- data writes (post.c) */
static inline uint64_t railnetIbWrIdData(int slot, int chunk, unsigned eagerEnds) {
  return (uint64_t)(slot & 0xff) | (uint64_t)(chunk & 0xff) << 8 | (uint64_t)(eagerEnds & 0xff) << RAILNET_IB_EAGER_FOLD_SHIFT;
}
/* 0 when w has bits no data write sets (then slot/chunk/ends are still filled in). */
static inline int railnetIbWrIdDataDecode(uint64_t w, int* slot, int* chunk, unsigned* eagerEnds) {
  *slot = (int)(w & 0xff);
  *chunk = (int)((w >> 8) & 0xff);
  *eagerEnds = (unsigned)((w >> RAILNET_IB_EAGER_FOLD_SHIFT) & 0xff);
  return (w & 0xff0000) == 0 && (w >> 32) == 0;
}

/* ---- eager writes (eager_ring.c): extra is 0 or railnetIbWrIdEagerFo(pos) */
static inline uint64_t railnetIbWrIdEager(uint64_t extra, unsigned ends) {
  return RAILNET_IB_EAGER_WR | extra | (uint64_t)(ends & 0xff);
}
static inline uint64_t railnetIbWrIdEagerFo(uint64_t pos) { return RAILNET_IB_EAGER_FO_WR | (pos & 0xffff) << 32; }
static inline unsigned railnetIbWrIdEagerEnds(uint64_t w) { return (unsigned)(w & 0xff); }
static inline int railnetIbWrIdIsEagerFo(uint64_t w) { return (w & RAILNET_IB_EAGER_FO_WR) != 0; }
static inline uint32_t railnetIbWrIdEagerFoPos16(uint64_t w) { return (uint32_t)((w >> 32) & 0xffff); }
/* whether w, an eager write's under failover, can be the one of position pos */
static inline int railnetIbWrIdEagerFoIs(uint64_t w, uint64_t pos) { return railnetIbWrIdEagerFoPos16(w) == (pos & 0xffff); }

/* ---- the receiver's NIC copies (eager.c) */
static inline uint64_t railnetIbWrIdEagerCopy(int ringSlot) { return RAILNET_IB_EAGER_COPY | (uint64_t)ringSlot; }
static inline int railnetIbWrIdIsEagerCopy(uint64_t w) { return (w & RAILNET_IB_EAGER_COPY) != 0; }
static inline int railnetIbWrIdEagerCopySlot(uint64_t w, int ringSlots) {
  return (int)((w & ~RAILNET_IB_EAGER_COPY) % (uint64_t)ringSlots);
}

/* ---- failover's own writes and reads (records.c, probe.c, recovery.c) */
static inline uint64_t railnetIbWrIdFoRead(uint64_t round) { return RAILNET_IB_FO_READ | (round & 0xffff); }
static inline int railnetIbWrIdFoReadIs(uint64_t w, uint64_t round) { return (w & 0xffff) == (round & 0xffff); }
static inline uint64_t railnetIbWrIdFoProbe(int dev) { return RAILNET_IB_FO_PROBE | (uint64_t)(dev & 0xff); }
static inline int railnetIbWrIdFoProbeDev(uint64_t w) { return (int)(w & 0xff); }
static inline uint64_t railnetIbWrIdFoAlive(void) { return RAILNET_IB_FO_ALIVE; }

/* ---- the receiver's clear-to-send writes (post.c) and receives (p2p.c, matching.c) */
static inline uint64_t railnetIbWrIdCts(int slot, int rewrite) {
  return (uint64_t)slot | (rewrite ? RAILNET_IB_FO_CTS_REWRITE : 0);
}
static inline int railnetIbWrIdIsCtsRewrite(uint64_t w) {
  return w != RAILNET_IB_WRID_PREPOSTED && (w & RAILNET_IB_FO_CTS_REWRITE) != 0;
}
static inline int railnetIbWrIdCtsSlot(uint64_t w) { return (int)(w & 0xffff); }
static inline uint64_t railnetIbWrIdRecvSlot(int slot) { return (uint64_t)slot; }
static inline uint64_t railnetIbWrIdPreposted(void) { return RAILNET_IB_WRID_PREPOSTED; }
static inline uint64_t railnetIbWrIdFlush(int reqIndex) { return (uint64_t)reqIndex; }
/* RMA (rma/rma_ops.c): a request's address (8-byte aligned), bit 0 set on its last, signaled
 * work request */
static inline uint64_t railnetIbWrIdRma(const void* req, int last) { return (uint64_t)(uintptr_t)req | (last ? 1u : 0u); }
static inline void* railnetIbWrIdRmaReq(uint64_t w) { return (void*)(uintptr_t)(w & ~(uint64_t)1); }
static inline int railnetIbWrIdRmaLast(uint64_t w) { return (int)(w & 1); }

/* ---- data immediates (post.c writes them, matching.c and completion.c read them) */
static inline uint32_t railnetIbImmFo(uint64_t id, int chunk) {
  return (uint32_t)(id & 0xffffff) | (uint32_t)chunk << 24;
}
static inline uint32_t railnetIbImmFoId(uint32_t imm) { return imm & 0xffffff; }
static inline int railnetIbImmFoChunk(uint32_t imm) { return (int)(imm >> 24); }
/* by id: on an eager comm 31 bits, the top one says an eager write */
static inline uint32_t railnetIbImmById(uint64_t id, int eager) {
  return (uint32_t)id & (eager ? ~RAILNET_IB_EAGER_IMM : ~0u);
}

/* ---- eager immediates (eager*.c) */
static inline int railnetIbImmIsEager(uint32_t imm) { return (imm & RAILNET_IB_EAGER_IMM) != 0; }
/* bits: the kind flags and/or the size; under failover the position's low bits above them */
static inline uint32_t railnetIbImmEager(int fo, uint64_t pos, uint32_t bits) {
  return RAILNET_IB_EAGER_IMM | bits | (fo ? ((uint32_t)pos & RAILNET_IB_EAGER_FO_MASK) << RAILNET_IB_EAGER_FO_BITS : 0);
}
static inline uint32_t railnetIbImmEagerSize(int fo, uint32_t imm) {
  return fo ? imm & RAILNET_IB_EAGER_FO_MASK : imm & ~RAILNET_IB_EAGER_KINDS;
}
static inline int railnetIbImmEagerIsFirst(uint32_t imm) {
  return (imm & RAILNET_IB_EAGER_FIRST) == RAILNET_IB_EAGER_FIRST;
}
static inline uint32_t railnetIbImmEagerPosLow(uint32_t imm) {
  return (imm >> RAILNET_IB_EAGER_FO_BITS) & RAILNET_IB_EAGER_FO_MASK;
}

#ifdef __cplusplus
}
#endif
#endif
