/* The GPUDirect RDMA section: the NVIDIA driver, the peer-memory modules, and DMA-BUF per
 * RDMA device, by the IB transport's own probes (railnetIbExplainGdr, railnetIbExplainDmaBuf). */
#include <stdio.h>
#include <string.h>
#include "diag.h"

void sectionGpuDirect(void) {
  section("gpudirect", "GPUDirect RDMA");
  struct railnetIbGdrExplain gdr;
  railnetIbExplainGdr(&gdr);
  int nvidia = gdr.nvidiaDriver;
  int peermem = gdr.nvidiaPeermem; /* nvidia_peermem */
  int nvPeerMem = gdr.nvPeerMem;   /* legacy nv_peer_mem */
  jBool("nvidia_driver", nvidia);
  jBool("nvidia_peermem", peermem);
  jBool("nv_peer_mem", nvPeerMem);
  text("  NVIDIA driver module: %s\n", nvidia ? "loaded" : "not loaded");
  text("  peer-memory module: %s\n", peermem ? "nvidia_peermem" : nvPeerMem ? "nv_peer_mem (legacy)" : "none");
  int anyDmaBuf = 0;
  jOpen("dmabuf", '[');
  for (int i = 0; i < nPorts; i++) {
    if (i > 0 && strcmp(ports[i].dev, ports[i - 1].dev) == 0) continue;
    char why[160];
    int d = railnetIbExplainDmaBuf(ports[i].dev, why, sizeof(why));
    anyDmaBuf |= d == 1;
    text("  DMA-BUF on %s: %s (%s)\n", ports[i].dev, d == 1 ? "supported" : d == 0 ? "not supported" : "unknown", why);
    jOpen(NULL, '{');
    jStr("device", ports[i].dev);
    jStr("dmabuf", d == 1 ? "supported" : d == 0 ? "unsupported" : "unknown");
    jStr("why", why);
    jClose('}');
  }
  jClose(']');
  if (!nvidia) {
    text("  no NVIDIA GPU driver: GPUDirect RDMA does not apply\n");
    return;
  }
  int anyUsed = 0;
  for (int i = 0; i < nPorts; i++) anyUsed |= ports[i].selected;
  if (anyUsed && !peermem && !nvPeerMem && !anyDmaBuf)
    WARNING("modprobe nvidia_peermem (shipped with the NVIDIA driver), or use DMA-BUF (kernel >= 5.12, open GPU "
            "kernel module, rdma-core >= 34)",
            "no peer-memory module is loaded and no device showed DMA-BUF support: NICs cannot read GPU memory, so "
            "NCCL stages GPU data through host memory (GPUDirect RDMA off)");
}
