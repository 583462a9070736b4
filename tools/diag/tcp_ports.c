/* The TCP ports section: the local port range NCCL's sockets get their ports from, and the
 * firewall rule it implies. */
#include <stdio.h>
#include "diag.h"

void sectionPorts(void) {
  section("tcp_ports", "TCP ports (net.ipv4.ip_local_port_range)");
  char line[128];
  int lo = 0, hi = 0;
  if (readLine("/proc/sys/net/ipv4/ip_local_port_range", line, sizeof(line)) != 0 || sscanf(line, "%d %d", &lo, &hi) != 2) {
    text("  /proc/sys/net/ipv4/ip_local_port_range not readable\n");
    jStr("ip_local_port_range", NULL);
    return;
  }
  int count = hi - lo + 1;
  jInt("low", lo);
  jInt("high", hi);
  jInt("count", count);
  text("  ip_local_port_range = %d %d (%d ports)\n", lo, hi, count);
  text("  NCCL's bootstrap and proxy sockets and the Socket transport listen on port 0: the kernel picks their ports\n"
       "  from this range. A firewall between the nodes must allow TCP %d-%d inbound (plus the launcher's ports).\n"
       "  To narrow it: sysctl -w net.ipv4.ip_local_port_range=\"50000 51000\" (persist in /etc/sysctl.conf), then\n"
       "  open exactly that range.\n",
       lo, hi);
  char reserved[256];
  if (readLine("/proc/sys/net/ipv4/ip_local_reserved_ports", reserved, sizeof(reserved)) == 0 && reserved[0]) {
    text("  ip_local_reserved_ports = %s (never picked)\n", reserved);
    jStr("reserved", reserved);
  }
  if (count < 1000)
    WARNING("widen it to at least ~1000 ports (each rank listens on several, connections use more)",
            "ip_local_port_range holds only %d ports: many ranks per node can exhaust it (bind: Address already in use)",
            count);
}
