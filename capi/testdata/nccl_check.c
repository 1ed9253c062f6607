/*
 * nccl_check: flexlink's libnccl.so.2 from C, on host buffers (the
 * host-buffer extension: this test runs on machines without a GPU).
 * Run as N ranks under flexrun: nccl_check ID_FILE. Rank and size come from
 * FLEXLINK_RANK / FLEXLINK_WORLD_SIZE; rank 0 calls ncclGetUniqueId and
 * writes the id to ID_FILE (atomically, by rename), the other ranks wait
 * for the file, as programs under mpirun pass it with MPI_Bcast.
 * Every result is checked against a reference computed here in double
 * precision. Prints "nccl_check rank R: ok" at the end, exits 1 on failure.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "check.h"

static int me, n;

static const char *who(void) {
  static char s[32];
  snprintf(s, sizeof s, "rank %d", me);
  return s;
}

static double value(int rank, size_t i) { return (double)((rank + 1) * 1000 + (int)(i % 997)) / 8.0; }

static void fill(float *b, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) b[i] = (float)value(rank, i);
}

static void check_floats(const char *what, const float *got, const double *want, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (fabs(got[i] - want[i]) > 1e-4 * fabs(want[i]) + 1e-6) {
      FAIL("%s: element %zu = %g, want %g", what, i, got[i], want[i]);
      return;
    }
  }
}

static ncclUniqueId share_id(const char *path, const char *tag) {
  ncclUniqueId id;
  char file[4096], tmp[4200];
  snprintf(file, sizeof file, "%s.%s", path, tag);
  if (me == 0) {
    CHECK(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0) {
      perror("write id");
      exit(1);
    }
    return id;
  }
  for (int tries = 0; tries < 6000; tries++) { /* at most 60 s */
    FILE *f = fopen(file, "rb");
    if (f) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "rank %d: no id in %s after 60 s\n", me, file);
  exit(1);
}

static void test_collectives(ncclComm_t comm) {
  const size_t count = 1000 + 3; /* not a multiple of the ranks */
  float *send = malloc(count * n * sizeof(float));
  float *recv = malloc(count * n * sizeof(float));
  double *want = malloc(count * n * sizeof(double));
  cudaStream_t s = NULL;

  /* allreduce: sum, avg, max */
  fill(send, count, me);
  CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, s));
  for (size_t i = 0; i < count; i++) { want[i] = 0; for (int r = 0; r < n; r++) want[i] += value(r, i); }
  check_floats("allreduce sum", recv, want, count);
  CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclAvg, comm, s));
  for (size_t i = 0; i < count; i++) want[i] /= n;
  check_floats("allreduce avg", recv, want, count);
  CHECK(ncclAllReduce(send, send, count, ncclFloat, ncclMax, comm, s)); /* in place */
  for (size_t i = 0; i < count; i++) want[i] = value(n - 1, i);
  check_floats("allreduce max (in place)", send, want, count);

  /* double precision allreduce */
  double *dsend = malloc(count * sizeof(double)), *drecv = malloc(count * sizeof(double));
  for (size_t i = 0; i < count; i++) dsend[i] = value(me, i) * 1e-3;
  CHECK(ncclAllReduce(dsend, drecv, count, ncclDouble, ncclSum, comm, s));
  for (size_t i = 0; i < count; i++) {
    double w = 0;
    for (int r = 0; r < n; r++) w += value(r, i) * 1e-3;
    if (fabs(drecv[i] - w) > 1e-12 * fabs(w)) { FAIL("allreduce double: %zu = %.17g want %.17g", i, drecv[i], w); break; }
  }

  /* allgather */
  fill(send, count, me);
  CHECK(ncclAllGather(send, recv, count, ncclFloat, comm, s));
  for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) want[r * count + i] = (float)value(r, i);
  check_floats("allgather", recv, want, count * n);

  /* reduce-scatter: block b of rank r's send holds value(r, b*count+i) */
  for (size_t i = 0; i < count * n; i++) send[i] = (float)value(me, i);
  CHECK(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, s));
  for (size_t i = 0; i < count; i++) { want[i] = 0; for (int r = 0; r < n; r++) want[i] += (float)value(r, me * count + i); }
  check_floats("reducescatter sum", recv, want, count);

  /* broadcast from the last rank, and ncclBcast in place from rank 0 */
  fill(send, count, me);
  memset(recv, 0, count * sizeof(float));
  CHECK(ncclBroadcast(send, recv, count, ncclFloat, n - 1, comm, s));
  for (size_t i = 0; i < count; i++) want[i] = (float)value(n - 1, i);
  check_floats("broadcast", recv, want, count);
  fill(send, count, me);
  CHECK(ncclBcast(send, count, ncclFloat, 0, comm, s));
  for (size_t i = 0; i < count; i++) want[i] = (float)value(0, i);
  check_floats("bcast", send, want, count);

  /* reduce to rank 1 % n */
  int root = 1 % n;
  fill(send, count, me);
  memset(recv, 0, count * sizeof(float));
  CHECK(ncclReduce(send, recv, count, ncclFloat, ncclSum, root, comm, s));
  if (me == root) {
    for (size_t i = 0; i < count; i++) { want[i] = 0; for (int r = 0; r < n; r++) want[i] += value(r, i); }
    check_floats("reduce", recv, want, count);
  }

  /* all-to-all: block j of rank r's send is value(r, j*count+i) */
  for (size_t i = 0; i < count * n; i++) send[i] = (float)value(me, i);
  CHECK(ncclAlltoAll(send, recv, count, ncclFloat, comm, s));
  for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) want[r * count + i] = (float)value(r, me * count + i);
  check_floats("alltoall", recv, want, count * n);

  /* the same all-to-all as grouped send/recv (torch's all_to_all_single) */
  memset(recv, 0, count * n * sizeof(float));
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    CHECK(ncclSend(send + r * count, count, ncclFloat, r, comm, s));
    CHECK(ncclRecv(recv + r * count, count, ncclFloat, r, comm, s));
  }
  CHECK(ncclGroupEnd());
  check_floats("grouped send/recv alltoall", recv, want, count * n);

  /* ring exchange: send to the next rank, receive from the previous */
  fill(send, count, me);
  CHECK(ncclGroupStart());
  CHECK(ncclSend(send, count, ncclFloat, (me + 1) % n, comm, s));
  CHECK(ncclRecv(recv, count, ncclFloat, (me + n - 1) % n, comm, s));
  CHECK(ncclGroupEnd());
  for (size_t i = 0; i < count; i++) want[i] = (float)value((me + n - 1) % n, i);
  check_floats("ring send/recv", recv, want, count);

  /* gather and scatter to/from rank 0 */
  fill(send, count, me);
  CHECK(ncclGather(send, recv, count, ncclFloat, 0, comm, s));
  if (me == 0) {
    for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) want[r * count + i] = (float)value(r, i);
    check_floats("gather", recv, want, count * n);
  }
  for (size_t i = 0; i < count * n; i++) send[i] = (float)value(0, i);
  CHECK(ncclScatter(send, recv, count, ncclFloat, 0, comm, s));
  for (size_t i = 0; i < count; i++) want[i] = (float)value(0, me * count + i);
  check_floats("scatter", recv, want, count);

  /* PreMulSum: sum of 0.5 * x */
  float half = 0.5f;
  ncclRedOp_t pre;
  CHECK(ncclRedOpCreatePreMulSum(&pre, &half, ncclFloat, ncclScalarHostImmediate, comm));
  fill(send, count, me);
  CHECK(ncclAllReduce(send, recv, count, ncclFloat, pre, comm, s));
  for (size_t i = 0; i < count; i++) { want[i] = 0; for (int r = 0; r < n; r++) want[i] += 0.5 * value(r, i); }
  check_floats("allreduce premulsum", recv, want, count);
  CHECK(ncclRedOpDestroy(pre, comm));

  free(send); free(recv); free(want); free(dsend); free(drecv);
}

static void test_bad_input(ncclComm_t comm) {
  float buf[8] = {0};
  EXPECT_ERR(ncclAllReduce(buf, buf, 8, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument, "NULL");
  EXPECT_ERR(ncclAllReduce(buf, buf, 8, (ncclDataType_t)42, ncclSum, comm, NULL), ncclInvalidArgument, "datatype");
  /* every NCCL datatype is served: uint32 sums wrap around */
  uint32_t u[4] = {0xffffffffu, 1, 2, 3};
  CHECK(ncclAllReduce(u, u, 4, ncclUint32, ncclSum, comm, NULL));
  for (int i = 0; i < 4; i++) {
    uint32_t want = (i == 0 ? 0xffffffffu : (uint32_t)i) * (uint32_t)n;
    if (u[i] != want) FAIL("uint32 allreduce element %d = %u, want %u", i, u[i], want);
  }
  EXPECT_ERR(ncclAllReduce(buf, buf, 8, ncclFloat, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument, "operator");
  EXPECT_ERR(ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "overflows");
  EXPECT_ERR(ncclAllReduce(NULL, buf, 8, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "NULL");
  EXPECT_ERR(ncclBroadcast(buf, buf, 8, ncclFloat, n, comm, NULL), ncclInvalidArgument, "root");
  EXPECT_ERR(ncclSend(buf, 8, ncclFloat, -1, comm, NULL), ncclInvalidArgument, "peer");
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "not inside a group");
  ncclComm_t bogus = (ncclComm_t)(uintptr_t)0x7777777;
  EXPECT_ERR(ncclAllReduce(buf, buf, 8, ncclFloat, ncclSum, bogus, NULL), ncclInvalidArgument, "not a live communicator");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0x1234;
  ncclComm_t c2;
  ncclUniqueId zero;
  memset(&zero, 0, sizeof zero);
  EXPECT_ERR(ncclCommInitRank(&c2, n, zero, me), ncclInvalidArgument, "ncclUniqueId");
  EXPECT_ERR(ncclCommSplit(comm, 0, 0, &c2, &cfg), ncclInvalidArgument, "magic");
  EXPECT_ERR(ncclCommWindowRegister(comm, buf, sizeof buf, NULL, 0), ncclInvalidArgument, "NULL");
  /* a simulated group (torch's _time_estimator): closed, nothing run, an estimate */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_ERR(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "not inside a group");
  float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  float zeros[8] = {0};
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(ones, zeros, 8, ncclFloat, ncclSum, comm, NULL));
  CHECK(ncclGroupSimulateEnd(&sim));
  if (!(sim.estimatedTime > 0)) FAIL("simulated group: estimatedTime %g", (double)sim.estimatedTime);
  for (int i = 0; i < 8; i++)
    if (zeros[i] != 0) FAIL("the simulated allreduce ran");
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "not inside a group");
  /* a call refused inside a group: the group end fails, and the group is closed */
  CHECK(ncclGroupStart());
  EXPECT_ERR(ncclAllReduce(ones, zeros, 8, (ncclDataType_t)42, ncclSum, comm, NULL), ncclInvalidArgument, "datatype");
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidArgument, "refused");
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "not inside a group");
}

/* mismatched counts across ranks: every rank gets an error, nobody hangs */
static void test_mismatch(const char *idpath) {
  ncclUniqueId id = share_id(idpath, "mismatch");
  ncclComm_t c;
  CHECK(ncclCommInitRank(&c, n, id, me));
  float buf[64] = {0};
  ncclResult_t r = ncclAllReduce(buf, buf, me == 0 ? 16 : 32, ncclFloat, ncclSum, c, NULL);
  if (r == ncclSuccess) FAIL("allreduce with mismatched counts succeeded");
  else if (strlen(ncclGetLastError(c)) == 0) FAIL("mismatch: empty last error");
  else fprintf(stderr, "rank %d: mismatch reported as %s: %s\n", me, ncclGetErrorString(r), ncclGetLastError(c));
  ncclResult_t ae;
  CHECK(ncclCommGetAsyncError(c, &ae));
  if (ae == ncclSuccess) FAIL("mismatch: ncclCommGetAsyncError says ncclSuccess");
  CHECK(ncclCommAbort(c));
}

struct blocked { ncclComm_t comm; ncclResult_t r; };

static void *blocked_allreduce(void *arg) {
  struct blocked *b = arg;
  float buf[16] = {0};
  b->r = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, b->comm, NULL);
  return NULL;
}

/* A group is the calling thread's: while another thread holds one open,
 * this thread's allreduce runs at once and is complete on return (had the
 * library taken both threads for one, the call would be queued in the
 * other's group and return with nothing done). */
struct open_group {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int opened, release;
  ncclResult_t start, end;
};

static void *hold_group(void *p) {
  struct open_group *g = p;
  g->start = ncclGroupStart();
  pthread_mutex_lock(&g->mu);
  g->opened = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->release) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  g->end = ncclGroupEnd();
  return NULL;
}

static void test_group_per_thread(ncclComm_t comm) {
  struct open_group g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, ncclSuccess, ncclSuccess};
  pthread_t t;
  pthread_create(&t, NULL, hold_group, &g);
  pthread_mutex_lock(&g.mu);
  while (!g.opened) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  float x[4];
  double want[4];
  for (int i = 0; i < 4; i++) {
    x[i] = (float)(me + i);
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += r + i;
  }
  CHECK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, NULL));
  check_floats("allreduce while another thread holds a group open", x, want, 4);
  pthread_mutex_lock(&g.mu);
  g.release = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  pthread_join(t, NULL);
  if (g.start != ncclSuccess || g.end != ncclSuccess) FAIL("the other thread's empty group: start %d, end %d", g.start, g.end);
}

/* abort from another thread unblocks a call in flight; the other ranks'
 * calls fail too. Rank 0 never joins the allreduce. */
static void test_abort(const char *idpath) {
  ncclUniqueId id = share_id(idpath, "abort");
  ncclComm_t c;
  CHECK(ncclCommInitRank(&c, n, id, me));
  if (me == 0) {
    CHECK(ncclCommAbort(c));
    return;
  }
  struct blocked b = {c, ncclSuccess};
  pthread_t t;
  pthread_create(&t, NULL, blocked_allreduce, &b);
  pthread_join(t, NULL);
  if (b.r == ncclSuccess) FAIL("allreduce after a peer's abort succeeded");
  CHECK(ncclCommAbort(c));
}

static void test_split_and_nonblocking(ncclComm_t comm, const char *idpath) {
  /* split into even and odd ranks, key reverses the order */
  ncclComm_t sub;
  CHECK(ncclCommSplit(comm, me % 2, -me, &sub, NULL));
  int sn, sr;
  CHECK(ncclCommCount(sub, &sn));
  CHECK(ncclCommUserRank(sub, &sr));
  int want_n = (n - me % 2 + 1) / 2;
  if (sn != want_n) FAIL("split: %d ranks, want %d", sn, want_n);
  int x = me, sum = 0;
  CHECK(ncclAllReduce(&x, &sum, 1, ncclInt32, ncclSum, sub, NULL));
  int want_sum = 0;
  for (int r = me % 2; r < n; r += 2) want_sum += r;
  if (sum != want_sum) FAIL("split allreduce: %d, want %d", sum, want_sum);
  int first = -1;
  CHECK(ncclBroadcast(&x, &first, 1, ncclInt32, 0, sub, NULL));
  int highest = me % 2;
  for (int r = me % 2; r < n; r += 2) highest = r;
  if (first != highest) FAIL("split order: sub-rank 0 is world rank %d, want %d (key -rank)", first, highest);
  CHECK(ncclCommDestroy(sub));

  /* shrink: every rank but the last calls it, excluding the last */
  if (me != n - 1) {
    int last = n - 1, shrunk_n = 0, total = 0, one = 1;
    ncclComm_t shrunk;
    EXPECT_ERR(ncclCommShrink(comm, &me, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument, "excludes itself");
    CHECK(ncclCommShrink(comm, &last, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    CHECK(ncclCommCount(shrunk, &shrunk_n));
    if (shrunk_n != n - 1) FAIL("shrink: %d ranks, want %d", shrunk_n, n - 1);
    CHECK(ncclAllReduce(&one, &total, 1, ncclInt32, ncclSum, shrunk, NULL));
    if (total != n - 1) FAIL("shrink allreduce: %d, want %d", total, n - 1);
    CHECK(ncclCommDestroy(shrunk));
  }

  /* NOCOLOR gives NULL */
  ncclComm_t none = (ncclComm_t)1;
  CHECK(ncclCommSplit(comm, me == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &none, NULL));
  if (me == 0 && none != NULL) FAIL("split NOCOLOR: got a communicator");
  if (me != 0) {
    if (none == NULL) FAIL("split color 1: got NULL");
    else CHECK(ncclCommDestroy(none));
  }

  /* non-blocking init: ncclInProgress, then poll */
  ncclUniqueId id = share_id(idpath, "nonblocking");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb;
  ncclResult_t r = ncclCommInitRankConfig(&nb, n, id, me, &cfg);
  if (r != ncclInProgress && r != ncclSuccess) FAIL("non-blocking init returned %s", ncclGetErrorString(r));
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 60000 && state == ncclInProgress; i++) {
    CHECK(ncclCommGetAsyncError(nb, &state));
    if (state == ncclInProgress) { struct timespec ts = {0, 1000 * 1000}; nanosleep(&ts, NULL); }
  }
  if (state != ncclSuccess) FAIL("non-blocking init ended with %s", ncclGetErrorString(state));
  int v = 1, total = 0;
  CHECK(ncclAllReduce(&v, &total, 1, ncclInt32, ncclSum, nb, NULL));
  if (total != n) FAIL("non-blocking comm allreduce: %d, want %d", total, n);
  CHECK(ncclCommDestroy(nb));
}

/* Under flexrun --keep-going: the last rank dies without a goodbye; the
 * survivors' allreduce fails naming it, they shrink it away, and an
 * allreduce on the shrunk communicator is right. */
static int shrink_after_exit(const char *idpath) {
  ncclUniqueId id = share_id(idpath, "keepgoing");
  ncclComm_t comm, small;
  CHECK(ncclCommInitRank(&comm, n, id, me));
  float x[16];
  for (int i = 0; i < 16; i++) x[i] = (float)(me + 1);
  ncclResult_t r = ncclAllReduce(x, x, 16, ncclFloat, ncclSum, comm, NULL);
  if (me == n - 1) {
    if (r != ncclSuccess) FAIL("the first allreduce failed on the rank about to die: %s", ncclGetErrorString(r));
    _exit(7);
  }
  /* The first call completed on the dead rank: it completes on every
   * survivor too, even one still taking in its data when another
   * survivor, already in the second call, fails on the dead rank and ends
   * the communicator (docs/ERRORS.md, "a survivor's earlier call"). */
  if (r != ncclSuccess) FAIL("the first allreduce, complete on every rank before one died: %s: %s", ncclGetErrorString(r), ncclGetLastError(comm));
  r = ncclAllReduce(x, x, 16, ncclFloat, ncclSum, comm, NULL);
  if (r == ncclSuccess) FAIL("an allreduce with a dead member succeeded");
  fprintf(stderr, "rank %d: the dead member reported as %s: %s\n", me, ncclGetErrorString(r), ncclGetLastError(comm));
  int dead = n - 1;
  CHECK(ncclCommShrink(comm, &dead, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
  int sn;
  CHECK(ncclCommCount(small, &sn));
  if (sn != n - 1) FAIL("shrunk communicator has %d ranks, want %d", sn, n - 1);
  for (int i = 0; i < 16; i++) x[i] = (float)(me + 1);
  CHECK(ncclAllReduce(x, x, 16, ncclFloat, ncclSum, small, NULL));
  float want = (float)((n - 1) * n / 2);
  for (int i = 0; i < 16; i++)
    if (x[i] != want) FAIL("shrunk allreduce element %d = %g, want %g", i, (double)x[i], (double)want);
  CHECK(ncclCommDestroy(small));
  CHECK(ncclCommAbort(comm));
  if (failures) return 1;
  printf("nccl_check rank %d: shrunk ok\n", me);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 3 && strcmp(argv[2], "shrink-after-exit") == 0)) {
    fprintf(stderr, "usage: nccl_check ID_FILE [shrink-after-exit]\n");
    return 2;
  }
  const char *rs = getenv("FLEXLINK_RANK"), *ns = getenv("FLEXLINK_WORLD_SIZE");
  if (!rs || !ns) { fprintf(stderr, "run under flexrun\n"); return 2; }
  me = atoi(rs);
  n = atoi(ns);
  if (argc == 3) return shrink_after_exit(argv[1]);
  int version;
  CHECK(ncclGetVersion(&version));
  /* The header declares the 2.30 API; the library reports 2.28.9, the
   * release whose version-gated features it serves (docs/NCCL-API.md). */
  if (version != 22809 || NCCL_VERSION_CODE != 23007) FAIL("ncclGetVersion: %d (want 22809), header says %d (want 23007)", version, NCCL_VERSION_CODE);

  ncclUniqueId id = share_id(argv[1], "world");
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, me));
  int cn, cr, dev;
  CHECK(ncclCommCount(comm, &cn));
  CHECK(ncclCommUserRank(comm, &cr));
  CHECK(ncclCommCuDevice(comm, &dev));
  if (cn != n || cr != me) FAIL("count/rank: %d/%d, want %d/%d", cn, cr, n, me);

  test_collectives(comm);
  test_group_per_thread(comm);
  test_bad_input(comm);
  test_split_and_nonblocking(comm, argv[1]);
  test_mismatch(argv[1]);
  test_abort(argv[1]);
  CHECK(ncclCommDestroy(comm));
  if (failures) { fprintf(stderr, "nccl_check rank %d: %d failures\n", me, failures); return 1; }
  printf("nccl_check rank %d: ok\n", me);
  return 0;
}
