/* nccl_percall: host time per ncclAllReduce call through libnccl.so.2 at
 * one rank (ncclCommInitAll), in place on an 8-byte buffer: the C
 * boundary's own cost (the cgo entry, the thread and handle look-ups)
 * with as little collective work as there can be. Host memory, so it runs
 * without a GPU; with CUDA present the buffer is still host memory.
 *
 *   cc -O2 [-DFLEXLINK_NCCL_NO_CUDA] -Iinclude -o nccl_percall capi/testdata/nccl_percall.c -L<dir of libnccl.so.2> -lnccl
 *   ./nccl_percall [ITERS]
 *
 * Prints the mean microseconds per call over ITERS calls after 1000
 * warm-up calls, and checks the result (one rank's sum is its input). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 200000;
  ncclComm_t comm;
  int dev = 0;
  if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float buf[2] = {1.5f, -2.0f};
  for (int i = 0; i < 1000; i++) ncclAllReduce(buf, buf, 2, ncclFloat, ncclSum, comm, NULL);
  double t0 = now();
  for (int i = 0; i < iters; i++) {
    if (ncclAllReduce(buf, buf, 2, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) {
      fprintf(stderr, "ncclAllReduce: %s\n", ncclGetLastError(NULL));
      return 1;
    }
  }
  double us = (now() - t0) * 1e6 / iters;
  int ok = buf[0] == 1.5f && buf[1] == -2.0f;
  printf("allreduce 8 B in place, 1 rank, host buffer: %.3f us per call over %d calls (%s)\n", us, iters, ok ? "result right" : "RESULT WRONG");
  ncclCommDestroy(comm);
  return ok ? 0 : 1;
}
