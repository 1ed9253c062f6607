// pcie_sm_probe: how fast SM loads and stores move data through pinned
// host memory (the host-staged PCIe link, driven by kernels instead of copy
// engines). Built and run on the GPU machine by scripts/gpu-device.sh
// (mode pcieprobe); needs two GPUs. Prints GB/s per test:
//   write  GPU0 kernel stores into host memory
//   read   GPU1 kernel loads from host memory (volatile: no stale lines)
//   both   GPU0 writes block A and reads block B while GPU1 writes B' and
//          reads A' (each GPU's link busy both ways, as in an allreduce)
// for several grid sizes. Not part of the library: a measuring tool.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "cuda_check.h"

__global__ void wr(uint4* dst, size_t n) {
    size_t nt = (size_t)gridDim.x * blockDim.x;
    uint4 v = make_uint4(threadIdx.x, blockIdx.x, 1, 2);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nt) dst[i] = v;
}

template <int U>
__global__ void rd(const uint4* src, size_t n, unsigned* sink) {
    size_t nt = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * nt < n; i += U * nt) {
        uint4 x[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(x[u].x), "=r"(x[u].y), "=r"(x[u].z), "=r"(x[u].w)
                         : "l"(src + i + u * nt));
#pragma unroll
        for (int u = 0; u < U; u++) acc += x[u].x ^ x[u].w;
    }
    if (acc == 0x12345678) *sink = acc;
}

// rdwr: blocks [0, half) read src, blocks [half, grid) write dst.
template <int U>
__global__ void rdwr(const uint4* src, uint4* dst, size_t n, int half, unsigned* sink) {
    if ((int)blockIdx.x < half) {
        size_t nt = (size_t)half * blockDim.x;
        unsigned acc = 0;
        size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        for (; i + (U - 1) * nt < n; i += U * nt) {
            uint4 x[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                             : "=r"(x[u].x), "=r"(x[u].y), "=r"(x[u].z), "=r"(x[u].w)
                             : "l"(src + i + u * nt));
#pragma unroll
            for (int u = 0; u < U; u++) acc += x[u].x ^ x[u].w;
        }
        if (acc == 0x12345678) *sink = acc;
    } else {
        size_t nt = (size_t)(gridDim.x - half) * blockDim.x;
        uint4 v = make_uint4(threadIdx.x, blockIdx.x, 1, 2);
        for (size_t i = (size_t)(blockIdx.x - half) * blockDim.x + threadIdx.x; i < n; i += nt) dst[i] = v;
    }
}

int main() {
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) {
        printf("pcie_sm_probe: needs two GPUs, found %d\n", ndev);
        return 1;
    }
    const size_t bytes = 256ull << 20, n = bytes / 16;
    uint4 *h[4];
    for (int k = 0; k < 4; k++) CK(cudaHostAlloc((void**)&h[k], bytes, cudaHostAllocPortable | cudaHostAllocMapped));
    unsigned* sink[2];
    cudaStream_t st[2];
    cudaEvent_t e0[2], e1[2];
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&sink[d], 4));
        CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
        CK(cudaEventCreate(&e0[d]));
        CK(cudaEventCreate(&e1[d]));
    }
    auto ms = [&](int d) {
        float t;
        CK(cudaEventSynchronize(e1[d]));
        CK(cudaEventElapsedTime(&t, e0[d], e1[d]));
        return t;
    };
    int grids[] = {2, 4, 8, 16, 32};
    for (int g : grids) {
        for (int rep = 0; rep < 2; rep++) {  // first round warms up
            CK(cudaSetDevice(0));
            CK(cudaEventRecord(e0[0], st[0]));
            wr<<<g, 512, 0, st[0]>>>(h[0], n);
            CK(cudaEventRecord(e1[0], st[0]));
            float tw = ms(0);
            CK(cudaSetDevice(1));
            CK(cudaEventRecord(e0[1], st[1]));
            rd<4><<<g, 512, 0, st[1]>>>(h[0], n, sink[1]);
            CK(cudaEventRecord(e1[1], st[1]));
            float tr4 = ms(1);
            CK(cudaEventRecord(e0[1], st[1]));
            rd<8><<<g, 512, 0, st[1]>>>(h[0], n, sink[1]);
            CK(cudaEventRecord(e1[1], st[1]));
            float tr8 = ms(1);
            // both ways on both GPUs at once: g blocks read, g blocks write
            for (int d = 0; d < 2; d++) {
                CK(cudaSetDevice(d));
                CK(cudaEventRecord(e0[d], st[d]));
                rdwr<8><<<2 * g, 512, 0, st[d]>>>(h[d == 0 ? 1 : 0], h[d == 0 ? 2 : 3], n, g, sink[d]);
                CK(cudaEventRecord(e1[d], st[d]));
            }
            float tb0 = ms(0), tb1 = ms(1);
            if (rep == 1)
                printf("grid %2d: write %.1f GB/s, read U4 %.1f GB/s, read U8 %.1f GB/s, both ways (per GPU, each direction) %.1f / %.1f GB/s\n",
                       g, bytes / tw / 1e6, bytes / tr4 / 1e6, bytes / tr8 / 1e6, bytes / tb0 / 1e6, bytes / tb1 / 1e6);
        }
    }
    return 0;
}
