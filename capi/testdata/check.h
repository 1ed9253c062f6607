/* Checks shared by the C test programs of capi (nccl_check.c, nccl_v230.c).
 * The includer defines who(): how its lines start ("rank 2", "nccl_v230"). */
#ifndef FLEXLINK_TESTDATA_CHECK_H
#define FLEXLINK_TESTDATA_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

static const char *who(void);
static int failures;

/* FAIL: report a failed check and go on. */
#define FAIL(...)                                   \
  do {                                              \
    fprintf(stderr, "%s: FAIL: ", who());           \
    fprintf(stderr, __VA_ARGS__);                   \
    fprintf(stderr, "\n");                          \
    failures++;                                     \
  } while (0)

/* CHECK: call must succeed, else the program ends. */
#define CHECK(call)                                                                          \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) {                                                                 \
      fprintf(stderr, "%s: %s:%d: %s -> %s: %s\n", who(), __FILE__, __LINE__, #call,         \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                               \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

/* EXPECT_ERR: call must fail with want and leave a last error mentioning text. */
#define EXPECT_ERR(call, want, text)                                                          \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    const char *e_ = ncclGetLastError(NULL);                                                  \
    if (r_ != (want)) FAIL("%s returned %d, want %d (%s)", #call, (int)r_, (int)(want), e_);  \
    else if (!strstr(e_, (text))) FAIL("%s: last error \"%s\" lacks \"%s\"", #call, e_, (text)); \
  } while (0)

#endif
