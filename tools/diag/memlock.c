/* The locked-memory section: RLIMIT_MEMLOCK against what RDMA registrations pin. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include "diag.h"

static unsigned long long memTotalBytes(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024ULL;
}

static void fmtLimit(rlim_t v, char* buf, size_t size) {
  if (v == RLIM_INFINITY) sfmt(buf, size, "unlimited");
  else sfmt(buf, size, "%llu KiB", (unsigned long long)v / 1024);
}

void sectionMemlock(void) {
  section("memlock", "Locked memory (RLIMIT_MEMLOCK, ulimit -l)");
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    text("  getrlimit failed: %s\n", strerror(errno));
    return;
  }
  char soft[32], hard[32];
  fmtLimit(rl.rlim_cur, soft, sizeof(soft));
  fmtLimit(rl.rlim_max, hard, sizeof(hard));
  unsigned long long total = memTotalBytes();
  int ok = rl.rlim_cur == RLIM_INFINITY || (total > 0 && rl.rlim_cur >= total);
  jStr("soft", soft);
  jStr("hard", hard);
  jBool("ok", ok);
  text("  soft %s, hard %s\n", soft, hard);
  if (ok) return;
  int rdma = 0;
  for (int i = 0; i < nPorts; i++) rdma |= ports[i].selected && ports[i].state == 4;
  const char* fix = rl.rlim_max == RLIM_INFINITY
                        ? "run 'ulimit -l unlimited' in the job script (the hard limit allows it), or add "
                          "'* soft memlock unlimited' and '* hard memlock unlimited' to /etc/security/limits.conf"
                        : "add '* soft memlock unlimited' and '* hard memlock unlimited' to "
                          "/etc/security/limits.conf and log in again (Slurm: also LimitMEMLOCK=infinity in "
                          "slurmd's systemd unit, and PropagateResourceLimits); check with ulimit -l";
  if (rdma)
    PROBLEM(fix, "the locked-memory limit is %s: RDMA registrations pin memory and fail beyond it (NCCL WARN Call "
            "to ibv_reg_mr / ibv_create_qp failed)", soft);
  else
    WARNING(fix, "the locked-memory limit is %s: harmless for the Socket transport, but RDMA registrations would "
            "fail beyond it (ibv_reg_mr / ibv_create_qp failed)", soft);
}
