// The IB data path's wr_id and immediate layouts (src/transport/net_ib/wrid.h): every encoder
// and its decoder agree over the whole range the data path uses, and no two kinds can be
// taken for each other.
#include <gtest/gtest.h>
#include <stdint.h>

extern "C" {
#include "../../src/transport/net_ib/eager/eager.h"
#include "../../src/transport/net_ib/wire.h"
#include "../../src/transport/net_ib/wrid.h"
}

namespace {

// The ranges the data path encodes (post.c, eager_ring.c): a wr_id field is 8 bits wide.
const int kSlots = RAILNET_IB_FIFO_SLOTS;
const int kChunks = RAILNET_IB_FO_MAX_CHUNKS;
const unsigned kEagerEnds = RAILNET_IB_EAGER_SIGNAL; /* the most a signaled eager write ends */

TEST(IbWrId, FieldsHoldTheirRanges) {
  EXPECT_LE(kSlots, 256);
  EXPECT_LE(kChunks, 128) << "a failover immediate's chunk must leave bit 31 (eager) clear";
  EXPECT_LE(kEagerEnds, 255u);
  EXPECT_LE(RAILNET_IB_EAGER_SLOTS, 256);
  EXPECT_LE((unsigned)RAILNET_IB_EAGER_MAX, RAILNET_IB_EAGER_FO_MASK) << "an eager size must fit its failover field";
}

TEST(IbWrId, DataWritesRoundTripAndAreData) {
  for (int slot = 0; slot < kSlots; slot++)
    for (int chunk = 0; chunk < kChunks; chunk++)
      for (unsigned ends = 0; ends <= kEagerEnds; ends++) {
        uint64_t w = railnetIbWrIdData(slot, chunk, ends);
        int s = -1, c = -1;
        unsigned e = 99;
        ASSERT_TRUE(railnetIbWrIdDataDecode(w, &s, &c, &e)) << std::hex << w;
        ASSERT_EQ(s, slot);
        ASSERT_EQ(c, chunk);
        ASSERT_EQ(e, ends);
        ASSERT_EQ(railnetIbSendWrKind(w), RAILNET_IB_SWR_DATA) << std::hex << w;
      }
}

TEST(IbWrId, DataDecodeRefusesOtherBits) {
  int s, c;
  unsigned e;
  for (int bit = 16; bit < 24; bit++) EXPECT_FALSE(railnetIbWrIdDataDecode(1ull << bit, &s, &c, &e)) << bit;
  for (int bit = 32; bit < 64; bit++) EXPECT_FALSE(railnetIbWrIdDataDecode(1ull << bit, &s, &c, &e)) << bit;
  EXPECT_FALSE(railnetIbWrIdDataDecode(railnetIbWrIdEager(0, 3), &s, &c, &e));
  EXPECT_FALSE(railnetIbWrIdDataDecode(railnetIbWrIdFoRead(7), &s, &c, &e));
  EXPECT_FALSE(railnetIbWrIdDataDecode(railnetIbWrIdFoProbe(1), &s, &c, &e));
  EXPECT_FALSE(railnetIbWrIdDataDecode(RAILNET_IB_FO_ALIVE, &s, &c, &e));
}

TEST(IbWrId, EagerWritesRoundTrip) {
  for (unsigned ends = 0; ends <= kEagerEnds; ends++) {
    uint64_t w = railnetIbWrIdEager(0, ends);
    EXPECT_EQ(railnetIbSendWrKind(w), RAILNET_IB_SWR_EAGER);
    EXPECT_EQ(railnetIbWrIdEagerEnds(w), ends);
    EXPECT_FALSE(railnetIbWrIdIsEagerFo(w));
  }
  // under failover: the position's low 16 bits, whatever the WRs it ends
  for (uint64_t pos : {0ull, 1ull, 15ull, 16ull, 0xffffull, 0x10000ull, 0x12345ull, (1ull << 40) + 7}) {
    uint64_t w = railnetIbWrIdEager(railnetIbWrIdEagerFo(pos), 5);
    EXPECT_EQ(railnetIbSendWrKind(w), RAILNET_IB_SWR_EAGER) << pos;
    EXPECT_TRUE(railnetIbWrIdIsEagerFo(w));
    EXPECT_EQ(railnetIbWrIdEagerEnds(w), 5u);
    EXPECT_EQ(railnetIbWrIdEagerFoPos16(w), (uint32_t)(pos & 0xffff));
    EXPECT_TRUE(railnetIbWrIdEagerFoIs(w, pos));
    EXPECT_TRUE(railnetIbWrIdEagerFoIs(w, pos + 0x10000)) << "16 bits: positions a wrap apart look alike";
    EXPECT_FALSE(railnetIbWrIdEagerFoIs(w, pos + 1));
  }
}

TEST(IbWrId, FailoverKindsAreTheirOwn) {
  for (uint64_t round : {0ull, 1ull, 0xfffeull, 0xffffull, 0x10000ull, 0x1abcdull}) {
    uint64_t w = railnetIbWrIdFoRead(round);
    EXPECT_EQ(railnetIbSendWrKind(w), RAILNET_IB_SWR_FO_READ);
    EXPECT_TRUE(railnetIbWrIdFoReadIs(w, round));
    EXPECT_FALSE(railnetIbWrIdFoReadIs(w, round + 1));
  }
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++) {
    uint64_t w = railnetIbWrIdFoProbe(d);
    EXPECT_EQ(railnetIbSendWrKind(w), RAILNET_IB_SWR_FO_PROBE);
    EXPECT_EQ(railnetIbWrIdFoProbeDev(w), d);
  }
  EXPECT_EQ(railnetIbSendWrKind(RAILNET_IB_FO_ALIVE), RAILNET_IB_SWR_FO_ALIVE);
  EXPECT_EQ(railnetIbSendWrKind(RAILNET_IB_WRID_PREPOSTED), RAILNET_IB_SWR_RECV);
}

TEST(IbWrId, ReceiveSideKinds) {
  for (int slot = 0; slot < kSlots; slot++) {
    EXPECT_FALSE(railnetIbWrIdIsCtsRewrite(railnetIbWrIdCts(slot, 0)));
    EXPECT_TRUE(railnetIbWrIdIsCtsRewrite(railnetIbWrIdCts(slot, 1)));
    EXPECT_FALSE(railnetIbWrIdIsEagerCopy(railnetIbWrIdCts(slot, 1)));
    EXPECT_EQ(railnetIbWrIdRecvSlot(slot), (uint64_t)slot);
  }
  // a pre-posted receive has every bit set: it is no rewrite
  EXPECT_FALSE(railnetIbWrIdIsCtsRewrite(RAILNET_IB_WRID_PREPOSTED));
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) {
    uint64_t w = railnetIbWrIdEagerCopy(s);
    EXPECT_TRUE(railnetIbWrIdIsEagerCopy(w));
    EXPECT_EQ(railnetIbWrIdEagerCopySlot(w, RAILNET_IB_EAGER_SLOTS), s);
  }
  // the flush QP carries copies and flushes: a flush's request number is never a copy
  for (int idx : {0, 1, 255, 4096, (1 << 20) + 3}) EXPECT_FALSE(railnetIbWrIdIsEagerCopy(railnetIbWrIdFlush(idx)));
}

TEST(IbImm, FailoverDataRoundTripsAndIsNeverEager) {
  for (uint64_t id : {0ull, 1ull, 0xfffffeull, 0xffffffull, 0x1000000ull, 0x12345678ull}) {
    for (int chunk = 0; chunk < kChunks; chunk++) {
      uint32_t imm = railnetIbImmFo(id, chunk);
      ASSERT_EQ(railnetIbImmFoId(imm), (uint32_t)(id & 0xffffff));
      ASSERT_EQ(railnetIbImmFoChunk(imm), chunk);
      ASSERT_FALSE(railnetIbImmIsEager(imm)) << "id " << id << " chunk " << chunk;
    }
  }
}

TEST(IbImm, ByIdIsNeverEagerOnAnEagerComm) {
  for (uint64_t id : {0ull, 1ull, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 0x1ffffffffull}) {
    EXPECT_FALSE(railnetIbImmIsEager(railnetIbImmById(id, 1))) << id;
    EXPECT_EQ(railnetIbImmById(id, 1), (uint32_t)id & 0x7fffffffu);
    EXPECT_EQ(railnetIbImmById(id, 0), (uint32_t)id);
  }
}

TEST(IbImm, EagerSizesAndPositionsRoundTrip) {
  const uint32_t kinds[] = {0, RAILNET_IB_EAGER_RTS, RAILNET_IB_EAGER_RTS | RAILNET_IB_EAGER_RTS_SMALL,
                            RAILNET_IB_EAGER_MARK, RAILNET_IB_EAGER_CLOSE};
  for (uint32_t size : {0u, 1u, 4096u, (uint32_t)RAILNET_IB_EAGER_MAX}) {
    uint32_t imm = railnetIbImmEager(0, 12345, size);
    EXPECT_TRUE(railnetIbImmIsEager(imm));
    EXPECT_EQ(railnetIbImmEagerSize(0, imm), size);
    for (uint64_t pos = 0; pos < 3 * (RAILNET_IB_EAGER_FO_MASK + 1ull); pos += 997) {
      uint32_t f = railnetIbImmEager(1, pos, size);
      ASSERT_TRUE(railnetIbImmIsEager(f));
      ASSERT_EQ(railnetIbImmEagerSize(1, f), size) << pos;
      ASSERT_EQ(railnetIbImmEagerPosLow(f), (uint32_t)(pos & RAILNET_IB_EAGER_FO_MASK)) << pos;
      ASSERT_EQ(f & (RAILNET_IB_EAGER_RTS | RAILNET_IB_EAGER_MARK | RAILNET_IB_EAGER_CLOSE), 0u)
          << "a size or position must not read as a kind (pos " << pos << ")";
    }
  }
  for (uint32_t k : kinds)
    for (uint64_t pos : {0ull, 1ull, (unsigned long long)RAILNET_IB_EAGER_FO_MASK, 0x12345ull}) {
      uint32_t f = railnetIbImmEager(1, pos, k);
      EXPECT_EQ(f & ~(RAILNET_IB_EAGER_FO_MASK << RAILNET_IB_EAGER_FO_BITS), RAILNET_IB_EAGER_IMM | k) << std::hex << f;
      EXPECT_EQ(railnetIbImmEagerPosLow(f), (uint32_t)(pos & RAILNET_IB_EAGER_FO_MASK));
    }
}

}  // namespace
