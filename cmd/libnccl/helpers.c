// C helpers of libnccl.so.2: handle conversion, the per-thread last-error
// buffer, and the few CUDA driver queries the Go side needs about the
// caller's pointers and streams (resolved with dlopen/dlsym; our own
// prototypes, no cuda.h). A file of its own because a cgo file with
// //export may only declare C functions.
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"

void *fl_handle(uintptr_t h) { return (void *)h; }
uintptr_t fl_id(void *p) { return (uintptr_t)p; }

// fl_tid is the calling thread's id (gettid), asked of the kernel once
// per thread and kept in the thread's own storage: ncclGroupStart, every
// call inside a group and ncclGroupEnd need it, a system call each
// otherwise. A fork's child forgets the copy its thread inherits.
static __thread int fl_tid_cached;
static pthread_once_t fl_tid_once = PTHREAD_ONCE_INIT;
static void fl_tid_forget(void) { fl_tid_cached = 0; }
static void fl_tid_init(void) { pthread_atfork(NULL, NULL, fl_tid_forget); }

int fl_tid(void) {
  if (fl_tid_cached == 0) {
    pthread_once(&fl_tid_once, fl_tid_init);
    fl_tid_cached = (int)syscall(SYS_gettid);
  }
  return fl_tid_cached;
}

static __thread char fl_last[4096];

const char *fl_last_error(const char *s) {
  strncpy(fl_last, s, sizeof fl_last - 1);
  fl_last[sizeof fl_last - 1] = 0;
  return fl_last;
}

// CUDA driver entry points, with CUresult as int and handles as pointers.
typedef int (*pointer_get_attributes_fn)(unsigned num, int *attributes, void **data, uintptr_t ptr);
typedef int (*ctx_get_device_fn)(int *dev);
typedef int (*stream_is_capturing_fn)(void *stream, int *status);
typedef int (*stream_synchronize_fn)(void *stream);
typedef int (*exchange_capture_mode_fn)(int *mode);
typedef int (*init_fn)(unsigned flags);

static pointer_get_attributes_fn fl_pointer_get_attributes;
static ctx_get_device_fn fl_ctx_get_device;
static stream_is_capturing_fn fl_stream_is_capturing;
static stream_synchronize_fn fl_stream_synchronize;
static exchange_capture_mode_fn fl_exchange_capture_mode; // optional (CUDA 10.1+)

enum {
  attr_memory_type = 2,    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
  attr_buffer_id = 7,      // CU_POINTER_ATTRIBUTE_BUFFER_ID
  attr_device_ordinal = 9, // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
  attr_legacy_ipc = 10,    // CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
  attr_range_start = 11,   // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
  attr_range_size = 12,    // CU_POINTER_ATTRIBUTE_RANGE_SIZE
  memorytype_device = 2,   // CU_MEMORYTYPE_DEVICE
};

int fl_cuda_open(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return 0;
  init_fn init = (init_fn)dlsym(h, "cuInit");
  fl_pointer_get_attributes = (pointer_get_attributes_fn)dlsym(h, "cuPointerGetAttributes");
  fl_ctx_get_device = (ctx_get_device_fn)dlsym(h, "cuCtxGetDevice");
  fl_stream_is_capturing = (stream_is_capturing_fn)dlsym(h, "cuStreamIsCapturing");
  fl_stream_synchronize = (stream_synchronize_fn)dlsym(h, "cuStreamSynchronize");
  fl_exchange_capture_mode = (exchange_capture_mode_fn)dlsym(h, "cuThreadExchangeStreamCaptureMode");
  if (!init || !fl_pointer_get_attributes || !fl_ctx_get_device || !fl_stream_is_capturing || !fl_stream_synchronize) return 0;
  if (init(0) != 0) return 0;
  return 1;
}

// fl_identify reports whether p is device memory (device 1) or not (0)
// and, for device memory, the driver's id of the allocation holding it (unique for
// the life of the process: memory freed and allocated again at the same
// address gets a new one; 0 when the driver cannot say). One driver call,
// made on every collective for each buffer: the Go side keeps the rest of
// what fl_locate says by this id. cuPointerGetAttributes, unlike
// cuPointerGetAttribute, answers CUDA_SUCCESS for memory CUDA does not know
// (host memory), with every attribute zero. The answer comes back by value
// (fl_ident), so the Go caller passes no pointer of its own.
fl_ident fl_identify(uintptr_t p) {
  fl_ident r = {0, 0};
  unsigned int type = 0;
  unsigned long long buffer = 0;
  int attrs[] = {attr_memory_type, attr_buffer_id};
  void *data[] = {&type, &buffer};
  if (fl_pointer_get_attributes(2, attrs, data, p) != 0) {
    buffer = 0; // a driver without buffer ids: the call is refused by name later
    if (fl_pointer_get_attributes(1, attrs, data, p) != 0) return r;
  }
  if (type != memorytype_device) return r;
  r.id = buffer;
  r.device = 1;
  return r;
}

// fl_locate reports what fl_identify does and, for device memory, its
// device, the allocation holding it and whether it can be exported with
// cuIpcGetMemHandle (cudaMalloc memory can; VMM memory from
// cuMemCreate/cuMemMap, as PyTorch's expandable_segments, and
// stream-ordered pools cannot; a driver that cannot say reports 1, and an
// export that then fails is an error), in one driver call. An attribute
// the driver does not know fails the whole call: then it is asked again
// without the IPC capability (taken as 1), then without the buffer id
// (taken as 0, which the library refuses by name).
int fl_locate(uintptr_t p, int *dev, uintptr_t *base, size_t *size, unsigned long long *id, int *ipc) {
  unsigned int type = 0;
  int ordinal = -1, capable = 1;
  unsigned long long buffer = 0;
  uintptr_t start = 0;
  size_t length = 0;
  int attrs[] = {attr_memory_type, attr_device_ordinal, attr_range_start, attr_range_size, attr_buffer_id, attr_legacy_ipc};
  void *data[] = {&type, &ordinal, &start, &length, &buffer, &capable};
  if (fl_pointer_get_attributes(6, attrs, data, p) != 0) {
    capable = 1;
    if (fl_pointer_get_attributes(5, attrs, data, p) != 0) {
      buffer = 0;
      if (fl_pointer_get_attributes(4, attrs, data, p) != 0) return 0;
    }
  }
  if (type != memorytype_device || ordinal < 0 || start == 0 || length == 0) return 0;
  *dev = ordinal;
  *base = start;
  *size = length;
  *id = buffer;
  *ipc = capable != 0;
  return 1;
}

int fl_current_device(void) {
  int dev = 0;
  if (fl_ctx_get_device(&dev) != 0) return 0;
  return dev;
}

int fl_capturing(void *stream) {
  int status = 0;
  if (fl_stream_is_capturing(stream, &status) != 0) return 0;
  return status != 0;
}

// fl_synchronize waits for the caller's stream (a call on host buffers
// runs on the host once the stream's earlier work is done). The thread is
// in relaxed capture mode for it: a synchronisation is "unsafe" during a
// global-mode capture, and one made here while another thread captures
// (PyTorch's default mode) would invalidate that capture.
int fl_synchronize(void *stream) {
  enum { capture_mode_relaxed = 2 }; // CU_STREAM_CAPTURE_MODE_RELAXED
  int mode = capture_mode_relaxed;
  int swapped = fl_exchange_capture_mode && fl_exchange_capture_mode(&mode) == 0;
  int r = fl_stream_synchronize(stream);
  if (swapped) fl_exchange_capture_mode(&mode);
  return r;
}
