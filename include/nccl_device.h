/*
 * nccl_device.h for flexlink: flexlink has no NCCL device API (device
 * communicators, LSA and multimem pointers, GIN, the kernels written
 * against them). This header exists only to stop a build that needs it
 * with one clear message instead of a wall of errors from the missing
 * declarations.
 *
 * nccl-tests includes it whenever nccl.h says NCCL >= 2.28. Build
 * nccl-tests against NVIDIA's installed NCCL header instead, and run it on
 * flexlink's library with LD_PRELOAD (docs/NCCL-API.md, "nccl-tests"):
 *
 *   make -C nccl-tests MPI=1 NCCL_HOME=/usr            # NVIDIA's nccl.h
 *   LD_PRELOAD=$FLEXLINK/build/nccl/lib/libnccl.so.2 \
 *     nccl-tests/build/all_reduce_perf -b 8 -e 64M -f 2 -g 1
 */
#ifndef FLEXLINK_NCCL_DEVICE_H
#define FLEXLINK_NCCL_DEVICE_H
#error "flexlink's libnccl has no NCCL device API (nccl_device.h: device communicators, LSA/multimem pointers, GIN). Build this program against NVIDIA's NCCL headers (nccl-tests: NCCL_HOME=<NVIDIA NCCL>, not flexlink's build/nccl) and run it with LD_PRELOAD=<flexlink>/build/nccl/lib/libnccl.so.2; see flexlink's docs/NCCL-API.md."
#endif
