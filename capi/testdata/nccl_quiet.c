/* nccl_quiet: flexlink's libnccl.so.2 is silent unless asked, as NCCL is.
 * One communicator of one rank on host buffers; a call refused (an
 * unknown datatype) returns ncclInvalidArgument and ncclGetLastError says
 * why, on stdout. Whatever reaches stderr is the library's own: the test
 * (capi TestCLibrarySilent) runs this with and without NCCL_DEBUG=WARN. */
#include "check.h"

static const char *who(void) { return "nccl_quiet"; }

int main(void) {
  ncclComm_t comm;
  CHECK(ncclCommInitAll(&comm, 1, NULL));
  float x = 1;
  ncclResult_t r = ncclAllReduce(&x, &x, 1, (ncclDataType_t)99, ncclSum, comm, NULL);
  printf("result %d: %s\n", (int)r, ncclGetLastError(NULL));
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL));
  CHECK(ncclCommDestroy(comm));
  if (r != ncclInvalidArgument) FAIL("a call with datatype 99 returned %d, want ncclInvalidArgument", (int)r);
  if (failures) return 1;
  printf("nccl_quiet: ok\n");
  return 0;
}
