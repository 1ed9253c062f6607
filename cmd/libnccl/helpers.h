#include <stddef.h>
#include <stdint.h>

void *fl_handle(uintptr_t h);
uintptr_t fl_id(void *p);
const char *fl_last_error(const char *s);
int fl_tid(void);
int fl_cuda_open(void);
typedef struct {
  unsigned long long id; // CU_POINTER_ATTRIBUTE_BUFFER_ID (0: the driver cannot say)
  int device;            // 1: device memory
} fl_ident;
fl_ident fl_identify(uintptr_t p);
int fl_locate(uintptr_t p, int *dev, uintptr_t *base, size_t *size, unsigned long long *id, int *ipc);
int fl_current_device(void);
int fl_capturing(void *stream);
int fl_synchronize(void *stream);

typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef int ncclScalarResidence_t;
typedef void *ncclComm_t;
typedef void *cudaStream_t;
typedef void *ncclWindow_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
