// Types of the NCCL 2.29/2.30 entry points and of the host side of NCCL's
// device API, as exports.go needs them (our own declarations, same ABI:
// x86-64 and aarch64 LP64), and the per-thread string buffers of the
// ncclParam* functions (params.c).
#include "helpers.h"

typedef void *ncclParamHandle_t;

// ncclTeam_t: three ints, passed and returned by value.
typedef struct {
  int nRanks, rank, stride;
} ncclTeam_t;

// ncclMultimemHandle_t: one pointer, passed by value.
typedef struct {
  void *mcBasePtr;
} ncclMultimemHandle_t;

// fl_thread_str copies s into the calling thread's buffer number slot
// (0..3) and returns it: valid until the next call with that slot on the
// thread, as NCCL documents for ncclParamGetStr and ncclParamGetParameter.
// NULL when out of memory.
const char *fl_thread_str(int slot, const char *s);
