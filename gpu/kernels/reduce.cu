// flexlink reduction kernels. Compiled to one fatbin per family (see README.md
// and below) and embedded in the Go binary; package gpu launches them with cuLaunchKernel.
//
//   flexlink_reduce_<op>_<t>(T* dst, const T* a, const T* b, u64 n)
//       dst[i] = a[i] op b[i] for i < n        op: sum prod min max
//   flexlink_scale_<t>(T* dst, const T* src, u64 n, u64 d)
//       dst[i] = src[i] / d (the last step of avg)
//   flexlink_premul_<t>(T* dst, const T* src, u64 n, const T* scalar)
//       dst[i] = src[i] * *scalar (NCCL's PreMulSum step; the scalar is one
//       element of T in device memory, read when the kernel runs)
//   flexlink_copy(u8* dst, const u8* src, u64 n)    a byte copy on the SMs
//   flexlink_copy2(u8* d1, u8* d2, const u8* src, u64 n)   into two places
//   flexlink_flag_<op>_<t>(...)                     the flag allreduce (flag.cu)
//   t: i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64, and f8e4m3 f8e5m2 in the
//      sm_90 build only (FLEXLINK_FP8: the conversions need sm_89's cvt, and
//      NCCL serves float8 from sm_90 on, as we do)
//
// The reduce and scale kernels match package reduce (the host path) bit
// for bit (the flag kernels of flag.cu fold all ranks in float32 for
// float16 and bfloat16 and round once, so they may differ from a chain of
// reduce kernels in the last bit; the tests compare with dtype.Tolerance):
//   - integers wrap on overflow (two's complement) for sum and prod;
//   - float16 and bfloat16 compute in float32 and round to nearest even;
//   - float8 computes in float32 and rounds to nearest even with CUDA's
//     satfinite conversion (past the largest finite value, ±Inf included:
//     that value), as NCCL does;
//   - premul multiplies as prod does (NCCL's FuncPreMulSum: float16 and
//     bfloat16 products are exact in float32, so one rounding, like __hmul);
//   - float min/max return NaN when either input is NaN (a+b), and order
//     -0 below +0;
//   - scale divides integers with truncation toward zero (in 64 bits), float16,
//     bfloat16 and float32 in float32, float64 in float64 (IEEE division).
//
// dst, a and b are separate pointers, so a and b may live on a peer GPU
// (peer access enabled) or be dst itself. When all three are 16-byte
// aligned the kernels move 16-byte vectors, four in flight per thread;
// otherwise, and for the tail, one element per thread. The grid strides, so
// any grid size covers any n.
//
// Self-contained: no CUDA headers, so any nvcc (or clang) compiles it.

// Families. The build (scripts/gpu-kernels.sh) compiles this file once per
// family, -DFLEXLINK_FAMILY=FAM_<name>, into one fatbin each, so a process
// loads only the kernels it uses: "common" (copy, copy2, the flag
// gather) and one per dtype (its reduce, scale, premul and flag kernels).
// Without FLEXLINK_FAMILY every kernel is compiled (one PTX file for
// FLEXLINK_GPU_PTX, and the clang check below).
#define FAM_common 1
#define FAM_i8 2
#define FAM_u8 3
#define FAM_i32 4
#define FAM_u32 5
#define FAM_i64 6
#define FAM_u64 7
#define FAM_f16 8
#define FAM_bf16 9
#define FAM_f32 10
#define FAM_f64 11
#define FAM_f8e4m3 12
#define FAM_f8e5m2 13
#ifndef FLEXLINK_FAMILY
#define FLEXLINK_FAMILY 0
#endif
#define FLEXLINK_WANT(name) (FLEXLINK_FAMILY == 0 || FLEXLINK_FAMILY == FAM_##name)

typedef unsigned long long u64;
typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef long long i64;
typedef unsigned short u16;
typedef unsigned int u32;

struct alignas(16) vec16 {
    u32 x, y, z, w;
};

// ---- element types: storage S, arithmetic type A, load/store conversions

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf16_to_f32(u16 h) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"((u32)h << 16));  // bfloat16 is float32's high half
    return f;
}
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

#if __CUDA_ARCH__ >= 900 || defined(FLEXLINK_FP8_CHECK)
#define FLEXLINK_FP8 1
// float8 <-> float32. Widening goes through float16 (cvt.rn.f16x2.e4m3x2
// converts a pair, exactly); narrowing rounds float32 straight to float8
// (cvt.rn.satfinite.e4m3x2.f32 packs its first operand in the high byte).
// Both need sm_89 and PTX ISA 7.8.
__device__ __forceinline__ float e4m3_to_f32(u8 x) {
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((u16)x));
    return f16_to_f32((u16)h2);
}
__device__ __forceinline__ float e5m2_to_f32(u8 x) {
    u32 h2;
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"((u16)x));
    return f16_to_f32((u16)h2);
}
__device__ __forceinline__ u8 f32_to_e4m3(float f) {
    u16 p;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p) : "f"(0.0f), "f"(f));
    return (u8)p;
}
__device__ __forceinline__ u8 f32_to_e5m2(float f) {
    u16 p;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(p) : "f"(0.0f), "f"(f));
    return (u8)p;
}
#endif

template <class S_, class A_, bool Int_>
struct Plain {
    typedef S_ S;
    typedef A_ A;
    static const bool Int = Int_;
    __device__ static __forceinline__ A ld(S x) { return x; }
    __device__ static __forceinline__ S st(A x) { return x; }
};
struct TI8 : Plain<i8, i8, true> {};
struct TU8 : Plain<u8, u8, true> {};
struct TI32 : Plain<i32, i32, true> {};
struct TI64 : Plain<i64, i64, true> {};
struct TU32 : Plain<u32, u32, true> {};
struct TU64 : Plain<u64, u64, true> {};
struct TF32 : Plain<float, float, false> {};
struct TF64 : Plain<double, double, false> {};
struct TF16 {
    typedef u16 S;
    typedef float A;
    static const bool Int = false;
    __device__ static __forceinline__ A ld(S x) { return f16_to_f32(x); }
    __device__ static __forceinline__ S st(A x) { return f32_to_f16(x); }
};
struct TBF16 {
    typedef u16 S;
    typedef float A;
    static const bool Int = false;
    __device__ static __forceinline__ A ld(S x) { return bf16_to_f32(x); }
    __device__ static __forceinline__ S st(A x) { return f32_to_bf16(x); }
};

#ifdef FLEXLINK_FP8
struct TF8E4M3 {
    typedef u8 S;
    typedef float A;
    static const bool Int = false;
    __device__ static __forceinline__ A ld(S x) { return e4m3_to_f32(x); }
    __device__ static __forceinline__ S st(A x) { return f32_to_e4m3(x); }
};
struct TF8E5M2 {
    typedef u8 S;
    typedef float A;
    static const bool Int = false;
    __device__ static __forceinline__ A ld(S x) { return e5m2_to_f32(x); }
    __device__ static __forceinline__ S st(A x) { return f32_to_e5m2(x); }
};
#endif

// Wide: the loops keep four 16-byte vectors per thread in flight (the
// elementwise kernels and the flag kernels' folds), or one. The float8
// types take one: sixteen conversions each way per vector made their
// four-wide kernels 2-3 times the size of the others', and each PTX file
// must stay under 15 MB (README.md).
template <class T>
struct Wide {
    static const bool value = true;
};
#ifdef FLEXLINK_FP8
template <>
struct Wide<TF8E4M3> {
    static const bool value = false;
};
template <>
struct Wide<TF8E5M2> {
    static const bool value = false;
};
#endif

// ---- operators on the arithmetic type. Integer sum and prod go through
// unsigned 64-bit arithmetic, whose low bits are the wrapped result (signed
// overflow is undefined in C++).

template <class T>
struct Sum {
    __device__ __forceinline__ typename T::A operator()(typename T::A a, typename T::A b) const {
        if constexpr (T::Int) return (typename T::A)((u64)a + (u64)b);
        else return a + b;
    }
};
template <class T>
struct Prod {
    __device__ __forceinline__ typename T::A operator()(typename T::A a, typename T::A b) const {
        if constexpr (T::Int) return (typename T::A)((u64)a * (u64)b);
        else return a * b;
    }
};
template <class T>
struct Min {
    __device__ __forceinline__ typename T::A operator()(typename T::A a, typename T::A b) const {
        if constexpr (T::Int) {
            return b < a ? b : a;
        } else {
            if (a != a || b != b) return a + b;  // NaN in, NaN out
            if (a < b) return a;
            if (b < a) return b;
            return negative(a) ? a : b;  // equal: -0 below +0
        }
    }
    // negative is the sign bit of a float: true for -0 too.
    __device__ static __forceinline__ bool negative(typename T::A x) { return x < 0 || 1 / x < 0; }
};
template <class T>
struct Max {
    __device__ __forceinline__ typename T::A operator()(typename T::A a, typename T::A b) const {
        if constexpr (T::Int) {
            return b > a ? b : a;
        } else {
            if (a != a || b != b) return a + b;
            if (a > b) return a;
            if (b > a) return b;
            return Min<T>::negative(a) ? b : a;  // equal: +0 above -0
        }
    }
};
// Scale divides by d; b is ignored.
template <class T>
struct Scale {
    u64 d;
    __device__ __forceinline__ typename T::A operator()(typename T::A a, typename T::A) const {
        typedef typename T::A A;
        if constexpr (T::Int && (A)-1 > (A)0) return (A)((u64)a / d);  // unsigned
        else if constexpr (T::Int) return (A)((i64)a / (i64)d);
        else return a / (A)d;
    }
};
// PreMul multiplies by the scalar s (already widened); b is ignored.
template <class T>
struct PreMul {
    typename T::A s;
    __device__ __forceinline__ typename T::A operator()(typename T::A a, typename T::A) const {
        return Prod<T>()(a, s);
    }
};

// ---- the loop

template <class T, class F>
__device__ __forceinline__ vec16 apply16(vec16 x, vec16 y, const F& f) {
    typedef typename T::S S;
    const int V = 16 / sizeof(S);
    union U {
        vec16 v;
        S s[V];
    } ux, uy;
    ux.v = x;
    uy.v = y;
#pragma unroll
    for (int k = 0; k < V; k++) ux.s[k] = T::st(f(T::ld(ux.s[k]), T::ld(uy.s[k])));
    return ux.v;
}

template <class T, class F>
__device__ __forceinline__ void elementwise(typename T::S* dst, const typename T::S* a,
                                            const typename T::S* b, u64 n, const F& f) {
    typedef typename T::S S;
    const u64 V = 16 / sizeof(S);
    const int U = 4;  // vectors in flight per thread
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nt = (u64)gridDim.x * blockDim.x;
    u64 done = 0;
    if ((((u64)dst | (u64)a | (u64)b) & 15) == 0) {
        const u64 nv = n / V;
        const vec16* av = (const vec16*)a;
        const vec16* bv = (const vec16*)b;
        vec16* dv = (vec16*)dst;
        u64 i = tid;
        if constexpr (Wide<T>::value)
        for (; i + (U - 1) * nt < nv; i += U * nt) {
            vec16 x[U], y[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                x[u] = av[i + u * nt];
                y[u] = bv[i + u * nt];
            }
#pragma unroll
            for (int u = 0; u < U; u++) dv[i + u * nt] = apply16<T>(x[u], y[u], f);
        }
        for (; i < nv; i += nt) dv[i] = apply16<T>(av[i], bv[i], f);
        done = nv * V;
    }
    for (u64 i = done + tid; i < n; i += nt) dst[i] = T::st(f(T::ld(a[i]), T::ld(b[i])));
}

#define REDUCE(OP, OPT, NAME, T)                                                             \
    extern "C" __global__ void __launch_bounds__(512)                                        \
        flexlink_reduce_##OP##_##NAME(T::S* dst, const T::S* a, const T::S* b, u64 n) {      \
        elementwise<T>(dst, a, b, n, OPT<T>());                                              \
    }

#define TYPE(NAME, T)                                                                        \
    REDUCE(sum, Sum, NAME, T)                                                                \
    REDUCE(prod, Prod, NAME, T)                                                              \
    REDUCE(min, Min, NAME, T)                                                                \
    REDUCE(max, Max, NAME, T)                                                                \
    extern "C" __global__ void __launch_bounds__(512)                                        \
        flexlink_scale_##NAME(T::S* dst, const T::S* src, u64 n, u64 d) {                    \
        Scale<T> f;                                                                          \
        f.d = d;                                                                             \
        elementwise<T>(dst, src, src, n, f);                                                 \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(512)                                        \
        flexlink_premul_##NAME(T::S* dst, const T::S* src, u64 n, const T::S* scalar) {      \
        PreMul<T> f;                                                                         \
        f.s = T::ld(*scalar);                                                                \
        elementwise<T>(dst, src, src, n, f);                                                 \
    }


#if FLEXLINK_WANT(common)
// flexlink_copy(u8* dst, const u8* src, u64 n): dst[i] = src[i] for n
// bytes. Either side may be a peer's memory (IPC mapping, peer access on):
// a remote dst makes the SMs push with stores over NVLink, a remote src
// makes them pull with loads. 16-byte vectors, eight in flight per thread,
// when both are 16-byte aligned; bytes otherwise.
extern "C" __global__ void __launch_bounds__(512) flexlink_copy(u8* dst, const u8* src, u64 n) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nt = (u64)gridDim.x * blockDim.x;
    u64 done = 0;
    if ((((u64)dst | (u64)src) & 15) == 0) {
        const int U = 8;
        const u64 nv = n / 16;
        const vec16* s = (const vec16*)src;
        vec16* d = (vec16*)dst;
        u64 i = tid;
        for (; i + (U - 1) * nt < nv; i += U * nt) {
            vec16 x[U];
#pragma unroll
            for (int u = 0; u < U; u++) x[u] = s[i + u * nt];
#pragma unroll
            for (int u = 0; u < U; u++) d[i + u * nt] = x[u];
        }
        for (; i < nv; i += nt) d[i] = s[i];
        done = nv * 16;
    }
    for (u64 i = done + tid; i < n; i += nt) dst[i] = src[i];
}

// flexlink_copy2(u8* d1, u8* d2, const u8* src, u64 n): d1[i] = d2[i] =
// src[i]: one read, two writes (an allgather's push to a peer and its own
// block), so no second pass over src and no copy engine beside the kernel.
extern "C" __global__ void __launch_bounds__(512) flexlink_copy2(u8* d1, u8* d2, const u8* src, u64 n) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nt = (u64)gridDim.x * blockDim.x;
    u64 done = 0;
    if ((((u64)d1 | (u64)d2 | (u64)src) & 15) == 0) {
        const int U = 8;
        const u64 nv = n / 16;
        const vec16* s = (const vec16*)src;
        vec16* a = (vec16*)d1;
        vec16* b = (vec16*)d2;
        u64 i = tid;
        for (; i + (U - 1) * nt < nv; i += U * nt) {
            vec16 x[U];
#pragma unroll
            for (int u = 0; u < U; u++) x[u] = s[i + u * nt];
#pragma unroll
            for (int u = 0; u < U; u++) a[i + u * nt] = x[u];
#pragma unroll
            for (int u = 0; u < U; u++) b[i + u * nt] = x[u];
        }
        for (; i < nv; i += nt) a[i] = b[i] = s[i];
        done = nv * 16;
    }
    for (u64 i = done + tid; i < n; i += nt) d1[i] = d2[i] = src[i];
}
#endif // common

#include "flag.cu"

// One dtype's kernels per family (see FLEXLINK_FAMILY above).
#if FLEXLINK_WANT(i8)
TYPE(i8, TI8)
FLAG_TYPE(i8, TI8)
#endif
#if FLEXLINK_WANT(u8)
TYPE(u8, TU8)
FLAG_TYPE(u8, TU8)
#endif
#if FLEXLINK_WANT(i32)
TYPE(i32, TI32)
FLAG_TYPE(i32, TI32)
#endif
#if FLEXLINK_WANT(u32)
TYPE(u32, TU32)
FLAG_TYPE(u32, TU32)
#endif
#if FLEXLINK_WANT(i64)
TYPE(i64, TI64)
FLAG_TYPE(i64, TI64)
#endif
#if FLEXLINK_WANT(u64)
TYPE(u64, TU64)
FLAG_TYPE(u64, TU64)
#endif
#if FLEXLINK_WANT(f16)
TYPE(f16, TF16)
FLAG_TYPE(f16, TF16)
#endif
#if FLEXLINK_WANT(bf16)
TYPE(bf16, TBF16)
FLAG_TYPE(bf16, TBF16)
#endif
#if FLEXLINK_WANT(f32)
TYPE(f32, TF32)
FLAG_TYPE(f32, TF32)
#endif
#if FLEXLINK_WANT(f64)
TYPE(f64, TF64)
FLAG_TYPE(f64, TF64)
#endif
#if defined(FLEXLINK_FP8) && FLEXLINK_WANT(f8e4m3)
TYPE(f8e4m3, TF8E4M3)
FLAG_TYPE(f8e4m3, TF8E4M3)
#endif
#if defined(FLEXLINK_FP8) && FLEXLINK_WANT(f8e5m2)
TYPE(f8e5m2, TF8E5M2)
FLAG_TYPE(f8e5m2, TF8E5M2)
#endif
