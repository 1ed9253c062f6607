// graph_node_probe: what the nodes a library adds around its kernel cost
// per call, replayed in a CUDA graph and eager on a stream. Each variant
// runs CALLS small kernels (1 block of 512 threads, one store: the launch
// and teardown of a small collective without its NVLink wait) with the
// extra work named below, and prints microseconds per call:
//   kernel        the kernel alone
//   rec-chain     + an event record after each kernel, in the stream's
//                 chain (what the flag plane captured until the 20th
//                 session: RecordExternal)
//   rec-branch    + the record as a side branch: its own node depending on
//                 the kernel and on the previous record, the stream's
//                 frontier left on the kernel
//   memcpy8       + an 8-byte device-to-device copy (copy engine) before
//                 each kernel (a gather root's copy to itself)
//   kernel2       + a second kernel before each (the same copy on SMs)
// Run by scripts/gpu-twogpu.sh (PARTS=nodes). Not part of the library.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "cuda_check.h"

__global__ void __launch_bounds__(512) tiny(int* p, int v) {
    if (threadIdx.x == 0) p[blockIdx.x] = v;
}

enum Variant { KERNEL, REC_CHAIN, REC_BRANCH, MEMCPY8, KERNEL2, NVARIANTS };
static const char* names[] = {"kernel", "rec-chain", "rec-branch", "memcpy8", "kernel2"};

struct Ctx {
    cudaStream_t s;
    cudaEvent_t ev;
    int *a, *b;
    cudaGraphNode_t lastRec;  // rec-branch: the previous record node
};

// one enqueues one call of variant v on c.s (captured or eager).
static void one(Ctx& c, Variant v, bool capturing, int i) {
    if (v == MEMCPY8) CK(cudaMemcpyAsync(c.b, c.a, 8, cudaMemcpyDeviceToDevice, c.s));
    if (v == KERNEL2) tiny<<<1, 512, 0, c.s>>>(c.b, i);
    tiny<<<1, 512, 0, c.s>>>(c.a, i);
    CK(cudaGetLastError());
    if (v == REC_CHAIN) CK(cudaEventRecordWithFlags(c.ev, c.s, capturing ? cudaEventRecordExternal : 0));
    if (v == REC_BRANCH) {
        if (!capturing) {
            CK(cudaEventRecord(c.ev, c.s));
            return;
        }
        cudaStreamCaptureStatus st;
        cudaGraph_t g;
        const cudaGraphNode_t* deps;
        size_t n;
        CK(cudaStreamGetCaptureInfo(c.s, &st, nullptr, &g, &deps, nullptr, &n));
        cudaGraphNode_t all[8];
        size_t k = 0;
        for (size_t j = 0; j < n && k < 7; j++) all[k++] = deps[j];
        if (c.lastRec) all[k++] = c.lastRec;
        cudaGraphNode_t rec;
        CK(cudaGraphAddEventRecordNode(&rec, g, all, k, c.ev));
        c.lastRec = rec;
    }
}

int main(int argc, char** argv) {
    const int CALLS = 10, REPS = argc > 1 ? atoi(argv[1]) : 2000;
    Ctx c{};
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&c.ev, cudaEventDisableTiming));
    CK(cudaMalloc(&c.a, 4096));
    CK(cudaMalloc(&c.b, 4096));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    printf("%-12s %14s %14s\n", "variant", "graph us/call", "eager us/call");
    for (int v = 0; v < NVARIANTS; v++) {
        c.lastRec = nullptr;
        cudaGraph_t g;
        cudaGraphExec_t x;
        CK(cudaStreamBeginCapture(c.s, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < CALLS; i++) one(c, (Variant)v, true, i);
        CK(cudaStreamEndCapture(c.s, &g));
        CK(cudaGraphInstantiate(&x, g, 0));
        for (int w = 0; w < 50; w++) CK(cudaGraphLaunch(x, c.s));
        CK(cudaStreamSynchronize(c.s));
        CK(cudaEventRecord(t0, c.s));
        for (int r = 0; r < REPS; r++) CK(cudaGraphLaunch(x, c.s));
        CK(cudaEventRecord(t1, c.s));
        CK(cudaEventSynchronize(t1));
        float gms;
        CK(cudaEventElapsedTime(&gms, t0, t1));
        for (int w = 0; w < 500; w++) one(c, (Variant)v, false, w);
        CK(cudaStreamSynchronize(c.s));
        CK(cudaEventRecord(t0, c.s));
        for (int r = 0; r < REPS * CALLS; r++) one(c, (Variant)v, false, r);
        CK(cudaEventRecord(t1, c.s));
        CK(cudaEventSynchronize(t1));
        float ems;
        CK(cudaEventElapsedTime(&ems, t0, t1));
        printf("%-12s %14.2f %14.2f\n", names[v], gms * 1000 / (REPS * CALLS), ems * 1000 / (REPS * CALLS));
        CK(cudaGraphExecDestroy(x));
        CK(cudaGraphDestroy(g));
    }
    return 0;
}
