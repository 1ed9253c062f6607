/*
 * nccl_withhold: a rank of an NCCL program withholds a collective, as
 * issue 30's PyTorch job did (capi's TestCLibraryVerdict runs it under
 * flexrun --nccl-lib, with the program linked against another
 * libnccl.so.2, as PyTorch's wheel is).
 * Run as N ranks under flexrun: nccl_withhold ID_FILE BAD_RANK. Rank and
 * size come from FLEXLINK_RANK / FLEXLINK_WORLD_SIZE; rank 0 writes the
 * ncclUniqueId to ID_FILE (by rename), the others wait for it. Every rank
 * makes four allreduces on host buffers; then BAD_RANK withholds the
 * fifth (it sleeps until flexrun ends it) while the others' fifth fails
 * at FLEXLINK_TIMEOUT: they print ncclGetLastError and exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nccl.h"

int main(int argc, char **argv) {
  const char *rs = getenv("FLEXLINK_RANK"), *ns = getenv("FLEXLINK_WORLD_SIZE");
  if (argc != 3 || !rs || !ns) {
    fprintf(stderr, "usage: nccl_withhold ID_FILE BAD_RANK (under flexrun)\n");
    return 2;
  }
  int me = atoi(rs), n = atoi(ns), bad = atoi(argv[2]);
  ncclUniqueId id;
  if (me == 0) {
    char tmp[4200];
    if (ncclGetUniqueId(&id) != ncclSuccess) { fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetLastError(NULL)); return 1; }
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, argv[1]) != 0) { perror("write id"); return 1; }
  } else {
    int got = 0;
    for (int tries = 0; tries < 3000 && !got; tries++) { /* at most 30 s */
      FILE *f = fopen(argv[1], "rb");
      if (f) {
        got = fread(&id, sizeof id, 1, f) == 1;
        fclose(f);
      }
      if (!got) usleep(10000);
    }
    if (!got) { fprintf(stderr, "rank %d: no id in %s\n", me, argv[1]); return 1; }
  }
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, me) != ncclSuccess) { fprintf(stderr, "rank %d: init: %s\n", me, ncclGetLastError(NULL)); return 1; }
  for (int i = 1; i <= 5; i++) {
    if (i == 5 && me == bad) {
      sleep(120); /* stuck elsewhere: flexrun ends it */
      fprintf(stderr, "rank %d: still running 120 s after withholding\n", me);
      return 3;
    }
    double x = me + 1;
    if (ncclAllReduce(&x, &x, 1, ncclDouble, ncclSum, comm, NULL) != ncclSuccess) {
      fprintf(stderr, "rank %d: allreduce %d: %s\n", me, i, ncclGetLastError(comm));
      return 1;
    }
    if (x != n * (n + 1) / 2.0) { fprintf(stderr, "rank %d: allreduce %d: %g, want %g\n", me, i, x, n * (n + 1) / 2.0); return 1; }
  }
  fprintf(stderr, "rank %d: the fifth allreduce completed without rank %d\n", me, bad);
  return 1;
}
