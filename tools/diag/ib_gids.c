/* GID tables from sysfs: the entries of a port, their RoCE type and netdev, and railnet-diag's
 * own classification of them (configured, link-local, IPv4-mapped). */
#include <stdio.h>
#include <string.h>
#include "diag.h"

int gidIsV4(const unsigned char* r) {
  static const unsigned char pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(r, pre, 12) == 0;
}
static int gidConfigured(const unsigned char* r) {
  static const unsigned char zero[16];
  static const unsigned char ll[8] = {0xfe, 0x80};
  if (memcmp(r, zero, 16) == 0) return 0;
  if (memcmp(r, ll, 4) == 0 && memcmp(r + 4, zero, 12) == 0) return 0;
  return 1;
}
static int gidLinkLocal(const unsigned char* r) {
  static const unsigned char ll[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  return memcmp(r, ll, 8) == 0;
}
int gidValid(const unsigned char* r) { return gidConfigured(r) && !gidLinkLocal(r); }

int readGids(const portInfo* p, gidEntry* g, int max) {
  int n = 0;
  for (int i = 0; i < max; i++) {
    char buf[64];
    if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/gids/%d", p->dev, p->port, i) != 0) break;
    n = i + 1;
    memset(&g[i], 0, sizeof(g[i]));
    sfmt(g[i].text, sizeof(g[i].text), "%s", buf);
    unsigned v[8];
    if (sscanf(buf, "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
      for (int k = 0; k < 8; k++) {
        g[i].raw[2 * k] = (unsigned char)(v[k] >> 8);
        g[i].raw[2 * k + 1] = (unsigned char)v[k];
      }
      g[i].valid = gidConfigured(g[i].raw);
    }
    if (readSys(g[i].type, sizeof(g[i].type), "class/infiniband/%s/ports/%d/gid_attrs/types/%d", p->dev, p->port, i) == 0) {
      if (strncmp(g[i].type, "RoCE v2", 7) == 0) g[i].roceVer = 2;
      else if (strncmp(g[i].type, "IB/RoCE v1", 10) == 0 || strncmp(g[i].type, "RoCE v1", 7) == 0) g[i].roceVer = 1;
    }
    readSys(g[i].ndev, sizeof(g[i].ndev), "class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", p->dev, p->port, i);
  }
  return n;
}
