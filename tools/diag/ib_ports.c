/* The RDMA port scan: every port under <sysfs>/class/infiniband with its state, link layer,
 * rate, netdev and MTU, and whether NCCL_IB_HCA lets railnet use it. railnet-diag's own
 * reading of sysfs, next to (not through) the IB transport's discovery. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diag.h"
#include "param.h"
#include "socket.h"

portInfo ports[MAX_PORTS];
int nPorts;

/* "4: ACTIVE" -> 4 and "ACTIVE". */
static int parseNumName(const char* s, char* name, size_t size) {
  int v = -1;
  const char* colon = strchr(s, ':');
  if (sscanf(s, "%d", &v) != 1) v = -1;
  sfmt(name, size, "%s", colon ? colon + 1 + strspn(colon + 1, " ") : s);
  return v;
}

/* The netdev behind a RoCE port (first GID's ndev), else the device's first net/ entry. */
static void portNetdev(portInfo* p) {
  p->netdev[0] = '\0';
  if (readSys(p->netdev, sizeof(p->netdev), "class/infiniband/%s/ports/%d/gid_attrs/ndevs/0", p->dev, p->port) == 0)
    return;
  char path[PATH_MAX + 64];
  sfmt(path, sizeof(path), "%s/class/infiniband/%s/device/net", sysfsRoot, p->dev);
  DIR* d = opendir(path);
  if (d == NULL) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      sfmt(p->netdev, sizeof(p->netdev), "%s", e->d_name);
      break;
    }
  closedir(d);
}

/* MTU: the netdev's (RoCE carries at most that less headers); IB active MTU needs verbs. */
static int portMtu(const portInfo* p) {
  char buf[32];
  if (p->netdev[0] && readSys(buf, sizeof(buf), "class/net/%s/mtu", p->netdev) == 0) return atoi(buf);
  return 0;
}

static int cmpName(const void* a, const void* b) { return strcmp((const char*)a, (const char*)b); }

void scanPorts(void) {
  char path[PATH_MAX + 64];
  sfmt(path, sizeof(path), "%s/class/infiniband", sysfsRoot);
  DIR* d = opendir(path);
  if (d == NULL) return;
  char devs[64][64];
  int nd = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && nd < 64)
    if (e->d_name[0] != '.') sfmt(devs[nd++], 64, "%s", e->d_name);
  closedir(d);
  qsort(devs, (size_t)nd, sizeof(devs[0]), cmpName);

  railnetParamSource src;
  const char* hca = railnetParamRaw("NCCL_IB_HCA", &src);
  railnetIfList hcaList;
  int useList = hca && hca[0] && railnetIfListParse(hca, 1, &hcaList) == ncclSuccess;

  for (int i = 0; i < nd; i++) {
    for (int port = 1; port < 16 && nPorts < MAX_PORTS; port++) {
      char buf[128];
      if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/state", devs[i], port) != 0) continue;
      portInfo* p = &ports[nPorts++];
      memset(p, 0, sizeof(*p));
      sfmt(p->dev, sizeof(p->dev), "%s", devs[i]);
      p->port = port;
      p->state = parseNumName(buf, p->stateName, sizeof(p->stateName));
      if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/phys_state", devs[i], port) == 0)
        parseNumName(buf, p->phys, sizeof(p->phys));
      if (readSys(p->link, sizeof(p->link), "class/infiniband/%s/ports/%d/link_layer", devs[i], port) != 0)
        sfmt(p->link, sizeof(p->link), "InfiniBand");
      if (readSys(p->rateText, sizeof(p->rateText), "class/infiniband/%s/ports/%d/rate", devs[i], port) == 0) {
        p->gbps = atof(p->rateText);
        const char* paren = strchr(p->rateText, '(');
        if (paren) sscanf(paren + 1, "%15[0-9xX]", p->width);
      }
      portNetdev(p);
      p->mtu = portMtu(p);
      p->selected = useList ? railnetIfListSelects(&hcaList, p->dev, p->port) : 1;
    }
  }
}
