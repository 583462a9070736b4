/*
 * nccl_allreduce: one rank of a 2-rank NCCL job, through NCCL's public API only (nccl.h),
 * for test/gpu/run-nccl.sh. Rank 0 writes the ncclUniqueId to FILE, rank 1 reads it; each
 * rank then runs
 *   1. an all-reduce (sum) of COUNT floats: rank r holds r + 1 + i at index i, so every
 *      rank must end with 3 + 2i;
 *   2. a send/recv exchange: each rank sends COUNT floats (rank r: 1000 r + i) to the other
 *      and receives the other's;
 * and checks every element on the host. It prints one line per step ("rank R: allreduce
 * ok ...") and exits 0 when both are right, 1 otherwise.
 *   nccl_allreduce RANK FILE [COUNT] [GPU]
 * run-nccl.sh starts both ranks on the same GPU with a different NCCL_HOSTID each and
 * NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, so that NCCL takes them for two hosts and moves
 * the data through the net plugin.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NRANKS 2

static int rank = -1;

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)
#define NCCL_OK(call)                                                                    \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

/* Rank 0: write the id to FILE.tmp, then rename it, so that rank 1 never reads half. */
static void putId(const char* file, const ncclUniqueId* id) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp", file);
  FILE* f = fopen(tmp, "wb");
  if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0) {
    fprintf(stderr, "rank 0: cannot write %s: %s\n", file, strerror(errno));
    exit(1);
  }
}

/* Rank 1: wait up to 60 s for FILE. */
static void getId(const char* file, ncclUniqueId* id) {
  for (int tries = 0; tries < 600; tries++) {
    FILE* f = fopen(file, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (n == 1) return;
    }
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "rank 1: no NCCL id in %s after 60 s (did rank 0 start?)\n", file);
  exit(1);
}

/* Compare COUNT floats with want(i); print the first mismatch. */
static int check(const char* what, const float* got, size_t count, float base, float step) {
  for (size_t i = 0; i < count; i++) {
    float want = base + step * (float)i;
    if (got[i] != want) {
      printf("rank %d: %s WRONG: element %zu is %g, want %g\n", rank, what, i, got[i], want);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    fprintf(stderr, "usage: %s RANK ID_FILE [COUNT] [GPU]\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  const char* file = argv[2];
  size_t count = argc > 3 ? strtoull(argv[3], NULL, 0) : (size_t)1 << 20;
  int gpu = argc > 4 ? atoi(argv[4]) : 0;
  if (rank < 0 || rank >= NRANKS || count == 0 || count > ((size_t)1 << 28)) {
    fprintf(stderr, "rank must be 0 or 1, COUNT 1..2^28\n");
    return 2;
  }
  /* exact in float: the values stay below 2^24 */
  if (count > ((size_t)1 << 22)) count = (size_t)1 << 22;

  ncclUniqueId id;
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    putId(file, &id);
  } else {
    getId(file, &id);
  }
  CUDA_OK(cudaSetDevice(gpu));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, NRANKS, id, rank));

  size_t bytes = count * sizeof(float);
  float* host = malloc(bytes);
  float *sendbuf, *recvbuf;
  if (host == NULL) return 1;
  CUDA_OK(cudaMalloc((void**)&sendbuf, bytes));
  CUDA_OK(cudaMalloc((void**)&recvbuf, bytes));
  int bad = 0;

  /* 1. all-reduce: rank r holds r + 1 + i; the sum over both ranks is 3 + 2i */
  for (size_t i = 0; i < count; i++) host[i] = (float)(rank + 1) + (float)i;
  CUDA_OK(cudaMemcpy(sendbuf, host, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(recvbuf, 0, bytes));
  NCCL_OK(ncclAllReduce(sendbuf, recvbuf, count, ncclFloat, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host, recvbuf, bytes, cudaMemcpyDeviceToHost));
  if (check("allreduce", host, count, 3.0f, 2.0f)) bad = 1;
  else printf("rank %d: allreduce ok (%zu floats, sum over %d ranks)\n", rank, count, NRANKS);

  /* 2. send/recv: rank r sends 1000 r + i to the other rank and receives the other's */
  int peer = 1 - rank;
  for (size_t i = 0; i < count; i++) host[i] = 1000.0f * (float)rank + (float)i;
  CUDA_OK(cudaMemcpy(sendbuf, host, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(recvbuf, 0, bytes));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(sendbuf, count, ncclFloat, peer, comm, stream));
  NCCL_OK(ncclRecv(recvbuf, count, ncclFloat, peer, comm, stream));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host, recvbuf, bytes, cudaMemcpyDeviceToHost));
  if (check("sendrecv", host, count, 1000.0f * (float)peer, 1.0f)) bad = 1;
  else printf("rank %d: sendrecv ok (%zu floats from rank %d)\n", rank, count, peer);

  NCCL_OK(ncclCommDestroy(comm));
  CUDA_OK(cudaFree(sendbuf));
  CUDA_OK(cudaFree(recvbuf));
  CUDA_OK(cudaStreamDestroy(stream));
  free(host);
  if (rank == 0) unlink(file);
  return bad;
}
