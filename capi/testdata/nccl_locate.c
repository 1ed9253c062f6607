/* nccl_locate: the C library's device-buffer fast path on a real GPU
 * (issue 29: one cuPointerGetAttributes per buffer per call, the rest of
 * an allocation's attributes kept by its buffer id). One rank on GPU 0:
 *  - allreduce out of place on cudaMalloc'd buffers, at offsets inside
 *    them, then the send buffer freed and allocated again (often at the
 *    same address: a new buffer id) with new bytes: the result is the new
 *    bytes every time (a cache by address would reuse the old allocation);
 *  - the same on ncclMemAlloc'd memory and on host buffers;
 *  - host time per call of a 2-float allreduce on device buffers, ITERS
 *    calls (the small-message fast path), printed as "per call N us".
 *
 *   nccl_locate [ITERS]        (scripts/gpu-locate.sh builds and runs it) */
#include <cuda_runtime_api.h>
#include <time.h>

#include "check.h"

static const char *who(void) { return "nccl_locate"; }

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "nccl_locate: %s: %s\n", #x, cudaGetErrorString(e_));         \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

enum { N = 1 << 16 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* check runs an allreduce of send[off..N) into recv[off..N) (device or
 * host memory) and compares the result with want[off..N). */
static void check(const char *what, ncclComm_t comm, cudaStream_t s, float *send, float *recv, int off,
                  const float *want, int device) {
  static float got[N];
  CHECK(ncclAllReduce(send + off, recv + off, N - off, ncclFloat32, ncclSum, comm, s));
  CK(cudaStreamSynchronize(s));
  if (device) {
    CK(cudaMemcpy(got, recv, sizeof got, cudaMemcpyDeviceToHost));
  } else {
    memcpy(got, recv, sizeof got);
  }
  int wrong = 0;
  for (int i = off; i < N; i++) wrong += got[i] != want[i];
  if (wrong) FAIL("%s (offset %d): %d of %d elements wrong", what, off, wrong, N - off);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20000;
  int dev0 = 0;
  CK(cudaSetDevice(0));
  ncclComm_t comm;
  CHECK(ncclCommInitAll(&comm, 1, &dev0));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  static float want[N];
  float *send, *recv;
  CK(cudaMalloc((void **)&send, N * sizeof(float)));
  CK(cudaMalloc((void **)&recv, N * sizeof(float)));
  int reused = 0;
  for (int round = 0; round < 6; round++) {
    for (int i = 0; i < N; i++) want[i] = (float)((round * 7 + i) % 251) - 100;
    CK(cudaMemcpy(send, want, sizeof want, cudaMemcpyHostToDevice));
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc round %d", round);
    check(what, comm, s, send, recv, 0, want, 1);
    check(what, comm, s, send, recv, 16 * round, want, 1);
    float *old = send;
    CK(cudaFree(send));
    CK(cudaMalloc((void **)&send, N * sizeof(float)));
    reused += send == old;
  }
  printf("nccl_locate: %d of 6 allocations again at the freed address\n", reused);

  float *mem;
  CHECK(ncclMemAlloc((void **)&mem, N * sizeof(float)));
  for (int i = 0; i < N; i++) want[i] = (float)(i % 97);
  CK(cudaMemcpy(mem, want, sizeof want, cudaMemcpyHostToDevice));
  check("ncclMemAlloc", comm, s, mem, recv, 0, want, 1);
  CHECK(ncclMemFree(mem));

  static float hsend[N], hrecv[N];
  for (int i = 0; i < N; i++) hsend[i] = want[i] = (float)(i % 13);
  check("host buffers", comm, s, hsend, hrecv, 0, want, 0);

  for (int i = 0; i < 100; i++) CHECK(ncclAllReduce(send, recv, 2, ncclFloat32, ncclSum, comm, s));
  CK(cudaStreamSynchronize(s));
  double t0 = now();
  for (int i = 0; i < iters; i++) CHECK(ncclAllReduce(send, recv, 2, ncclFloat32, ncclSum, comm, s));
  double t1 = now();
  CK(cudaStreamSynchronize(s));
  printf("nccl_locate: 8 B allreduce on device buffers: per call %.2f us (host time, %d calls)\n", (t1 - t0) / iters * 1e6, iters);

  CK(cudaFree(send));
  CK(cudaFree(recv));
  CHECK(ncclCommDestroy(comm));
  if (failures) return 1;
  printf("nccl_locate: ok\n");
  return 0;
}
