// ce_pipeline_probe: can copy engines, ordered by stream memory operations
// (cuStreamWaitValue64 / cuStreamWriteValue64) instead of host handshakes,
// carry a two-GPU allreduce faster than the flag kernel's SM stores (357
// GB/s at 1 GiB on 2xH200 against NCCL's 330; issue 7 asks for 1.25x)? The
// copy engines reach 391 GB/s per direction with both directions busy
// (DESIGN.md), and a second pair of copy engines can move a share through
// pinned host memory at the same time. Measuring tool, not part of the
// library: built and run on the GPU machine by scripts/gpu-device.sh (mode
// ceprobe); needs two GPUs.
//
// Two GPUs in one process with peer access; float32 sum; rank g's peer p.
// NVLink part, per chunk i (C bytes) of the head of the vector:
//   copy stream of g:   wait cons[g] >= i-D+1 (p has folded the chunk that
//                       used the slot before), copy send[g] chunk i into
//                       slot i%D on p (copy engine), write ready[p] = i+1
//   reduce stream of g: wait ready[g] >= i+1, out[g] chunk i = send[g]
//                       chunk i + slot i%D, write cons[p] = i+1
// PCIe part (the last `share` of the vector), per chunk j:
//   up stream of g:     copy send[g] chunk j to pinned host memory, write
//                       hready[g] (a host word) = j+1
//   down stream of g:   wait hready[p] >= j+1, copy that chunk of p's to
//                       a staging buffer on g, fold it into out[g]
// With two copy streams, chunks alternate between them and each stream
// counts its chunks in its own ready word (copies on different streams may
// finish out of order); the reduce of chunk i waits on its stream's word.
// Counters are cumulative over calls (call k waits for k*chunks+i+1), as
// flexlink's flag regions are. Every call's result is checked against the
// exact sum (the inputs are small integers times powers of two).
//
// Prints, per vector size: the copy engines' ceiling (both GPUs copying the
// whole vector to the other at once), then per chunk size, slot depth and
// PCIe share the busbw (= bytes / time for two ranks) and the host's
// enqueue time per call (CEPROBE_CEILINGS_ONLY=1: the ceilings alone). Each configuration runs twice: "live" (the host
// enqueues while the GPUs run, so a slow enqueue shows as lost bandwidth)
// and "gated" (every stream first waits on a pinned host word, the whole
// call is enqueued, then the word is written and the clock starts: what a
// CUDA graph or a persistent enqueue could reach). A watchdog thread opens
// the gate after 2 s if the enqueue blocks (a stream's queue full), and
// the row then says so. Arguments: none (sizes and shares are below).
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

#define CU(x)                                                                                    \
    do {                                                                                         \
        CUresult cr_ = (x);                                                                      \
        if (cr_ != CUDA_SUCCESS) {                                                               \
            const char* s = "?";                                                                 \
            cuGetErrorName(cr_, &s);                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s);                       \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

__global__ void fill(float* v, size_t n, int g) {
    size_t nt = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nt)
        v[i] = g == 0 ? (float)(i % 1000) * 0.5f : (float)(i % 777) * 0.25f;
}

// add: out = a + b over n floats (n a multiple of 4; 16-byte aligned).
__global__ void add(float4* out, const float4* a, const float4* b, size_t n4) {
    size_t nt = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += nt) {
        float4 x = a[i], y = b[i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

// put: SM stores of n4 float4s into the peer's memory (peer access).
__global__ void put(float4* dst, const float4* src, size_t n4) {
    size_t nt = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += nt) dst[i] = src[i];
}

__global__ void check(const float* out, size_t n, unsigned long long* bad) {
    size_t nt = (size_t)gridDim.x * blockDim.x;
    unsigned long long k = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nt) {
        float want = (float)(i % 1000) * 0.5f + (float)(i % 777) * 0.25f;
        if (out[i] != want) k++;
    }
    if (k) atomicAdd(bad, k);
}

struct Rank {
    float *send, *out, *slots, *stage;
    float* host;                    // pinned: this rank's PCIe part, read by the peer
    uint64_t *ready, *cons;         // device words on this GPU, written by the peer's streams
    uint64_t* hready;               // pinned host word: chunks of `host` written
    uint64_t* gate;                 // pinned host word: calls released (gated mode)
    cudaStream_t cs[2], rs, up, down;  // cs: one or two copy streams (chunks alternate)
    unsigned long long* bad;
};

static const int kBlocks = 264, kThreads = 512;

static int addGrid(size_t n4, int blocks) {
    size_t g = (n4 + kThreads - 1) / kThreads;
    return (int)(g < (size_t)blocks ? (g ? g : 1) : blocks);
}

// call enqueues one allreduce of n floats on both GPUs: chunks of c floats,
// d slots, the last pc floats over PCIe in chunks of c. k counts calls.
static void call(Rank* r, size_t n, size_t c, int d, size_t pc, uint64_t k, bool gated, int ns, int blocks) {
    size_t nv = n - pc;
    if (gated)
        for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            for (cudaStream_t s : {r[g].cs[0], r[g].cs[1], r[g].rs, r[g].up, r[g].down})
                CU(cuStreamWaitValue64((CUstream)s, (CUdeviceptr)r[g].gate, k + 1, CU_STREAM_WAIT_VALUE_GEQ));
        }
    uint64_t kc = (nv + c - 1) / c, kp = (pc + c - 1) / c;
    uint64_t most = kc > kp ? kc : kp;
    for (uint64_t i = 0; i < most; i++) {
        for (int g = 0; g < 2; g++) {
            Rank &me = r[g], &peer = r[1 - g];
            CK(cudaSetDevice(g));
            if (i < kc) {
                size_t lo = i * c, m = (lo + c <= nv ? c : nv - lo);
                uint64_t seq = k * kc + i;  // cumulative chunk number
                // Copy stream s carries chunks i with i % ns == s and counts
                // them in its own word ready[s] (copies on different
                // streams may finish out of order).
                int st = (int)(i % ns);
                uint64_t per = (kc + ns - 1 - st) / ns, sseq = k * per + i / ns;
                cudaStream_t cs = me.cs[st];
                if (seq >= (uint64_t)d)
                    CU(cuStreamWaitValue64((CUstream)cs, (CUdeviceptr)me.cons, seq - d + 1, CU_STREAM_WAIT_VALUE_GEQ));
                CK(cudaMemcpyAsync(peer.slots + (seq % d) * c, me.send + lo, m * 4, cudaMemcpyDefault, cs));
                CU(cuStreamWriteValue64((CUstream)cs, (CUdeviceptr)(peer.ready + st), sseq + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
                CU(cuStreamWaitValue64((CUstream)me.rs, (CUdeviceptr)(me.ready + st), sseq + 1, CU_STREAM_WAIT_VALUE_GEQ));
                add<<<addGrid(m / 4, blocks), kThreads, 0, me.rs>>>((float4*)(me.out + lo), (const float4*)(me.send + lo),
                                                           (const float4*)(me.slots + (seq % d) * c), m / 4);
                CU(cuStreamWriteValue64((CUstream)me.rs, (CUdeviceptr)peer.cons, seq + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
            }
            if (i < kp) {
                size_t lo = i * c, m = (lo + c <= pc ? c : pc - lo);
                uint64_t seq = k * kp + i;
                CK(cudaMemcpyAsync(me.host + lo, me.send + nv + lo, m * 4, cudaMemcpyDeviceToHost, me.up));
                CU(cuStreamWriteValue64((CUstream)me.up, (CUdeviceptr)me.hready, seq + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
                CU(cuStreamWaitValue64((CUstream)me.down, (CUdeviceptr)peer.hready, seq + 1, CU_STREAM_WAIT_VALUE_GEQ));
                CK(cudaMemcpyAsync(me.stage + lo, peer.host + lo, m * 4, cudaMemcpyHostToDevice, me.down));
                add<<<addGrid(m / 4, blocks), kThreads, 0, me.down>>>((float4*)(me.out + nv + lo), (const float4*)(me.send + nv + lo),
                                                             (const float4*)(me.stage + lo), m / 4);
            }
        }
    }
    // The host buffers and the staging buffers are reused by the next
    // call without flow control: the probe synchronises both GPUs between
    // calls (see main), which a library would replace with a counter.
}

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void syncAll(Rank* r) {
    for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
    }
}

int main() {
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        fprintf(stderr, "ce_pipeline_probe: needs two GPUs, found %d\n", n);
        return 1;
    }
    const size_t maxBytes = (size_t)1 << 30, maxPCIe = maxBytes / 8, maxSlots = (size_t)128 << 20;
    Rank r[2];
    for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceEnablePeerAccess(1 - g, 0));
        CK(cudaMalloc(&r[g].send, maxBytes));
        CK(cudaMalloc(&r[g].out, maxBytes));
        CK(cudaMalloc(&r[g].slots, maxSlots));
        CK(cudaMalloc(&r[g].stage, maxPCIe));
        CK(cudaHostAlloc(&r[g].host, maxPCIe, cudaHostAllocPortable | cudaHostAllocMapped));
        CK(cudaHostAlloc(&r[g].hready, 64, cudaHostAllocPortable | cudaHostAllocMapped));
        *r[g].hready = 0;
        CK(cudaHostAlloc(&r[g].gate, 64, cudaHostAllocPortable | cudaHostAllocMapped));
        *r[g].gate = 0;
        CK(cudaMalloc(&r[g].ready, 64));
        CK(cudaMalloc(&r[g].cons, 64));
        CK(cudaMemset(r[g].ready, 0, 64));
        CK(cudaMemset(r[g].cons, 0, 64));
        CK(cudaMalloc(&r[g].bad, 8));
        for (cudaStream_t* s : {&r[g].cs[0], &r[g].cs[1], &r[g].rs, &r[g].up, &r[g].down})
            CK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
        fill<<<kBlocks, kThreads>>>(r[g].send, maxBytes / 4, g);
    }
    syncAll(r);
    // Call counters per configuration: each configuration starts from zeroed
    // words (reset below), so k counts its own calls.
    auto reset = [&]() {
        syncAll(r);
        for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            CK(cudaMemset(r[g].ready, 0, 64));
            CK(cudaMemset(r[g].cons, 0, 64));
            *r[g].hready = 0;
            *r[g].gate = 0;
        }
        syncAll(r);
    };
    auto open = [&](uint64_t v) {
        for (int g = 0; g < 2; g++) __atomic_store_n(r[g].gate, v, __ATOMIC_SEQ_CST);
    };
    const int warm = 3, iters = 10;
    for (size_t bytes : {(size_t)256 << 20, (size_t)1 << 30}) {
        size_t nf = bytes / 4;
        // Ceiling: both GPUs copy the whole vector to the other at once.
        {
            double best = 1e9;
            for (int it = 0; it < warm + iters; it++) {
                syncAll(r);
                double t0 = now();
                for (int g = 0; g < 2; g++) {
                    CK(cudaSetDevice(g));
                    CK(cudaMemcpyPeerAsync(r[1 - g].out, 1 - g, r[g].send, g, bytes, r[g].cs[0]));
                }
                syncAll(r);
                double t = now() - t0;
                if (it >= warm && t < best) best = t;
            }
            printf("%5zu MiB ceiling: both GPUs copy %zu MiB to the other: %.1f GB/s per direction\n", bytes >> 20,
                   bytes >> 20, bytes / best / 1e9);
        }
        // Ceiling of SM stores and copy engines together over NVLink: both
        // GPUs store a fraction of the vector into the other with a kernel
        // while a copy engine moves the rest (bandwidth only, no order).
        for (double sm : {1.0, 0.5, 0.25})
            for (int blocks : {132, 264}) {
                size_t sb = (size_t)(bytes * sm) / 4096 * 4096, cb = bytes - sb;
                double best = 1e9;
                for (int it = 0; it < warm + iters; it++) {
                    syncAll(r);
                    double t0 = now();
                    for (int g = 0; g < 2; g++) {
                        CK(cudaSetDevice(g));
                        put<<<blocks, kThreads, 0, r[g].rs>>>((float4*)r[1 - g].out, (const float4*)r[g].send, sb / 16);
                        if (cb) CK(cudaMemcpyAsync((char*)r[1 - g].out + sb, (char*)r[g].send + sb, cb, cudaMemcpyDefault, r[g].cs[0]));
                    }
                    syncAll(r);
                    double t = now() - t0;
                    if (it >= warm && t < best) best = t;
                }
                printf("%5zu MiB ceiling: %3.0f %% SM stores (%d blocks), the rest copy engine, both GPUs at once: %.1f GB/s per direction\n",
                       bytes >> 20, sm * 100, blocks, bytes / best / 1e9);
            }
        // Ceiling with a PCIe share: both GPUs copy 92 % to the other over
        // NVLink while 8 % goes down to pinned host memory and 8 % comes up
        // from the peer's host buffer, all at once (bandwidth only, no order).
        {
            size_t hp = bytes / 100 * 8 / 4096 * 4096, nvb = bytes - hp;
            double best = 1e9;
            for (int it = 0; it < warm + iters; it++) {
                syncAll(r);
                double t0 = now();
                for (int g = 0; g < 2; g++) {
                    CK(cudaSetDevice(g));
                    CK(cudaMemcpyPeerAsync(r[1 - g].out, 1 - g, r[g].send, g, nvb, r[g].cs[0]));
                    CK(cudaMemcpyAsync(r[g].host, r[g].send + nvb / 4, hp, cudaMemcpyDeviceToHost, r[g].up));
                    CK(cudaMemcpyAsync(r[g].stage, r[1 - g].host, hp, cudaMemcpyHostToDevice, r[g].down));
                }
                syncAll(r);
                double t = now() - t0;
                if (it >= warm && t < best) best = t;
            }
            printf("%5zu MiB ceiling: 92 %% over NVLink, 8 %% through host memory at once: %.1f GB/s per direction\n",
                   bytes >> 20, bytes / best / 1e9);
        }
        struct Cfg {
            size_t cb;  // chunk bytes
            int d;      // slots
            double share;
            int ns;      // copy streams
            int blocks;  // reduce kernel's blocks (at most)
            bool gated;
        };
        std::vector<Cfg> cfgs;
        // Earlier calls (docs/PERF.md): 2-8 MiB chunks lose to per-chunk
        // costs, depth 4 = depth 2, gated = live. Here: one against two
        // copy streams, a full against a quarter-sized reduce grid, PCIe
        // shares on the best shapes.
        for (size_t cb : {(size_t)16 << 20, (size_t)32 << 20})
            for (int ns : {1, 2})
                for (int blocks : {kBlocks, kBlocks / 4})
                    cfgs.push_back({cb, 4, 0.0, ns, blocks, false});
        cfgs.push_back({(size_t)32 << 20, 4, 0.0, 2, kBlocks, true});
        for (size_t cb : {(size_t)16 << 20, (size_t)32 << 20})
            for (double share : {0.04, 0.06, 0.08})
                for (int blocks : {kBlocks, kBlocks / 4}) cfgs.push_back({cb, 4, share, 2, blocks, false});
        if (getenv("CEPROBE_CEILINGS_ONLY")) cfgs.clear();  // the link ceilings alone
        for (const Cfg& f : cfgs) {
            size_t cb = f.cb;
            int d = f.d;
            double share = f.share;
            bool gated = f.gated;
            size_t c = cb / 4;
            size_t pc = (size_t)(nf * share) / 1024 * 1024;
            if (pc * 4 > maxPCIe) continue;
            reset();
            double total = 0, enq = 0;
            uint64_t k = 0;
            bool blocked = false;
            for (int it = 0; it < warm + iters; it++, k++) {
                syncAll(r);
                std::atomic<bool> done{false};
                std::thread dog;
                if (gated)
                    dog = std::thread([&, k]() {
                        double end = now() + 2.0;
                        while (!done.load() && now() < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
                        if (!done.load()) {
                            blocked = true;
                            open(k + 1);
                        }
                    });
                double ts = now();
                call(r, nf, c, d, pc, k, gated, f.ns, f.blocks);
                double t1 = now(), t0 = ts;
                if (gated) {
                    done.store(true);
                    dog.join();
                    open(k + 1);
                    t0 = now();
                }
                syncAll(r);
                double t2 = now();
                if (it >= warm) {
                    total += t2 - t0;
                    enq += t1 - ts;
                }
            }
            unsigned long long bad[2] = {0, 0};
            for (int g = 0; g < 2; g++) {
                CK(cudaSetDevice(g));
                CK(cudaMemset(r[g].bad, 0, 8));
                check<<<kBlocks, kThreads>>>(r[g].out, nf, r[g].bad);
                CK(cudaMemcpy(&bad[g], r[g].bad, 8, cudaMemcpyDeviceToHost));
                CK(cudaMemset(r[g].out, 0, bytes));  // the next configuration writes it again
            }
            double t = total / iters;
            printf("%5zu MiB chunk %2zu MiB depth %d streams %d blocks %3d pcie %.2f %s: %8.1f us, busbw %6.1f GB/s, enqueue %7.1f us/call, wrong %llu %llu%s\n",
                   bytes >> 20, cb >> 20, d, f.ns, f.blocks, share, gated ? "gated" : "live ", t * 1e6, bytes / t / 1e9, enq / iters * 1e6,
                   bad[0], bad[1], blocked ? " (enqueue blocked: gate opened by the watchdog)" : "");
        }
    }
    return 0;
}

