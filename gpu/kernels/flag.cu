// The flag allreduce: one kernel per call, no host involvement between
// ranks. Included by reduce.cu (same compile unit, same PTX).
//
//   flexlink_flag_<op>_<t>(T* out, const T* in, u64 count, u8* region,
//                          u64 chunk, u64 div, u64 sig, u64 pcount, u64 call)
//
// Every rank of the communicator owns a "region" of device memory that the
// others have mapped (CUDA IPC) at setup; the layout is fixed (package gpu,
// flag.go, mirrors these offsets):
//
//   [0, 4 KiB)        control, written once by the host:
//                       u64 region[8]   rank j's region as mapped here
//                       u64 errHost     device address of host-mapped
//                                       words (0: none): word 0 the error
//                                       word, word 2 the host's abort word
//                       u64 timeoutNs   how long a wait may take
//                       u64 slotBytes, depth, maxBlocks, nranks, me
//                       u64 host[8]     rank j's PCIe inbox as mapped here
//                       u64 hostSlot, hostBlocks, times (see "PCIe part")
//   [4 KiB, 14 KiB)   ready[s][b]: chunks sender s's block b has delivered
//                     here (written by s over NVLink)
//   [14 KiB, 24 KiB)  cons[t][b]: chunks receiver t's block b has consumed
//                     of what this rank sent it (written by t)
//   [24 KiB, +1280)   base[b]: chunks block b has processed in all calls so
//                     far (this rank only)
//   then abort        set (with the error word) when a block of this rank
//                     fails; the other blocks, polling device memory rather
//                     than the host's word, stop too
//   26 KiB            plan[4]{pcount, sig, call, 0}: rank 0's PCIe split of
//                     call number `call`, written by rank 0 (see "PCIe part")
//   [64 KiB, ...)     data[p][b][k]: slot k of block b of peer p (the
//                     senders other than this rank, in rank order), slotBytes:
//                     a 256-byte header (u64 sig: the call's signature, u64
//                     seq: the chunk's number), then the chunk
//
// The vector is cut into chunks of `chunk` elements; block b takes chunks b,
// b+grid, b+2*grid, ... Per chunk it pushes its rank's part of `in` into
// every peer's slot (SM stores over NVLink), raises the peer's ready
// counter, waits for every peer's ready counter, folds all ranks' parts in
// rank order (so every rank computes the same bits) into `out`, and raises
// every sender's cons counter, which frees the slot for reuse `depth`
// chunks later. Counters are cumulative across calls; every rank runs the
// same calls with the same grid, so they stay in step; the signature (the
// host's encoding of the collective, count, dtype and op) and the chunk's
// number in each slot header catch ranks that are not. A wait that outlasts timeoutNs, or a chunk whose signature
// differs from this rank's, writes (1<<63 | what<<40 | block<<16 | peer)
// to the error word (what: 1 waiting for room in the peer's slots, 2
// waiting for its data, 3 signature mismatch) and ends the kernel; every
// block of this rank then stops waiting too. The host reports the word and
// breaks the communicator.
//
// PCIe part (two ranks, calls the host marks with call != 0): the last
// ctl.hostBlocks blocks of the grid move the tail of the vector, pcount
// elements, through pinned host memory instead of NVLink: their slots are
// in the receiver's "inbox" (shared host memory both processes map; SM
// stores over PCIe into it, the receiver's SM loads over PCIe out of it,
// volatile so no stale cache line is read), chunks of hostSlot bytes less
// the header; counters and signatures as above. The other blocks share the
// head over NVLink. Both ranks must cut the vector alike: rank 0's host
// chooses pcount (its balancer) and its block 0 publishes it in rank 1's
// plan[call % 4]; rank 1 passes pcount = ~0 and its blocks read it there
// (a rank is never more than one call ahead of its peer's slowest block).
// Every block of such a call then writes (call << 40 | its time in ns) to
// times[b] (mapped host memory), which rank 0's host reads to feed the
// balancer how long each link took for its share; block 0 writes pcount
// to times[FLAG_MAX_BLOCKS] (rank 1's host reports the split from it).
//
// Lines (small calls): after the slots, a region holds line slots
// ll[p][b][2] (p, b as for the slots; FLAG_LL_SLOT bytes each, two per
// sender and block) for blocks below ctl.llBlocks. A call whose blocks
// each move at most one chunk of at most FLAG_LL_PAY bytes, with a grid of
// at most llBlocks and no PCIe part, sends its chunk as lines of 16 bytes,
// {lo32, flag, hi32, flag}, 8 bytes of data each, line 0 carrying the
// signature, into line slot seq % 2, where flag = seq % 0xffffffff + 1
// (never 0, the zeroed region's value, and different from the slot's
// previous use, seq - 2). The receiver's threads poll their own lines
// until both flags of a line are this chunk's: a 16-byte store arrives as
// two whole 8-byte halves, so a line with both flags right holds the data.
// No fence: one NVLink store latency per call, as NCCL's LL protocol. The
// sender still writes the slot's header and raises the ready counter
// (unordered, unread by a line receiver), so that a peer that took the
// slots for this call (ranks calling different collectives or counts)
// finds the signature wrong at once. The cons counters, base and the slot
// credit work as for the slots (a sender waits for cons >= seq - 1 before it overwrites
// line slot seq % 2), so line calls and slot calls mix; every rank decides
// from the same count, chunk and grid, so all take the same way.
//
// Each block is 512 threads; thread 0 does the waiting and signalling, the
// barrier spreads what it saw (acquire) and gathers what the others did
// (release) around it. Measured on 2xH200: a fence in every thread after
// its stores held a block to ~5 GB/s.

#define FLAG_MAX_RANKS 8
#define FLAG_MAX_BLOCKS 160
#define FLAG_READY_OFF 4096
#define FLAG_CONS_OFF (FLAG_READY_OFF + 8 * FLAG_MAX_RANKS * FLAG_MAX_BLOCKS)
#define FLAG_BASE_OFF (FLAG_CONS_OFF + 8 * FLAG_MAX_RANKS * FLAG_MAX_BLOCKS)
#define FLAG_ABORT_OFF (FLAG_BASE_OFF + 8 * FLAG_MAX_BLOCKS)
#define FLAG_PLAN_OFF (26 * 1024)
#define FLAG_DATA_OFF 65536
#define FLAG_SLOT_HDR 256
#define FLAG_LL_PAY (8 * 1024)                         // payload bytes of one line slot
#define FLAG_LL_SLOT (2 * FLAG_LL_PAY + FLAG_SLOT_HDR)  // its lines: 16 bytes carry 8

struct FlagCtl {
    u64 region[FLAG_MAX_RANKS];
    u64 errHost;
    u64 timeoutNs;
    u64 slotBytes, depth, maxBlocks, nranks, me;
    u64 host[FLAG_MAX_RANKS];
    u64 hostSlot, hostBlocks, times;
    u64 llBlocks;  // blocks with a line area (0: none; see "Lines")
};

__device__ __forceinline__ u64 ld_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// st_relaxed: a counter store after a fence (one fence.sc.sys orders the
// whole step; st.release.sys would put a system-wide membar in front of
// every counter, 2(n-1) per step).
__device__ __forceinline__ void st_relaxed(u64* p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ vec16 ld_cg(const vec16* p) {
    vec16 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}
// ld_vol loads from pinned host memory that another GPU writes: never from
// a cache line this GPU may hold.
__device__ __forceinline__ vec16 ld_vol(const vec16* p) {
    vec16 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}
template <class S>
__device__ __forceinline__ S ld_cg_one(const S* p) {
    return *(const volatile S*)p;
}

// wait_at_least spins (thread 0 only) until *p >= want or the deadline;
// false on timeout, after writing the error word.
// fail records what went wrong in the error word (mapped host memory, so
// a plain store: when blocks fail at once, one of their reports stays).
__device__ __forceinline__ void fail(const FlagCtl& c, u64 what, u64 peer) {
    *(volatile u64*)((unsigned char*)c.region[c.me] + FLAG_ABORT_OFF) = 1;
    if (c.errHost) {
        *(volatile u64*)c.errHost = (1ull << 63) | (what << 40) | ((u64)blockIdx.x << 16) | peer;
        __threadfence_system();
    }
}

// host_aborted reads the host's abort word (word 2 of the error words,
// set by the library when the job is aborted): a wait checks it every
// 4096 spins (a read across PCIe), so that an abort reaches a kernel even
// when the copy that sets the region's abort word waits behind other work
// on the copy engines.
__device__ __forceinline__ bool host_aborted(const FlagCtl& c, int spin) {
    return (spin & 4095) == 4095 && c.errHost && *(volatile u64*)(c.errHost + 16);
}

// wait_at_least spins (thread 0 only) until *p >= want; false when the
// deadline passes first (after recording it) or another block has failed.
__device__ __forceinline__ bool wait_at_least(const u64* p, u64 want, const FlagCtl& c,
                                              u64 deadline, u64 what, u64 peer) {
    if ((long long)want <= 0) return true;
    for (int spin = 0;; spin++) {
        if (ld_acquire(p) >= want) return true;
        if ((spin & 63) == 63) {
            if (*(volatile u64*)((unsigned char*)c.region[c.me] + FLAG_ABORT_OFF) || host_aborted(c, spin)) return false;
            if (globaltimer() > deadline) {
                fail(c, what, peer);
                return false;
            }
        }
    }
}

// wait_plan (rank 1, thread 0) waits for rank 0's plan of call `call` and
// returns its pcount, or ~0 after recording a failure: a plan of another
// signature, a count beyond this call's, or, while it waits, a chunk of
// rank 0's in this block's NVLink slot (blocks below nvg push there in any
// call) that belongs to another call: rank 0 runs a call without a plan.
__device__ __forceinline__ u64 wait_plan(const FlagCtl& c, unsigned char* region, u64 call, u64 sig,
                                         u64 count, u64 b0, bool nvlinkBlock, u64 deadline) {
    const u64* plan = (const u64*)(region + FLAG_PLAN_OFF) + 4 * (call % 4);
    const u64* ready = (const u64*)(region + FLAG_READY_OFF) + blockIdx.x;  // sender 0
    const u64* hdr = (const u64*)(region + FLAG_DATA_OFF + (blockIdx.x * c.depth + b0 % c.depth) * c.slotBytes);
    for (int spin = 0;; spin++) {
        if (ld_acquire(plan + 2) >= call) {
            const u64 pc = *(volatile const u64*)plan;
            if (*(volatile const u64*)(plan + 1) == sig && pc <= count) return pc;
            fail(c, 3, 0);
            return ~0ull;
        }
        if (nvlinkBlock && ld_acquire(ready) >= b0 + 1 &&
            (*(volatile const u64*)hdr != sig || *(volatile const u64*)(hdr + 1) != b0)) {
            fail(c, 3, 0);
            return ~0ull;
        }
        if ((spin & 63) == 63) {
            if (*(volatile u64*)(region + FLAG_ABORT_OFF) || host_aborted(c, spin)) return ~0ull;
            if (globaltimer() > deadline) {
                fail(c, 2, 0);
                return ~0ull;
            }
        }
    }
}

// fold_vec folds U vectors of 16 bytes at i, i+nt, ...: the loads of one
// rank's U vectors are in flight together.
template <class T, int U, int NR, bool H, class F>
__device__ __forceinline__ void fold_vec(typename T::S* out, const typename T::S* mine,
                                         const typename T::S* const* src, int n, int me, u64 i,
                                         u64 nt, const F& f, u64 div) {
    typedef typename T::S S;
    typedef typename T::A A;
    const int V = 16 / sizeof(S);
    union W {
        vec16 v;
        S s[16 / sizeof(S)];
    };
    A a[U][16 / sizeof(S)];
    if constexpr (NR == 2) {
        // Two ranks: both operands' loads in flight at once, then rank 0's
        // op rank 1's.
        W x[U], y[U];
        const vec16* peer = (const vec16*)src[1 - me];
#pragma unroll
        for (int u = 0; u < U; u++) {
            x[u].v = ((const vec16*)mine)[i + u * nt];
            y[u].v = H ? ld_vol(peer + i + u * nt) : ld_cg(peer + i + u * nt);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < V; k++)
                a[u][k] = me == 0 ? f(T::ld(x[u].s[k]), T::ld(y[u].s[k])) : f(T::ld(y[u].s[k]), T::ld(x[u].s[k]));
    } else {
    for (int r = 0; r < n; r++) {
        W x[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            x[u].v = r == me ? ((const vec16*)mine)[i + u * nt]
                     : H   ? ld_vol((const vec16*)src[r] + i + u * nt)
                           : ld_cg((const vec16*)src[r] + i + u * nt);
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < V; k++) a[u][k] = r == 0 ? T::ld(x[u].s[k]) : f(a[u][k], T::ld(x[u].s[k]));
    }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        W o;
#pragma unroll
        for (int k = 0; k < V; k++) {
            A y = a[u][k];
            if (div) y = Scale<T>{div}(y, y);
            o.s[k] = T::st(y);
        }
        ((vec16*)out)[i + u * nt] = o.v;
    }
}

// fold computes out[i] = in_0[i] op in_1[i] op ... over ranks in order, where
// rank me's part is `mine` and rank r's is src[r] (local slots), then the
// division of avg.
template <class T, int NR, bool H, class F>
__device__ __forceinline__ void fold(typename T::S* out, const typename T::S* mine,
                                     const typename T::S* const* src, int n, int me, u64 cnt,
                                     const F& f, u64 div) {
    typedef typename T::S S;
    typedef typename T::A A;
    const u64 V = 16 / sizeof(S);
    u64 done = 0;
    if ((((u64)out | (u64)mine) & 15) == 0) {
        const u64 nv = cnt / V, nt = blockDim.x;
        u64 i = threadIdx.x;
        if constexpr (Wide<T>::value)
            for (; i + 3 * nt < nv; i += 4 * nt) fold_vec<T, 4, NR, H>(out, mine, src, n, me, i, nt, f, div);
        for (; i < nv; i += nt) fold_vec<T, 1, NR, H>(out, mine, src, n, me, i, nt, f, div);
        done = nv * V;
    }
    for (u64 i = done + threadIdx.x; i < cnt; i += blockDim.x) {
        A a = 0;
        for (int r = 0; r < n; r++) {
            A x = T::ld(r == me ? mine[i] : ld_cg_one(src[r] + i));
            a = r == 0 ? x : f(a, x);
        }
        if (div) a = Scale<T>{div}(a, a);
        out[i] = T::st(a);
    }
}

// push copies cnt elements of src into dst (a peer's slot), 16-byte vectors
// when both allow it; CG: src is a slot a peer wrote (loads skip L1).
template <class S, bool CG = false>
__device__ __forceinline__ void push(S* dst, const S* src, u64 cnt) {
    const u64 V = 16 / sizeof(S);
    u64 done = 0;
    if ((((u64)dst | (u64)src) & 15) == 0) {
        const u64 nv = cnt / V;
        const vec16* s = (const vec16*)src;
        vec16* d = (vec16*)dst;
        u64 i = threadIdx.x;
        const u64 nt = blockDim.x;
        const int U = 8;  // vectors in flight per thread
        for (; i + (U - 1) * nt < nv; i += U * nt) {
            vec16 x[U];
#pragma unroll
            for (int u = 0; u < U; u++) x[u] = CG ? ld_cg(s + i + u * nt) : s[i + u * nt];
#pragma unroll
            for (int u = 0; u < U; u++) d[i + u * nt] = x[u];
        }
        for (; i < nv; i += nt) d[i] = CG ? ld_cg(s + i) : s[i];
        done = nv * V;
    }
    for (u64 i = done + threadIdx.x; i < cnt; i += blockDim.x) dst[i] = CG ? ld_cg_one(src + i) : src[i];
}

// MODE: FLAG_AR allreduce (out = fold of every rank's in); FLAG_RS
// reduce-scatter (in holds nranks blocks of count, block t goes to rank t,
// out = fold of every rank's block me); FLAG_GATHER allgather (out holds
// nranks blocks, block r = rank r's in) or, with a2a, alltoall (in and out
// hold nranks blocks; block t of in goes to rank t, block r of out comes
// from rank r) or, with xchg (two ranks), an exchange (in: count bytes for
// the peer; out: the peer's count bytes, no own block). The push and the
// slots are the same for all: every peer transfer is count elements, cut
// into the same chunks.
//
// root (FLAG_NO_ROOT for the collectives above) makes the payload one-
// sided: FLAG_AR with a root is a reduce (the peers send their data to root
// only, root folds, the others write nothing), FLAG_GATHER with a root a
// broadcast (root sends its data to every peer, each copies root's chunk
// into out, count bytes; root copies in to out unless they are the same).
// The signalling stays symmetric: every rank still writes a slot header
// (the call's signature, which names the root, and the step) to every peer
// each step, with or without data, and checks every peer's header. So
// ranks that disagree on the root, or on the collective, fail with the
// mismatch error instead of finishing on their own, and the slot credits
// stay in step for the next call, whatever its roots.
// ll_flag is a line slot's flag for chunk seq (see "Lines").
__device__ __forceinline__ u32 ll_flag(u64 seq) { return (u32)(seq % 0xffffffffull) + 1; }

// ll_get8 reads the 8 bytes of line l of a chunk of cnt elements at p
// (elements past cnt read as 0), one load when whole and aligned.
template <class S>
__device__ __forceinline__ u64 ll_get8(const S* p, u64 cnt, u64 l) {
    const u64 E = 8 / sizeof(S), i0 = l * E;
    if (i0 + E <= cnt && (((u64)(p + i0)) & 7) == 0) return *(const u64*)(p + i0);
    union { u64 w; S s[8 / sizeof(S)]; } u;
    u.w = 0;
    for (u64 k = 0; k < E && i0 + k < cnt; k++) u.s[k] = p[i0 + k];
    return u.w;
}

// ll_put8 writes line l's 8 bytes w to the chunk of cnt elements at p.
template <class S>
__device__ __forceinline__ void ll_put8(S* p, u64 cnt, u64 l, u64 w) {
    const u64 E = 8 / sizeof(S), i0 = l * E;
    if (i0 + E <= cnt && (((u64)(p + i0)) & 7) == 0) {
        *(u64*)(p + i0) = w;
        return;
    }
    union { u64 w; S s[8 / sizeof(S)]; } u;
    u.w = w;
    for (u64 k = 0; k < E && i0 + k < cnt; k++) p[i0 + k] = u.s[k];
}

__device__ __forceinline__ void ll_store(vec16* p, u64 w, u32 flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"((u32)w), "r"(flag),
                 "r"((u32)(w >> 32)), "r"(flag)
                 : "memory");
}

// ll_wait polls line p until both its flags are flag and returns its 8
// bytes; on the deadline it records the failure (what 2, waiting for the
// peer's data) and sets *bad, as does another block's failure.
__device__ __forceinline__ u64 ll_wait(const vec16* p, u32 flag, const FlagCtl& c, u64 deadline, int peer,
                                       volatile int* bad) {
    for (int spin = 0;; spin++) {
        const vec16 v = ld_vol(p);
        if (v.y == flag && v.w == flag) return (u64)v.x | (u64)v.z << 32;
        if ((spin & 63) == 63) {
            if (*bad || *(volatile u64*)((unsigned char*)c.region[c.me] + FLAG_ABORT_OFF) || host_aborted(c, spin)) {
                *bad = 1;
                return 0;
            }
            if (globaltimer() > deadline) {
                fail(c, 2, peer);
                *bad = 1;
                return 0;
            }
        }
    }
}

#define FLAG_NO_ROOT 0xffffffffffffffffull
#define FLAG_AR 0
#define FLAG_RS 1
#define FLAG_GATHER 2

template <class T, int MODE, class F>
__device__ __forceinline__ void flag_run(typename T::S* out, const typename T::S* in, u64 count,
                                         unsigned char* region, u64 chunk, u64 div, u64 sig,
                                         u64 pcount, u64 call, bool a2a, bool xchg, u64 root, const F& f) {
    typedef typename T::S S;
    __shared__ FlagCtl c;
    __shared__ u64 b0, pc;
    __shared__ int abort_;
    const u64 t0 = globaltimer();
    if (threadIdx.x == 0) {
        c = *(const FlagCtl*)region;
        b0 = ((const u64*)(region + FLAG_BASE_OFF))[blockIdx.x];
        abort_ = *(volatile u64*)(region + FLAG_ABORT_OFF) != 0;  // an earlier call failed
        pc = 0;
        if (call && !abort_) {
            if (c.me == 0) {
                pc = pcount;
                if (blockIdx.x == 0) {
                    u64* peer = (u64*)((unsigned char*)c.region[1] + FLAG_PLAN_OFF) + 4 * (call % 4);
                    *(volatile u64*)peer = pcount;
                    *(volatile u64*)(peer + 1) = sig;
                    st_release(peer + 2, call);
                }
            } else {
                pc = wait_plan(c, region, call, sig, count, b0, blockIdx.x < gridDim.x - c.hostBlocks,
                               t0 + c.timeoutNs);
            }
            if (pc > count) {  // a failure recorded, or a host that passed a bad pcount
                if (c.me == 0) fail(c, 3, 1);
                abort_ = 1;
            }
        }
    }
    __syncthreads();
    if (abort_) return;
    const int n = (int)c.nranks, me = (int)c.me;
    const int rt = root == FLAG_NO_ROOT ? -1 : (int)root;
    const bool bcast = MODE == FLAG_GATHER && rt >= 0;
    // payload(t): this rank's pushes to t carry data, not only a header.
    auto payload = [&](int t) -> bool { return rt < 0 || (bcast ? me == rt : t == rt); };
    // Roles: with a PCIe part, blocks [0, nvg) take the head [0, count-pc)
    // over NVLink in chunks of `chunk`, blocks [nvg, grid) the tail over
    // host memory in chunks of hostSlot less the header.
    const u64 pg = call ? c.hostBlocks : 0, nvg = gridDim.x - pg;
    const bool host = MODE == FLAG_AR && blockIdx.x >= nvg;  // only allreduces have a PCIe part
    const u64 b = host ? blockIdx.x - nvg : blockIdx.x, grid = host ? pg : nvg;
    const u64 base = host ? count - pc : 0, len = host ? pc : count - pc;
    const u64 ck = host ? (c.hostSlot - FLAG_SLOT_HDR) / sizeof(S) : chunk;
    const u64 G = (len + ck - 1) / ck;
    const u64 nb = G > b ? (G - b + grid - 1) / grid : 0;
    const u64 deadline = t0 + c.timeoutNs;
    const u64 cb = blockIdx.x;  // counters are per launched block
    u64* ready = (u64*)(region + FLAG_READY_OFF);  // [s][b], mine
    u64* cons = (u64*)(region + FLAG_CONS_OFF);    // [t][b], mine
    // A region holds slots for its owner's peers only: sender's index among
    // them is sender, less one past the owner.
    auto slot = [&](int owner, int sender, u64 seq) -> unsigned char* {
        if (sender > owner) sender--;
        if (host)
            return (unsigned char*)c.host[owner] +
                   ((sender * c.hostBlocks + b) * c.depth + seq % c.depth) * c.hostSlot;
        return (unsigned char*)c.region[owner] + FLAG_DATA_OFF +
               ((sender * c.maxBlocks + b) * c.depth + seq % c.depth) * c.slotBytes;
    };
    auto range = [&](u64 i, u64* lo) -> u64 {
        *lo = (b + i * grid) * ck;
        const u64 hi = *lo + ck < len ? *lo + ck : len;
        *lo += base;
        return hi - (*lo - base);
    };
    // Lines: one chunk or none per block, small, no PCIe part.
    if (c.llBlocks && pg == 0 && pc == 0 && gridDim.x <= c.llBlocks && G <= grid && ck * sizeof(S) <= FLAG_LL_PAY) {
        const u64 llOff = FLAG_DATA_OFF + (u64)(n - 1) * c.maxBlocks * c.depth * c.slotBytes;
        auto lslot = [&](int owner, int sender, u64 seq) -> vec16* {
            if (sender > owner) sender--;
            return (vec16*)((unsigned char*)c.region[owner] + llOff +
                            ((sender * c.llBlocks + b) * 2 + seq % 2) * FLAG_LL_SLOT);
        };
        if (nb == 0) return;  // no chunk for this block: nothing moves, base stays
        volatile int* bad = &abort_;  // set by any thread that gives up, read by all
        const u64 seq = b0;
        const u32 flag = ll_flag(seq);
        u64 lo;
        const u64 cnt = range(0, &lo);
        const u64 nl = (cnt * sizeof(S) + 7) / 8;  // data lines
        if (threadIdx.x == 0)
            for (int t = 0; t < n && !abort_; t++)
                if (t != me && !wait_at_least(&cons[t * FLAG_MAX_BLOCKS + cb], seq - 1, c, deadline, 1, t)) abort_ = 1;
        __syncthreads();
        if (abort_) return;
        const bool perPeer = MODE == FLAG_RS || (MODE == FLAG_GATHER && a2a);
        // The headers (sent and waited for) are the last thread's, in the
        // block's last warp, while the data lines start at thread 0: a
        // warp whose threads spin in two different waits (the header's and
        // a line's) takes turns between them (measured on 2xH200: a call of
        // two lines 0.4-0.7 us slower than one of one line, when thread 0
        // waited for both).
        const unsigned hdr = blockDim.x - 1;
        for (int k = 1; k < n; k++) {
            const int t = (me + k) % n;
            vec16* L = lslot(t, me, seq);
            if (threadIdx.x == hdr) {
                ll_store(L, sig, flag);
                // The slot's header and ready counter too (no fence): a
                // peer that took the slots for this call (another count
                // or collective) reads them and reports the mismatch at
                // once instead of waiting out the kernel timeout.
                unsigned char* sl = slot(t, me, seq);
                *(volatile u64*)sl = sig;
                *(volatile u64*)(sl + 8) = seq;
                st_relaxed((u64*)((unsigned char*)c.region[t] + FLAG_READY_OFF) + me * FLAG_MAX_BLOCKS + cb, seq + 1);
            }
            if (!payload(t)) continue;
            const S* src = in + (perPeer ? t * count : 0) + lo;
            for (u64 l = threadIdx.x; l < nl; l += blockDim.x) ll_store(L + 1 + l, ll_get8(src, cnt, l), flag);
        }
        if (threadIdx.x == hdr)
            for (int t = 0; t < n && !*bad; t++) {
                if (t == me) continue;
                const u64 h = ll_wait(lslot(me, t, seq), flag, c, deadline, t, bad);
                if (!*bad && h != sig) {
                    fail(c, 3, t);
                    *bad = 1;
                }
            }
        if (MODE == FLAG_GATHER) {
            if (bcast) {
                if (me != rt) {
                    const vec16* L = lslot(me, rt, seq) + 1;
                    for (u64 l = threadIdx.x; l < nl && !*bad; l += blockDim.x)
                        ll_put8(out + lo, cnt, l, ll_wait(L + l, flag, c, deadline, rt, bad));
                } else if (out != in)
                    push(out + lo, in + lo, cnt);
            } else
                for (int r = 0; r < n; r++) {
                    if (r == me) {
                        if (!xchg) push(out + r * count + lo, in + (a2a ? me * count : 0) + lo, cnt);
                        continue;
                    }
                    const vec16* L = lslot(me, r, seq) + 1;
                    S* dst = out + (xchg ? 0 : r * count) + lo;
                    for (u64 l = threadIdx.x; l < nl && !*bad; l += blockDim.x)
                        ll_put8(dst, cnt, l, ll_wait(L + l, flag, c, deadline, r, bad));
                }
        } else if (rt < 0 || me == rt) {
            // A fold (allreduce, reduce at its root, reduce-scatter): line l
            // of every rank, in rank order, 8 bytes of elements each.
            typedef typename T::A A;
            const S* mine = in + (MODE == FLAG_RS ? me * count : 0) + lo;
            const u64 E = 8 / sizeof(S);
            for (u64 l = threadIdx.x; l < nl && !*bad; l += blockDim.x) {
                A a[8 / sizeof(S)];
                for (int r = 0; r < n; r++) {
                    union { u64 w; S s[8 / sizeof(S)]; } u;
                    u.w = r == me ? ll_get8(mine, cnt, l) : ll_wait(lslot(me, r, seq) + 1 + l, flag, c, deadline, r, bad);
#pragma unroll
                    for (u64 k = 0; k < E; k++) a[k] = r == 0 ? T::ld(u.s[k]) : f(a[k], T::ld(u.s[k]));
                }
                union { u64 w; S s[8 / sizeof(S)]; } o;
#pragma unroll
                for (u64 k = 0; k < E; k++) {
                    A y = a[k];
                    if (div) y = Scale<T>{div}(y, y);
                    o.s[k] = T::st(y);
                }
                if (!*bad) ll_put8(out + lo, cnt, l, o.w);
            }
        }
        __syncthreads();
        if (abort_) return;
        if (threadIdx.x == 0) {
            // Every line this block read was checked by its own load, so the
            // peers may reuse the slot now: relaxed counters, no fence.
            for (int k = 1; k < n; k++) {
                const int t = (me + k) % n;
                st_relaxed((u64*)((unsigned char*)c.region[t] + FLAG_CONS_OFF) + me * FLAG_MAX_BLOCKS + cb, seq + 1);
            }
            ((u64*)(region + FLAG_BASE_OFF))[blockIdx.x] = b0 + 1;
        }
        return;
    }
    // Step i pushes chunk i+1 into every peer's slot and folds chunk i,
    // which the peers pushed in their step i-1: thread 0 waits for room in
    // the peers' slots (they have folded chunk i+1-depth) and for their
    // chunk i, the block pushes and folds, and thread 0 raises the peers'
    // ready counters and their cons counters (after one system fence: the
    // barrier put every thread's stores and loads before it). Step i on one rank needs
    // only step i-1 on the others, so blocks never wait on each other.
    for (long long i = -1; i < (long long)nb; i++) {
        const bool doPush = i + 1 < (long long)nb, doFold = i >= 0;
        const u64 sseq = b0 + (u64)(i + 1), rseq = b0 + (u64)i;
        if (threadIdx.x == 0) {
            for (int t = 0; t < n && !abort_; t++) {
                if (t == me) continue;
                if (doPush && !wait_at_least(&cons[t * FLAG_MAX_BLOCKS + cb], sseq + 1 - c.depth, c, deadline, 1, t)) {
                    abort_ = 1;
                } else if (doFold && !wait_at_least(&ready[t * FLAG_MAX_BLOCKS + cb], rseq + 1, c, deadline, 2, t)) {
                    abort_ = 1;
                } else if (doFold && (*(volatile u64*)slot(me, t, rseq) != sig ||
                                      *(volatile u64*)(slot(me, t, rseq) + 8) != rseq)) {
                    fail(c, 3, t);
                    abort_ = 1;
                }
            }
        }
        __syncthreads();
        if (abort_) return;
        if (doPush) {
            u64 lo;
            const u64 cnt = range((u64)(i + 1), &lo);
            // Next rank first (me+1, me+2, ...): at every moment the ranks'
            // targets form a permutation, not N-1 senders on one GPU.
            for (int k = 1; k < n; k++) {
                const int t = (me + k) % n;
                unsigned char* sl = slot(t, me, sseq);
                if (threadIdx.x == 0) {
                    *(volatile u64*)sl = sig;
                    *(volatile u64*)(sl + 8) = sseq;
                }
                if (!payload(t)) continue;  // the header alone
                const bool perPeer = MODE == FLAG_RS || (MODE == FLAG_GATHER && a2a);
                push((S*)(sl + FLAG_SLOT_HDR), in + (perPeer ? t * count : 0) + lo, cnt);
            }
        }
        if (doFold) {
            u64 lo;
            const u64 cnt = range((u64)i, &lo);
            const S* src[FLAG_MAX_RANKS];
            for (int t = 0; t < n; t++) src[t] = t == me ? 0 : (const S*)(slot(me, t, rseq) + FLAG_SLOT_HDR);
            if (bcast) {
                if (me != rt)
                    push<S, true>(out + lo, src[rt], cnt);
                else if (out != in)
                    push(out + lo, in + lo, cnt);
            } else if (MODE == FLAG_AR && rt >= 0 && me != rt) {
                // a reduce's non-root: nothing to fold
            } else if (MODE == FLAG_GATHER) {
                for (int r = 0; r < n; r++) {
                    if (r == me) {
                        if (!xchg) push(out + r * count + lo, in + (a2a ? me * count : 0) + lo, cnt);
                    } else {
                        push<S, true>(out + (xchg ? 0 : r * count) + lo, src[r], cnt);
                    }
                }
            } else if (MODE == FLAG_RS) {
                if (n == 2)
                    fold<T, 2, false>(out + lo, in + me * count + lo, src, n, me, cnt, f, div);
                else
                    fold<T, 0, false>(out + lo, in + me * count + lo, src, n, me, cnt, f, div);
            } else if (MODE == FLAG_AR && host)
                fold<T, 2, true>(out + lo, in + lo, src, n, me, cnt, f, div);  // two ranks only
            else if (n == 2)
                fold<T, 2, false>(out + lo, in + lo, src, n, me, cnt, f, div);
            else
                fold<T, 0, false>(out + lo, in + lo, src, n, me, cnt, f, div);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            // One system fence releases the whole step (the barrier put
            // every thread's pushes and slot reads before it), then plain
            // counter stores, next rank first.
            __threadfence_system();
            for (int k = 1; k < n; k++) {
                const int t = (me + k) % n;
                unsigned char* peer = (unsigned char*)c.region[t];
                if (doPush) st_relaxed((u64*)(peer + FLAG_READY_OFF) + me * FLAG_MAX_BLOCKS + cb, sseq + 1);
                if (doFold) st_relaxed((u64*)(peer + FLAG_CONS_OFF) + me * FLAG_MAX_BLOCKS + cb, rseq + 1);
            }
        }
    }
    if (threadIdx.x == 0) {
        ((u64*)(region + FLAG_BASE_OFF))[blockIdx.x] = b0 + nb;
        if (call && c.times) {
            if (blockIdx.x == 0) *(volatile u64*)((u64*)c.times + FLAG_MAX_BLOCKS) = pc;  // rank 1 learns the split
            const u64 ns = globaltimer() - t0;
            *(volatile u64*)((u64*)c.times + blockIdx.x) = call << 40 | (ns < (1ull << 40) ? ns : (1ull << 40) - 1);
        }
    }
}

#define FLAG(OP, OPT, NAME, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(512)                                           \
        flexlink_flag_##OP##_##NAME(T::S* out, const T::S* in, u64 count, unsigned char* region, \
                                    u64 chunk, u64 div, u64 sig, u64 pcount, u64 call, u64 root) { \
        flag_run<T, FLAG_AR>(out, in, count, region, chunk, div, sig, pcount, call, false, false, root, OPT<T>()); \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(512)                                           \
        flexlink_flagrs_##OP##_##NAME(T::S* out, const T::S* in, u64 count, unsigned char* region, \
                                      u64 chunk, u64 div, u64 sig) {                            \
        flag_run<T, FLAG_RS>(out, in, count, region, chunk, div, sig, 0, 0, false, false, FLAG_NO_ROOT, OPT<T>()); \
    }

#define FLAG_TYPE(NAME, T)      \
    FLAG(sum, Sum, NAME, T)     \
    FLAG(prod, Prod, NAME, T)   \
    FLAG(min, Min, NAME, T)     \
    FLAG(max, Max, NAME, T)


#if FLEXLINK_WANT(common)
// The flag allgather (a2a 0), alltoall (a2a 1), two-rank exchange (a2a 2:
// a send and a receive in one group; out holds only the peer's count bytes)
// and broadcast (root: FLAG_NO_ROOT but for a broadcast) move bytes: count
// and chunk are bytes.
//
// cbytes > 0 adds a copy of cbytes from csrc to cdst on this GPU, done
// first, each block its slice of whole 256-byte pieces: a group's send and
// receive to the rank itself (a gather's or scatter's root, torch's
// all_to_all over sends and receives) rides in the kernel instead of a
// copy-engine copy ahead of it (4.7 us more per eager call, 0.8 replayed,
// on an H200: scripts/graph_node_probe.cu). It meets no peer.
extern "C" __global__ void __launch_bounds__(512)
    flexlink_flag_gather(unsigned char* out, const unsigned char* in, u64 count, unsigned char* region,
                         u64 chunk, u64 a2a, u64 sig, u64 root, unsigned char* cdst, const unsigned char* csrc,
                         u64 cbytes) {
    if (cbytes) {
        const u64 per = ((cbytes + gridDim.x - 1) / gridDim.x + 255) & ~(u64)255;
        const u64 lo = blockIdx.x * per;
        if (lo < cbytes) push(cdst + lo, csrc + lo, per < cbytes - lo ? per : cbytes - lo);
    }
    flag_run<TU8, FLAG_GATHER>(out, in, count, region, chunk, 0, sig, 0, 0, a2a == 1, a2a == 2, root, Sum<TU8>());
}
#endif // common
