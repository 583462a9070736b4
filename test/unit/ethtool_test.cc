// The ethtool statistics module (tools/diaglib/ethtool.c): the classification of counter names
// of several drivers (mlx5's ethtool -S and hw_counters, bnxt, i40e/ice, veth), the sums by
// kind and priority over a list of name/value pairs (the fake statistics source: no NIC
// needed), and the reader's errors on netdevs without statistics. The reader on a real
// veth is in test/netns/tools_test.cc.
#include <errno.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

extern "C" {
#include "ethtool.h"
}

namespace {

struct Want {
  const char* name;
  railnetCtrKind kind;
  int dir;
  int prio;
};

void expectClasses(const std::vector<Want>& wants) {
  for (const Want& w : wants) {
    railnetCtrClass c = railnetCounterClassify(w.name);
    EXPECT_EQ(c.kind, w.kind) << w.name << ": " << railnetCtrKindName(c.kind);
    EXPECT_EQ(c.dir, w.dir) << w.name;
    EXPECT_EQ(c.prio, w.prio) << w.name;
  }
}

constexpr int RX = RAILNET_DIR_RX, TX = RAILNET_DIR_TX, NONE = RAILNET_DIR_NONE;

TEST(EthtoolClassify, Mlx5EthtoolNames) {
  expectClasses({
      {"rx_pause_ctrl_phy", RAILNET_CTR_PAUSE, RX, -1},
      {"tx_pause_ctrl_phy", RAILNET_CTR_PAUSE, TX, -1},
      {"rx_global_pause", RAILNET_CTR_PAUSE, RX, -1},
      {"rx_prio3_pause", RAILNET_CTR_PAUSE, RX, 3},
      {"tx_prio3_pause", RAILNET_CTR_PAUSE, TX, 3},
      {"tx_prio0_pause", RAILNET_CTR_PAUSE, TX, 0},
      {"rx_discards_phy", RAILNET_CTR_DISCARD, RX, -1},
      {"tx_discards_phy", RAILNET_CTR_DISCARD, TX, -1},
      {"rx_prio3_buf_discard", RAILNET_CTR_DISCARD, RX, 3},
      {"rx_prio5_cong_discard", RAILNET_CTR_DISCARD, RX, 5},
      {"rx_prio3_marked", RAILNET_CTR_ECN_MARKED, RX, 3},
      {"rx_out_of_buffer", RAILNET_CTR_OUT_OF_BUFFER, RX, -1},
      {"tx_queue_dropped", RAILNET_CTR_DISCARD, TX, -1},
      // not frames, not drops, or one queue's share of a port total
      {"rx_prio3_pause_duration", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_prio3_pause_transition", RAILNET_CTR_OTHER, NONE, -1},
      {"tx_pause_storm_warning_events", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_prio3_bytes", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_prio3_packets", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_xdp_drop", RAILNET_CTR_OTHER, NONE, -1},
      {"rx3_buff_alloc_err", RAILNET_CTR_OTHER, NONE, -1},
      {"tx0_dropped", RAILNET_CTR_OTHER, NONE, -1},
      {"ch2_events", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_bytes_phy", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_crc_errors_phy", RAILNET_CTR_OTHER, NONE, -1},
  });
}

TEST(EthtoolClassify, Mlx5HwCounters) {
  expectClasses({
      {"np_cnp_sent", RAILNET_CTR_CNP_SENT, TX, -1},
      {"np_ecn_marked_roce_packets", RAILNET_CTR_ECN_MARKED, NONE, -1},
      {"rp_cnp_handled", RAILNET_CTR_CNP_HANDLED, NONE, -1},
      {"rp_cnp_ignored", RAILNET_CTR_CNP_IGNORED, NONE, -1},
      {"out_of_buffer", RAILNET_CTR_OUT_OF_BUFFER, NONE, -1},
      {"roce_adp_retrans", RAILNET_CTR_RETRANS, NONE, -1},
      {"roce_adp_retrans_to", RAILNET_CTR_RETRANS, NONE, -1},
      {"roce_slow_restart", RAILNET_CTR_RETRANS, NONE, -1},
      {"roce_slow_restart_cnps", RAILNET_CTR_RETRANS, NONE, -1},
      // the error counters counters.c shows, and rxe's: none of the kinds here
      {"out_of_sequence", RAILNET_CTR_OTHER, NONE, -1},
      {"packet_seq_err", RAILNET_CTR_OTHER, NONE, -1},
      {"local_ack_timeout_err", RAILNET_CTR_OTHER, NONE, -1},
      {"rnr_nak_retry_err", RAILNET_CTR_OTHER, NONE, -1},
      {"duplicate_request", RAILNET_CTR_OTHER, NONE, -1},
      {"rcvd_seq_err", RAILNET_CTR_OTHER, NONE, -1},
      {"send_err", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_dct_connect", RAILNET_CTR_OTHER, NONE, -1},
  });
}

TEST(EthtoolClassify, OtherDriversNames) {
  expectClasses({
      // bnxt
      {"rx_pause_frames", RAILNET_CTR_PAUSE, RX, -1},
      {"tx_pfc_ena_frames_pri3", RAILNET_CTR_PAUSE, TX, 3},
      {"rx_pfc_xon2xoff_frames_pri3", RAILNET_CTR_OTHER, NONE, -1},
      {"rx_cnp_pkts", RAILNET_CTR_CNP_HANDLED, RX, -1},
      {"tx_cnp_pkts", RAILNET_CTR_CNP_SENT, TX, -1},
      {"rx_ecn_marked_pkts", RAILNET_CTR_ECN_MARKED, RX, -1},
      // i40e / ice
      {"port.rx_priority_3_xoff_prio", RAILNET_CTR_PAUSE, RX, 3},
      {"port.tx_priority_6_xoff_prio", RAILNET_CTR_PAUSE, TX, 6},
      {"port.tx_priority_3_xon_prio", RAILNET_CTR_OTHER, NONE, -1},
      {"link_xoff_rx.nic", RAILNET_CTR_PAUSE, RX, -1},
      {"rx_dropped.nic", RAILNET_CTR_DISCARD, RX, -1},
      {"RX_PRIO3_PAUSE", RAILNET_CTR_PAUSE, RX, 3},  // case does not matter
      // priorities outside 0..7 are not priorities
      {"rx_prio9_pause", RAILNET_CTR_PAUSE, RX, -1},
  });
}

// What veth has: per-queue counters and its peer's index; nothing of the kinds here.
TEST(EthtoolClassify, VethNamesAreNotCongestionCounters) {
  for (const char* n : {"peer_ifindex", "rx_queue_0_xdp_packets", "rx_queue_0_xdp_bytes", "rx_queue_0_drops",
                        "rx_queue_0_xdp_redirect", "rx_queue_0_xdp_drops", "rx_queue_0_xdp_tx",
                        "rx_queue_0_xdp_tx_errors", "tx_queue_0_xdp_xmit", "tx_queue_0_xdp_xmit_errors", "", "_"})
    EXPECT_EQ(railnetCounterClassify(n).kind, RAILNET_CTR_OTHER) << n;
  EXPECT_EQ(railnetCounterClassify(nullptr).kind, RAILNET_CTR_OTHER);
}

railnetStat st(const char* name, uint64_t v) {
  railnetStat s{};
  snprintf(s.name, sizeof(s.name), "%s", name);
  s.value = v;
  return s;
}

// The fake statistics source: a list as an mlx5 netdev and its RDMA port would give it.
TEST(EthtoolCongestion, SumsByKindAndPriority) {
  std::vector<railnetStat> s = {
      st("rx_pause_ctrl_phy", 40), st("tx_pause_ctrl_phy", 2),  st("rx_prio3_pause", 30), st("tx_prio3_pause", 2),
      st("rx_prio0_pause", 10),    st("rx_prio3_pause_duration", 999), st("rx_discards_phy", 7),
      st("rx_prio3_buf_discard", 5), st("rx_prio3_marked", 11), st("np_ecn_marked_roce_packets", 100),
      st("np_cnp_sent", 90),       st("rp_cnp_handled", 80),    st("rp_cnp_ignored", 1), st("rx_bytes_phy", 1 << 30),
      st("rx0_packets", 123)};
  railnetCongestion c;
  railnetCongestionSum(s.data(), (int)s.size(), &c);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_PAUSE), 42u);  // the port-wide counters
  EXPECT_EQ(railnetCongestionPrio(&c, RAILNET_CTR_PAUSE, 3), 32u);
  EXPECT_EQ(railnetCongestionPrio(&c, RAILNET_CTR_PAUSE, 0), 10u);
  EXPECT_EQ(railnetCongestionPrio(&c, RAILNET_CTR_PAUSE, 1), 0u);
  EXPECT_EQ(c.port[RAILNET_CTR_PAUSE][RAILNET_DIR_RX], 40u);
  EXPECT_EQ(c.prio[RAILNET_CTR_PAUSE][RAILNET_DIR_TX][3], 2u);
  EXPECT_EQ(c.have[RAILNET_CTR_PAUSE], 5);
  EXPECT_EQ(c.havePort[RAILNET_CTR_PAUSE], 2);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_DISCARD), 7u);
  EXPECT_EQ(railnetCongestionPrio(&c, RAILNET_CTR_DISCARD, 3), 5u);
  // ECN marks: one port-wide counter (hw_counters) and a per-priority one (ethtool)
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_ECN_MARKED), 100u);
  EXPECT_EQ(railnetCongestionPrio(&c, RAILNET_CTR_ECN_MARKED, 3), 11u);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_CNP_SENT), 90u);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_CNP_HANDLED), 80u);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_CNP_IGNORED), 1u);
  EXPECT_EQ(c.have[RAILNET_CTR_RETRANS], 0);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_OTHER), 0u);
}

// A driver with per-priority counters only: the total is their sum.
TEST(EthtoolCongestion, TotalFallsBackToThePriorities) {
  std::vector<railnetStat> s = {st("port.rx_priority_3_xoff_prio", 4), st("port.tx_priority_3_xoff_prio", 1),
                                st("port.rx_priority_5_xoff_prio", 2)};
  railnetCongestion c;
  railnetCongestionSum(s.data(), (int)s.size(), &c);
  EXPECT_EQ(c.havePort[RAILNET_CTR_PAUSE], 0);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_PAUSE), 7u);
  EXPECT_EQ(railnetCongestionPrio(&c, RAILNET_CTR_PAUSE, 3), 5u);
  railnetCongestionSum(nullptr, 0, &c);
  EXPECT_EQ(railnetCongestionTotal(&c, RAILNET_CTR_PAUSE), 0u);
}

TEST(EthtoolStats, ErrorsWithoutStatistics) {
  railnetStats s;
  EXPECT_EQ(railnetEthtoolStats("rnt-nosuchdev0", &s), ENODEV);
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.stats, nullptr);
  EXPECT_EQ(railnetEthtoolStats("", &s), ENODEV);
  EXPECT_EQ(railnetEthtoolStats("a-name-longer-than-ifnamsiz", &s), ENODEV);
  EXPECT_EQ(railnetEthtoolStats("lo", &s), EOPNOTSUPP);  // loopback has no driver statistics
  EXPECT_EQ(railnetEthtoolStats("lo", nullptr), EINVAL);
  railnetStatsFree(&s);
  railnetStatsFree(nullptr);
}

TEST(EthtoolClassify, KindNames) {
  EXPECT_STREQ(railnetCtrKindName(RAILNET_CTR_PAUSE), "pause");
  EXPECT_STREQ(railnetCtrKindName(RAILNET_CTR_ECN_MARKED), "ECN marked");
  EXPECT_STREQ(railnetCtrKindName(RAILNET_CTR_KINDS), "other");
}

}  // namespace
