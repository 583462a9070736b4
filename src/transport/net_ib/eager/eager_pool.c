/*
 * The eager buffers of a process (eager_pool.h).
 */
#include "eager_pool.h"
#include "param.h"

enum { P_POOL };
static const railnetParam poolParams[] = {
    [P_POOL] = RAILNET_PARAM_INT_DEF("RAILNET_IB_EAGER_POOL", RAILNET_IB_EAGER_POOL_DEFAULT, 1, 1 << 20,
                                     "IB: the most eager buffers (a receive comm's ring, a send comm's bounce "
                                     "slots: 16 slots of RAILNET_IB_EAGER_SIZE + 8 bytes rounded up to 64) in use "
                                     "per set of devices (a vDevice's) in a process; registered 8 at a time when a "
                                     "comm's first small message came. A comm that finds the pool at this bound "
                                     "keeps the clear-to-send protocol"),
};
RAILNET_PARAM_TABLE("net_ib/eager_pool", poolParams);

int railnetIbEagerPoolMax(void) { return (int)railnetParamInt(&poolParams[P_POOL]); }

static struct railnetIbRegPool pool =
    RAILNET_IB_REGPOOL_INIT("eager buffers", "lower RAILNET_IB_EAGER_POOL or RAILNET_IB_EAGER_SIZE",
                            RAILNET_IB_EAGER_POOL_CHUNK);
static uint64_t refused;

ncclResult_t railnetIbEagerPoolTake(struct ncclIbNetCommBase* base, size_t bytes, int remote,
                                    struct railnetIbRegBuf* out, int* got) {
  struct railnetIbRegDevs devs;
  railnetIbCommRegDevs(base, &devs);
  int access = IBV_ACCESS_LOCAL_WRITE | (remote ? IBV_ACCESS_REMOTE_WRITE : 0);
  ncclResult_t r = railnetIbRegPoolTake(&pool, &devs, bytes, access, railnetIbEagerPoolMax(), out, got);
  if (r == ncclSuccess && !*got) __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
  return r;
}

void railnetIbEagerPoolGive(struct railnetIbRegBuf* b) { railnetIbRegPoolGive(&pool, b); }

void railnetIbEagerPoolGetStats(struct railnetIbEagerPoolStats* s) {
  railnetIbRegPoolCount(&pool, &s->inUse, &s->chunks);
  s->refused = __atomic_load_n(&refused, __ATOMIC_RELAXED);
}
