/* The RDMA devices and ports section: state, physical state, link layer, rate/width, netdev
 * MTU and whether railnet uses the port; ports not active, link layers that disagree and
 * downshifted links are problems. The ports and the verdicts are the IB transport's own
 * (railnetIbExplainPorts: discovery's predicate on what sysfs shows). */
#include <stdio.h>
#include <string.h>
#include "diag.h"
#include "param.h"

portInfo ports[MAX_PORTS];
int nPorts;

void scanPorts(void) { nPorts = railnetIbExplainPorts(ports, MAX_PORTS, 0); }

/* The "used" column: why discovery leaves the port out, NCCL_IB_HCA first. */
static const char* usedText(const portInfo* p) {
  if (p->notUsed & RAILNET_IB_PORT_HCA) return "no (NCCL_IB_HCA)";
  if (p->notUsed & RAILNET_IB_PORT_NOT_ACTIVE) return "no (not active)";
  if (p->notUsed & RAILNET_IB_PORT_LINK_LAYER) return "no (link layer)";
  return "yes";
}

/* The table of ports; maxRate[eth] is the highest rate of a used port per link layer. */
static void portTable(double maxRate[2]) {
  text("  %-10s %-4s %-8s %-9s %-11s %-22s %-10s %-5s %s\n", "device", "port", "state", "phys", "link", "rate",
       "netdev", "mtu", "used");
  jOpen("ports", '[');
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    int eth = strcmp(p->link, "Ethernet") == 0;
    if (p->selected && p->gbps > maxRate[eth]) maxRate[eth] = p->gbps;
    char mtu[16] = "-";
    if (p->mtu) sfmt(mtu, sizeof(mtu), "%d", p->mtu);
    text("  %-10s %-4d %-8s %-9s %-11s %-22s %-10s %-5s %s\n", p->dev, p->port, p->stateName, p->physState,
         p->link, p->rate[0] ? p->rate : "-", p->netdev[0] ? p->netdev : "-", mtu, usedText(p));
    jOpen(NULL, '{');
    jStr("device", p->dev);
    jInt("port", p->port);
    jStr("state", p->stateName);
    jStr("phys_state", p->physState);
    jStr("link_layer", p->link);
    jStr("rate", p->rate);
    jNum("gbps", p->gbps);
    jStr("width", p->width);
    jStr("netdev", p->netdev);
    jInt("mtu", p->mtu);
    jBool("used", p->selected);
    jClose('}');
  }
  jClose(']');
}

/* Ports railnet would use: why one is not active, link layers that disagree, downshifted links. */
static void judgePorts(const double maxRate[2], const char* hca) {
  int anyUsed = 0;
  const portInfo* firstUsed = NULL;
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    if (p->notUsed & RAILNET_IB_PORT_HCA) continue;
    if (p->notUsed & RAILNET_IB_PORT_NOT_ACTIVE) {
      char fix[512];
      if (strcmp(p->link, "InfiniBand") == 0 && (p->state == 2 || p->state == 3))
        sfmt(fix, sizeof(fix), "start a Subnet Manager (opensm on one node, or the switch's SM) and check it "
                                   "with sminfo; then ibstat %s should show Active", p->dev);
      else
        sfmt(fix, sizeof(fix), "check the cable, transceiver and switch port (ibstat %s %d, mlxlink); "
                                   "or exclude the port with NCCL_IB_HCA=^%s:%d", p->dev, p->port, p->dev, p->port);
      PROBLEM(fix, "%s:%d is %s (physical state %s)%s", p->dev, p->port, p->stateName, p->physState,
              (p->state == 2 || p->state == 3) && strcmp(p->link, "InfiniBand") == 0
                  ? ": the link is up but no Subnet Manager has configured it"
                  : ": no usable link");
      continue;
    }
    if (!p->selected) continue; /* a link layer discovery does not take */
    anyUsed = 1;
    if (firstUsed == NULL) firstUsed = p;
    else if (strcmp(firstUsed->link, p->link) != 0) {
      char fix[256];
      sfmt(fix, sizeof(fix), "select NICs of one link layer with NCCL_IB_HCA (e.g. NCCL_IB_HCA==%s), or set the "
                                 "port's link type (mlxconfig LINK_TYPE_P%d)", firstUsed->dev, p->port);
      PROBLEM(fix, "link layers disagree: %s:%d is %s but %s:%d is %s (NCCL cannot pair or merge them)",
              firstUsed->dev, firstUsed->port, firstUsed->link, p->dev, p->port, p->link);
    }
    int eth = strcmp(p->link, "Ethernet") == 0;
    if (p->gbps > 0 && p->gbps < maxRate[eth]) {
      char fix[256];
      sfmt(fix, sizeof(fix), "check %s:%d's cable, transceiver and switch port (mlxlink -d <mst dev> shows width, "
                                 "speed and errors); reseat or replace the cable", p->dev, p->port);
      PROBLEM(fix, "%s:%d runs at %s, below the %.0f Gb/sec of the other %s ports: link downshift", p->dev, p->port,
              p->rate, maxRate[eth], p->link);
    }
  }
  if (!anyUsed)
    PROBLEM(hca ? "fix NCCL_IB_HCA so that it names an active port, or unset it" : "bring a port to Active (see above)",
            "no active RDMA port is usable%s: railnet and NCCL fall back to the Socket transport",
            hca ? " with NCCL_IB_HCA" : "");
}

void sectionRdma(void) {
  section("rdma", "RDMA devices and ports");
  railnetParamSource src;
  const char* hca = railnetParamRaw("NCCL_IB_HCA", &src);
  jStr("sysfs", sysfsRoot);
  jStr("NCCL_IB_HCA", hca);
  if (nPorts == 0) {
    text("  no RDMA device under %s/class/infiniband: railnet uses the Socket transport\n", sysfsRoot);
    jOpen("ports", '[');
    jClose(']');
    return;
  }
  if (hca) text("  NCCL_IB_HCA=%s (%s)\n", hca, railnetParamSourceName(src));
  double maxRate[2] = {0, 0}; /* per link layer: 0 InfiniBand, 1 Ethernet */
  portTable(maxRate);
  judgePorts(maxRate, hca);
}
