/* eager_timeline: where an eager small call's time goes on the GPU, for
 * any NCCL library (NCCL's, or flexlink's by LD_PRELOAD), at 2 MPI ranks,
 * one GPU each (scripts/gpu-twogpu.sh PARTS=timeline builds and runs it).
 *
 *   mpirun -np 2 ./eager_timeline ITERS
 *
 * For ncclAllReduce and for ncclSend+ncclRecv in a group (nccl-tests'
 * sendrecv at 2 ranks) of 8 bytes, ITERS calls after 200 warm-up calls,
 * each between two timing events on the stream (before_i, after_i). Per
 * rank and call kind it prints the medians of: the host time of a call
 * (the library's enqueue alone), the stream's time inside the call
 * (after_i - before_i: the kernel, its wait for the peer, the library's
 * own stream work), the stream's time between calls (before_{i+1} -
 * after_i: idle, waiting for the host, plus two event records), and the
 * whole iteration (before_{i+1} - before_i). Nothing else runs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime.h>
#include "nccl.h"

#define NCHECK(call)                                                                  \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    if (r_ != ncclSuccess) {                                                          \
      fprintf(stderr, "%s -> %s\n", #call, ncclGetErrorString(r_));                   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)
#define CCHECK(call)                                                                  \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "%s -> %s\n", #call, cudaGetErrorString(e_));                   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float median(float *v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return v[n / 2];
}

static void call(int kind, ncclComm_t comm, float *send, float *recv, int peer, cudaStream_t s) {
  if (kind == 0) {
    NCHECK(ncclAllReduce(send, recv, 2, ncclFloat, ncclSum, comm, s));
    return;
  }
  NCHECK(ncclGroupStart());
  NCHECK(ncclSend(send, 2, ncclFloat, peer, comm, s));
  NCHECK(ncclRecv(recv, 2, ncclFloat, peer, comm, s));
  NCHECK(ncclGroupEnd());
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, n, ndev;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  CCHECK(cudaGetDeviceCount(&ndev));
  CCHECK(cudaSetDevice(me % ndev));
  ncclUniqueId id;
  if (me == 0) NCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCHECK(ncclCommInitRank(&comm, n, id, me));
  cudaStream_t s;
  CCHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *send, *recv;
  CCHECK(cudaMalloc((void **)&send, 64));
  CCHECK(cudaMalloc((void **)&recv, 64));
  CCHECK(cudaMemset(send, 0, 64));
  cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (iters + 1));
  for (int i = 0; i < 2 * (iters + 1); i++) CCHECK(cudaEventCreate(&ev[i]));
  float *host = malloc(sizeof(float) * iters), *in = malloc(sizeof(float) * iters),
        *gap = malloc(sizeof(float) * iters), *whole = malloc(sizeof(float) * iters);
  const char *names[2] = {"allreduce", "sendrecv"};
  for (int kind = 0; kind < 2; kind++) {
    int peer = (me + 1) % n;
    for (int i = 0; i < 200; i++) call(kind, comm, send, recv, peer, s);
    CCHECK(cudaStreamSynchronize(s));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i <= iters; i++) {
      CCHECK(cudaEventRecord(ev[2 * i], s));
      if (i == iters) break;
      double t0 = now_us();
      call(kind, comm, send, recv, peer, s);
      host[i] = (float)(now_us() - t0);
      CCHECK(cudaEventRecord(ev[2 * i + 1], s));
    }
    CCHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < iters; i++) {
      CCHECK(cudaEventElapsedTime(&in[i], ev[2 * i], ev[2 * i + 1]));
      CCHECK(cudaEventElapsedTime(&gap[i], ev[2 * i + 1], ev[2 * i + 2]));
      CCHECK(cudaEventElapsedTime(&whole[i], ev[2 * i], ev[2 * i + 2]));
      in[i] *= 1000, gap[i] *= 1000, whole[i] *= 1000;
    }
    float total;
    CCHECK(cudaEventElapsedTime(&total, ev[0], ev[2 * iters]));
    for (int r = 0; r < n; r++) {
      if (r == me)
        printf("TIMELINE rank %d %-9s 8 B x %d: per call %.2f us; medians: host %.2f, stream in call %.2f, between calls %.2f, iteration %.2f\n",
               me, names[kind], iters, total * 1000 / iters, median(host, iters), median(in, iters), median(gap, iters), median(whole, iters));
      fflush(stdout);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  NCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
