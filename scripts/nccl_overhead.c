/* nccl_overhead: time per ncclAllReduce call on small host buffers through
 * flexlink's libnccl.so.2 (the C API's overhead over the Go API, which
 * flexbench measures on the same sizes in the same run: scripts/bench-capi.sh).
 *
 *   flexrun -np 2 ./nccl_overhead ID_FILE ITERS
 *
 * Rank 0 writes its ncclUniqueId to ID_FILE; the others read it. Prints one
 * line per size: bytes, microseconds per call (mean over ITERS after 100
 * warm-up calls), and the check of the last result against the sum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    ncclResult_t r_ = (call);                                                        \
    if (r_ != ncclSuccess) {                                                         \
      fprintf(stderr, "%s -> %s: %s\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nccl_overhead ID_FILE ITERS\n");
    return 2;
  }
  int me = atoi(getenv("FLEXLINK_RANK")), n = atoi(getenv("FLEXLINK_WORLD_SIZE")), iters = atoi(argv[2]);
  ncclUniqueId id;
  if (me == 0) {
    char tmp[4200];
    CHECK(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, argv[1]) != 0) return 1;
  } else {
    int ok = 0;
    for (int t = 0; t < 6000 && !ok; t++) {
      FILE *f = fopen(argv[1], "rb");
      if (f) {
        ok = fread(&id, sizeof id, 1, f) == 1;
        fclose(f);
      }
      if (!ok) usleep(10000);
    }
    if (!ok) return 1;
  }
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, me));
  for (size_t bytes = 8; bytes <= 65536; bytes *= 8) {
    size_t count = bytes / sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    for (size_t i = 0; i < count; i++) x[i] = (float)(me + 1);
    for (int i = 0; i < 100; i++) CHECK(ncclAllReduce(x, y, count, ncclFloat, ncclSum, comm, NULL));
    double t0 = now();
    for (int i = 0; i < iters; i++) CHECK(ncclAllReduce(x, y, count, ncclFloat, ncclSum, comm, NULL));
    double us = (now() - t0) * 1e6 / iters;
    float want = (float)(n * (n + 1) / 2);
    int wrong = 0;
    for (size_t i = 0; i < count; i++) wrong += y[i] != want;
    if (me == 0) printf("%10zu bytes  %8.2f us/call  #wrong %d\n", bytes, us, wrong);
    free(x);
    free(y);
  }
  CHECK(ncclCommDestroy(comm));
  return 0;
}
