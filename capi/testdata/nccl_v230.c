/*
 * nccl_v230: the NCCL 2.29/2.30 entry points of flexlink's libnccl.so.2,
 * from C through include/nccl.h, in one process: two communicators from
 * ncclCommInitAll on host buffers. Windows are bookkeeping that returns
 * the registered pointer; parameters read the environment; the two team
 * helpers are facts about the communicator; ncclConfig_t of the 2.28 and
 * 2.29 sizes is accepted; every function flexlink does not serve returns
 * ncclInvalidUsage with a last error naming it. Prints "nccl_v230: ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "check.h"

static const char *who(void) { return "nccl_v230"; }

/* The host side of NCCL's device API is not in nccl.h (NCCL declares it in
 * nccl_device.h); these are the ABI of its exports. */
typedef struct {
  int nRanks, rank, stride;
} team_t;
team_t ncclTeamWorld(ncclComm_t comm);
team_t ncclTeamLsa(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, team_t team, int rank);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, void *props);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void **outPtr);
void ncclResetDebugInitInternal(void);



/* the last error names fn (for functions without a result code) */
static void expect_named(const char *fn) {
  if (!strstr(ncclGetLastError(NULL), fn)) FAIL("last error \"%s\" does not name %s", ncclGetLastError(NULL), fn);
}

static void test_windows(ncclComm_t *comms) {
  static char buf[2][8192];
  ncclWindow_t win[2] = {NULL, NULL};
  /* as nccl-tests -R 2: both ranks register inside one group */
  CHECK(ncclGroupStart());
  for (int r = 0; r < 2; r++) CHECK(ncclCommWindowRegister(comms[r], buf[r], sizeof buf[r], &win[r], NCCL_WIN_COLL_SYMMETRIC));
  CHECK(ncclGroupEnd());
  if (!win[0] || !win[1] || win[0] == win[1]) FAIL("window handles %p %p: want two distinct non-NULL", (void *)win[0], (void *)win[1]);
  for (int r = 0; r < 2; r++) {
    void *p = NULL;
    CHECK(ncclWinGetUserPtr(comms[r], win[r], &p));
    if (p != buf[r]) FAIL("ncclWinGetUserPtr(rank %d) = %p, want %p", r, p, (void *)buf[r]);
  }
  /* a collective on window buffers is a collective on the buffers */
  float *f0 = (float *)buf[0], *f1 = (float *)buf[1];
  for (int i = 0; i < 16; i++) f0[i] = (float)i, f1[i] = (float)(100 + i);
  CHECK(ncclGroupStart());
  for (int r = 0; r < 2; r++) CHECK(ncclAllReduce(buf[r], buf[r], 16, ncclFloat, ncclSum, comms[r], NULL));
  CHECK(ncclGroupEnd());
  for (int i = 0; i < 16; i++)
    if (f0[i] != (float)(100 + 2 * i) || f1[i] != f0[i]) FAIL("allreduce on windows: element %d = %g, %g", i, f0[i], f1[i]);

  ncclWindow_t w = NULL;
  EXPECT_ERR(ncclCommWindowRegister(comms[0], NULL, 64, &w, 0), ncclInvalidArgument, "buffer");
  EXPECT_ERR(ncclCommWindowRegister(comms[0], buf[0], 64, NULL, 0), ncclInvalidArgument, "NULL");
  EXPECT_ERR(ncclCommWindowDeregister(comms[1], win[0]), ncclInvalidArgument, "registered on communicator");
  void *p;
  EXPECT_ERR(ncclGetPeerDevicePointer(win[0], 0, 1, &p), ncclInvalidUsage, "ncclGetPeerDevicePointer");
  EXPECT_ERR(ncclPutSignal(buf[0], 4, ncclFloat, 1, win[1], 0, 0, 0, 0, comms[0], NULL), ncclInvalidUsage, "ncclPutSignal");
  EXPECT_ERR(ncclSignal(1, 0, 0, 0, comms[0], NULL), ncclInvalidUsage, "ncclSignal");
  ncclWaitSignalDesc_t d = {1, 1, 0, 0};
  EXPECT_ERR(ncclWaitSignal(1, &d, comms[0], NULL), ncclInvalidUsage, "ncclWaitSignal");
  for (int r = 0; r < 2; r++) CHECK(ncclCommWindowDeregister(comms[r], win[r]));
  EXPECT_ERR(ncclCommWindowDeregister(comms[0], win[0]), ncclInvalidArgument, "not a live window");
  EXPECT_ERR(ncclWinGetUserPtr(comms[0], win[0], &p), ncclInvalidArgument, "not a live window");
}

static void test_params(void) {
  ncclParamHandle_t h = NULL;
  CHECK(ncclParamBind(&h, "FLEXLINK_DEBUG"));
  const char *want = getenv("FLEXLINK_DEBUG");
  if (!want || !*want) want = "WARN";
  const char *s = NULL;
  CHECK(ncclParamGetStr(h, &s));
  if (strcmp(s, want) != 0) FAIL("ncclParamGetStr(FLEXLINK_DEBUG) = \"%s\", want \"%s\"", s, want);
  char raw[64];
  int len = -1;
  CHECK(ncclParamGet(h, raw, sizeof raw, &len));
  if (len != (int)strlen(want) + 1 || strcmp(raw, want) != 0) FAIL("ncclParamGet: %d bytes \"%s\"", len, raw);
  EXPECT_ERR(ncclParamGet(h, raw, 1, &len), ncclInvalidArgument, "bytes");
  int32_t i32;
  EXPECT_ERR(ncclParamGetI32(h, &i32), ncclInvalidArgument, "string");
  uint64_t u64;
  EXPECT_ERR(ncclParamGetU64(h, &u64), ncclInvalidArgument, "string");
  EXPECT_ERR(ncclParamBind(&h, "NCCL_P2P_LEVEL"), ncclInvalidArgument, "not a parameter");

  setenv("NCCL_DEBUG_SUBSYS", "INIT,COLL", 1);
  const char *v = NULL;
  int vlen = 0;
  CHECK(ncclParamGetParameter("NCCL_DEBUG_SUBSYS", &v, &vlen));
  if (strcmp(v, "INIT,COLL") != 0 || vlen != 9) FAIL("ncclParamGetParameter(NCCL_DEBUG_SUBSYS) = \"%s\" (%d)", v, vlen);
  EXPECT_ERR(ncclParamGetParameter("NCCL_NOPE", &v, &vlen), ncclInvalidArgument, "not a parameter");
  if (v != NULL || vlen != 0) FAIL("ncclParamGetParameter of an unknown key left %p, %d", (const void *)v, vlen);

  const char **keys = NULL;
  int n = 0;
  CHECK(ncclParamGetAllParameterKeys(&keys, &n));
  int found = 0;
  for (int i = 0; i < n; i++) found += strcmp(keys[i], "NCCL_DEBUG") == 0 || strcmp(keys[i], "FLEXLINK_TIMEOUT") == 0;
  if (n < 10 || found != 2) FAIL("ncclParamGetAllParameterKeys: %d keys, NCCL_DEBUG and FLEXLINK_TIMEOUT %d of 2", n, found);
}

static void test_refused(ncclComm_t *comms) {
  ncclUniqueId id;
  ncclComm_t out = (ncclComm_t)comms;
  uint64_t value;
  EXPECT_ERR(ncclCommGetUniqueId(comms[0], &id), ncclInvalidUsage, "ncclCommGetUniqueId");
  EXPECT_ERR(ncclCommGrow(comms[0], 3, NULL, -1, &out, NULL), ncclInvalidUsage, "ncclCommGrow");
  if (out != NULL) FAIL("ncclCommGrow left newcomm set");
  EXPECT_ERR(ncclCommMemStats(comms[0], ncclStatGpuMemTotal, &value), ncclInvalidUsage, "ncclCommMemStats");
  EXPECT_ERR(ncclDevCommCreate(comms[0], NULL, NULL), ncclInvalidUsage, "ncclDevCommCreate");
  EXPECT_ERR(ncclCommQueryProperties(comms[0], NULL), ncclInvalidUsage, "ncclCommQueryProperties");
  team_t lsa = ncclTeamLsa(comms[0]);
  if (lsa.nRanks != 0) FAIL("ncclTeamLsa: %d ranks", lsa.nRanks);
  expect_named("ncclTeamLsa");

  team_t world = ncclTeamWorld(comms[1]);
  if (world.nRanks != 2 || world.rank != 1 || world.stride != 1) FAIL("ncclTeamWorld = {%d, %d, %d}", world.nRanks, world.rank, world.stride);
  for (int r = 0; r < 2; r++)
    if (ncclTeamRankToWorld(comms[1], world, r) != r) FAIL("ncclTeamRankToWorld(%d) = %d", r, ncclTeamRankToWorld(comms[1], world, r));
  if (ncclLLA2ACalcSlots(10, 12) != 20) FAIL("ncclLLA2ACalcSlots(10, 12) = %d, want 20", ncclLLA2ACalcSlots(10, 12));
}

/* ncclConfig_t as programs built against NCCL 2.28 and 2.29 pass it: the
 * struct of their size with their version. Each rank splits on a thread of
 * its own. */
struct split_arg {
  ncclComm_t comm, sub;
  ncclConfig_t *cfg;
  int rank;
  ncclResult_t r;
};

static void *split_rank(void *p) {
  struct split_arg *a = p;
  a->r = ncclCommSplit(a->comm, 0, a->rank, &a->sub, a->cfg);
  return NULL;
}

static void *destroy_rank(void *p) {
  struct split_arg *a = p;
  a->r = ncclCommDestroy(a->sub);
  return NULL;
}

static void both(ncclComm_t *comms, struct split_arg *a, ncclConfig_t *cfg, void *(*fn)(void *)) {
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    a[r].comm = comms[r], a[r].cfg = cfg, a[r].rank = r;
    pthread_create(&th[r], NULL, fn, &a[r]);
  }
  for (int r = 0; r < 2; r++) {
    pthread_join(th[r], NULL);
    CHECK(a[r].r);
  }
}

static void test_config_sizes(ncclComm_t *comms) {
  static const struct {
    size_t size;
    unsigned version;
  } olds[] = {{80, 22809}, {88, 22907}, {sizeof(ncclConfig_t), NCCL_VERSION_CODE}};
  for (int k = 0; k < 3; k++) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.size = olds[k].size;
    cfg.version = olds[k].version;
    cfg.blocking = 1;
    struct split_arg a[2];
    both(comms, a, &cfg, split_rank);
    int n = 0;
    CHECK(ncclCommCount(a[0].sub, &n));
    if (n != 2) FAIL("split with a %zu-byte config: %d ranks", olds[k].size, n);
    both(comms, a, &cfg, destroy_rank);
  }
  if (sizeof(ncclConfig_t) != 96) FAIL("sizeof(ncclConfig_t) = %zu, want 96 (NCCL 2.30)", sizeof(ncclConfig_t));
}

int main(void) {
  ncclComm_t comms[2];
  CHECK(ncclCommInitAll(comms, 2, NULL));
  test_windows(comms);
  test_params();
  test_refused(comms);
  test_config_sizes(comms);
  setenv("NCCL_DEBUG", "WARN", 1);
  ncclResetDebugInit();
  ncclResetDebugInitInternal();
  int v = 0;
  CHECK(ncclGetVersion(&v));
  if (v != 22809) FAIL("ncclGetVersion = %d, want 22809 (docs/NCCL-API.md, Version)", v);
  struct split_arg a[2] = {{.sub = comms[0]}, {.sub = comms[1]}};
  both(comms, a, NULL, destroy_rank);
  if (failures) return 1;
  printf("nccl_v230: ok\n");
  return 0;
}
