/* The locked-memory section: RLIMIT_MEMLOCK against what RDMA registrations pin. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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

/* Does this process hold CAP_IPC_LOCK in its effective set (/proc/self/status)? -1 unknown. */
static int hasIpcLock(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  unsigned long long eff = 0;
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) found = sscanf(line, "CapEff: %llx", &eff) == 1;
  fclose(f);
  return found ? (int)((eff >> 14) & 1) : -1; /* CAP_IPC_LOCK is capability 14 */
}

/* What the process can actually pin: mlock of a buffer 1 MiB beyond the soft limit (only for
 * limits up to 256 MiB, so the test stays small). 1 it pinned it, 0 it could not, -1 untested. */
static int pinsBeyond(rlim_t limit) {
  if (limit > (256ULL << 20)) return -1;
  size_t size = (size_t)limit + (1u << 20);
  void* buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) return -1;
  int ok = mlock(buf, size) == 0;
  if (ok) munlock(buf, size);
  munmap(buf, size);
  return ok;
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
  int cap = ok ? -1 : hasIpcLock(), pinned = ok ? -1 : pinsBeyond(rl.rlim_cur);
  /* CAP_IPC_LOCK lifts the limit for this process: what counts is what it can pin. Without the
   * capability the kernel never pins beyond the limit, so an mlock that "succeeds" there is an
   * interceptor's (AddressSanitizer makes mlock a no-op): it proves nothing */
  int capOk = !ok && (cap == 1 ? pinned != 0 : cap == -1 && pinned == 1);
  jStr("soft", soft);
  jStr("hard", hard);
  jBool("ok", ok || capOk);
  if (!ok) jBool("CAP_IPC_LOCK", cap == 1);
  if (pinned >= 0) jBool("pinned_beyond_limit", pinned == 1);
  text("  soft %s, hard %s\n", soft, hard);
  if (ok) return;
  if (capOk) {
    text("  this process holds CAP_IPC_LOCK%s: the limit does not bind it (a job started the same way, with the "
         "capability, pins as much as RDMA needs)\n", pinned == 1 ? " and pinned 1 MiB beyond the limit" : "");
    return;
  }
  int rdma = 0;
  for (int i = 0; i < nPorts; i++) rdma |= ports[i].selected && ports[i].state == 4;
  const char* fix = rl.rlim_max == RLIM_INFINITY
                        ? "run 'ulimit -l unlimited' in the job script (the hard limit allows it), or add "
                          "'* soft memlock unlimited' and '* hard memlock unlimited' to /etc/security/limits.conf; "
                          "in a container: give it CAP_IPC_LOCK (Kubernetes securityContext.capabilities.add: "
                          "[IPC_LOCK], Docker --cap-add IPC_LOCK) or raise the limit (docker run --ulimit memlock=-1)"
                        : "add '* soft memlock unlimited' and '* hard memlock unlimited' to "
                          "/etc/security/limits.conf and log in again (Slurm: also LimitMEMLOCK=infinity in "
                          "slurmd's systemd unit, and PropagateResourceLimits); in a container: give it "
                          "CAP_IPC_LOCK (Kubernetes securityContext.capabilities.add: [IPC_LOCK], Docker "
                          "--cap-add IPC_LOCK) or raise the limit (docker run --ulimit memlock=-1); check with "
                          "ulimit -l";
  if (rdma)
    PROBLEM(fix, "the locked-memory limit is %s and this process %s: RDMA registrations pin memory and fail beyond "
            "it (NCCL WARN Call to ibv_reg_mr / ibv_create_qp failed)", soft,
            pinned == 0 ? "could not pin 1 MiB beyond it (no CAP_IPC_LOCK)" : "lacks CAP_IPC_LOCK");
  else
    WARNING(fix, "the locked-memory limit is %s: harmless for the Socket transport, but RDMA registrations would "
            "fail beyond it (ibv_reg_mr / ibv_create_qp failed)", soft);
}
