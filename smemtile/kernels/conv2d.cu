// smemtile kernel family: conv2d (forward 2-D convolution as an implicit GEMM on fp16 / bf16 tensor cores,
// mma.sync.m16n8k16, fp32 accumulation; sm_80+).
//
//     y[n, p, q, k] = act(bias[k] + sum_{r, s, c} x[n, p*stride - pad + r, q*stride - pad + s, c] * f[k, r, s, c])
//
//     x: activations N x H x W x C (NHWC): pixel (n, h, w) starts at x[((n*H + h)*W + w) * ldx], ldx >= C
//     f: filters K x R x S x C (KRSC): filter k starts at f[k * ldf], element (r, s, c) at (r*S + s)*C + c,
//        ldf >= R*S*C
//     y: output N x P x Q x K (NPQK), P = (H + 2*pad - R) / stride + 1, Q likewise: pixel m = (n*P + p)*Q + q
//        starts at y[m * ldy], ldy >= K; TC = float, f16 or bf16
//     zero padding, dilation 1, any stride >= 1; bias (fp32, BIAS) and ReLU (RELU) in the epilogue
//
// ---- The GEMM view ------------------------------------------------------------------------------------------------
//   M = N*P*Q (output pixels), Ngemm = K (output channels), Kgemm = R*S*C, kg = (r*S + s)*C + c
//   A[m][kg] = x[n, p*stride - pad + r, q*stride - pad + s, c]  (0 outside the image: the halo, the padding)
//   B[kg][k] = f[k * ldf + kg]                                 (column-major B: the filter rows are B's columns)
// so the block tile, the shared-memory tiles, the fragment loads and the mma.sync are those of the hgemm family's
// column-major-B kernel (kernels/hgemm.cu, B_COL): As[BM][BK] and Bs[BN][BK], swizzled alike, read with
// ldmatrix.x4 (not transposed). Only the A copy differs: a gather instead of a strided row.
//
// Template parameters (each checked by a static_assert that states its rule):
//   T            smemtile::f16 or smemtile::bf16: x and f
//   TC           float, smemtile::f16 or smemtile::bf16: y (accumulation is fp32)
//   BM, BN, BK   block tile of the GEMM view; BK a power of two >= 32 (two k16 steps per double buffer)
//   WM, WN       warp tile, multiples of 16; THREADS = (BM/WM) * (BN/WN) * 32 (1 to 32 warps)
//   STAGES       cp.async ring depth, 2 to 5
//   GROUP_M      block rows per L2 group (block order, as hgemm)
//   MIN_BLOCKS   __launch_bounds__ minimum blocks per SM
//   VEC          8: 16-byte cp.async chunks of 8 channels (needs C, ldx, ldf multiples of 8 and 16-byte aligned
//                x, f; else the kernel writes NaN to its y tile instead of faulting); 1: any C, ldx, ldf and
//                alignment: each element of a chunk gathered on its own (2-byte loads through registers,
//                st.shared.v4), since a chunk of 8 kg may cross a filter tap (r, s) when C % 8 != 0
//   BIAS, RELU   epilogue: + bias[k] (fp32), then max(0, .)
//   PAD_A, SWZ_A_B/M/S, PAD_B, SWZ_B_B/M/S: the SmemTile layouts of As and Bs (defaults: the conflict-free
//                swizzle of 2-byte rows of BK elements, the same as hgemm's; PAD % 8 == 0, swizzle M >= 3)
//
// ---- Data flow ----------------------------------------------------------------------------------------------------
//   x --gather, cp.async.cg 16 B (zero-fill: halo, padding, rows past M, the Kgemm tail)--> As[BM][BK]  } STAGES-deep
//   f --cp.async.cg 16 B (zero-fill past K and the Kgemm tail)------------------------------> Bs[BN][BK]  } ring
//   shared --ldmatrix.x4--> fragments (double-buffered over the k16 steps) --mma.sync--> fp32 accumulators
//   accumulators --+ bias, ReLU, convert--> 2-element stores to y (one where ldy or y is not 2-element aligned)
//
// The gather: thread tid copies the chunks (row a_row + i * A_ROWS, column a_col) of every K tile, a_col the
// same for all its passes i. Each pass keeps its output pixel's image origin (p*stride - pad, q*stride - pad) and
// image n; the thread keeps one filter position (c, s, r) of kg = kt*BK + a_col, advanced by BK per tile
// (c += BK, carrying into s and r): no division in the main loop. With VEC 8 a chunk of 8 channels never crosses
// a tap (C % 8 == 0), so one bounds test per chunk; it is copied whole or zero-filled (cp.async src-size 0).
//
// ---- Shared-memory accesses: lane -> (row, col), elements of 2 bytes (smemtile spec expressions) -------------------
// Notation: tid = threadIdx.x, lane = tid % 32, warp = tid / 32, THREADS, WARPS_N = BN/WN.
//   A gather (cp.async 16 B; VEC 1: st.shared.v4), i in [0, BM*BK/8/THREADS):
//                                                            As  row = (tid + i*THREADS) // (BK/8)
//                                                                col = ((tid + i*THREADS) % (BK/8)) * 8
//   B copy (cp.async 16 B; VEC 1: st.shared.v4), j in [0, BN*BK/8/THREADS):
//                                                            Bs  row = (tid + j*THREADS) // (BK/8)    (k of y)
//                                                                col = ((tid + j*THREADS) % (BK/8)) * 8 (kg)
//   A fragments (ldmatrix.x4), mi in [0, WM/16), kk in [0, BK/16):
//                                                            As  row = (warp // WARPS_N)*WM + mi*16 + lane % 16
//                                                                col = kk*16 + (lane // 16) * 8
//   B fragments (ldmatrix.x4), nj in [0, WN/16), kk:           Bs  row = (warp % WARPS_N)*WN + nj*16 + lane % 8
//                                                                      + (lane // 16) * 8
//                                                                col = kk*16 + ((lane // 8) % 2) * 8
// smemtile/families/conv2d/__init__.py (Conv2d.accesses) holds these as spec expressions, the family's one copy.
// The gather writes the same shared addresses as a dense row copy would: which global pixel a row holds does not
// change its bank, so with the swizzle every access is conflict-free (`smemtile analyze` of a conv2d spec).
//
// ---- Pipeline -----------------------------------------------------------------------------------------------------
//   prologue: tiles 0 .. STAGES-2 issued, one commit_group each (empty groups past the last tile keep the count)
//   tile kt: wait_group(STAGES-2) -> this thread's copies of tile kt landed; __syncthreads() -> everyone's, and
//            every read of tile kt-1 is done; the fragments of step 0; issue tile kt+STAGES-1 into slot
//            (kt-1) % STAGES, commit_group; then the k16 steps of tile kt: fragments of step kk+1 loaded before the
//            mma.sync of step kk
// One barrier per K tile. The steady-state loop (a tile STAGES-1 ahead exists) issues unconditionally and the
// 16-byte gather's tap walk is selects (at most BK/8 wraps for C >= 8), so its body is one basic block; a second
// loop takes the last STAGES-1 tiles.
//
// ---- Resources and launch -----------------------------------------------------------------------------------------
// Shared memory (bytes, always dynamic) = STAGES * (BM*(BK+PAD_A) + BN*(BK+PAD_B)) * 2
// Launch: grid = (ceil(N*P*Q / BM) * ceil(K / BN), 1, 1), block = (THREADS, 1, 1), dynamic smem as above (the
//   host raises cudaFuncAttributeMaxDynamicSharedMemorySize above 48 KiB).
//
// The device helpers below are the same instructions as hgemm.cu's (cp.async with zero-fill, ldmatrix, mma.sync,
// output conversions), in their own namespace: a translation unit may hold both families' generated files.
#include "smem_layout.cuh"

namespace smemtile {
namespace conv {

template <typename X, typename Y>
struct same_type {
    static constexpr bool value = false;
};
template <typename X>
struct same_type<X, X> {
    static constexpr bool value = true;
};

__host__ __device__ constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }
__host__ __device__ constexpr bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }
// The conflict-free swizzle of a tile whose rows hold `cols` 2-byte elements (a power of two >= 8), as hgemm's:
// 16-byte granules (M = 3) permuted within 128-byte groups by the row bits just above one 128-byte line.
__host__ __device__ constexpr int swizzle_b(int cols) { return cols >= 64 ? 3 : ilog2(cols / 8); }
__host__ __device__ constexpr int swizzle_s(int cols) { return cols >= 64 ? ilog2(cols) - 3 : 3; }

// offset(row + 16y, col + 16x) == (offset(row, col) ^ 16x) + 16y * stride for every lane and step of the fragment
// loads (kind 1: A, kind 3: B rows n): checked at compile time; where it fails the kernel uses SmemTile::offset.
template <class L, bool XOR>
__host__ __device__ constexpr int step_offset(int base, int x16, int y_rows) {
    return (XOR ? (base ^ x16) : base + x16) + y_rows * L::kStride;
}
template <class L, bool XOR>
__host__ __device__ constexpr bool fragment_steps_exact(int kind, int origins, int origin_step, int nx, int ny) {
    for (int o = 0; o < origins; ++o)
        for (int lane = 0; lane < 32; ++lane) {
            int r = 0, c = 0;
            if (kind == 1) r = o * origin_step + lane % 16, c = (lane / 16) * 8;
            if (kind == 3) r = o * origin_step + lane % 8 + (lane / 16) * 8, c = ((lane / 8) % 2) * 8;
            const int base = L::offset(r, c);
            for (int x = 0; x < nx; ++x)
                for (int y = 0; y < ny; ++y)
                    if (L::offset(r + 16 * y, c + 16 * x) != step_offset<L, XOR>(base, 16 * x, 16 * y)) return false;
        }
    return true;
}

__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void st_shared_v4(unsigned dst, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
#endif
}
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    if constexpr (same_type<T, bf16>::value) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
#endif
}
// Output conversions (pairs: the first, lower-address element in the low half).
template <typename TC>
__device__ __forceinline__ void store_y(TC* p, float v) {
    if constexpr (same_type<TC, float>::value) {
        *p = v;
    } else {
        unsigned short h;
        if constexpr (same_type<TC, bf16>::value) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
            asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
#endif
        } else {
            asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
        }
        reinterpret_cast<unsigned short*>(p)[0] = h;
    }
}
template <typename TC>
__device__ __forceinline__ void store_y2(TC* p, float v0, float v1) {
    if constexpr (same_type<TC, float>::value) {
        *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
        unsigned w;
        if constexpr (same_type<TC, bf16>::value) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(v1), "f"(v0));
#endif
        } else {
            asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(v1), "f"(v0));
        }
        *reinterpret_cast<unsigned*>(p) = w;
    }
}

// One filter tap (r, s) and channel c of a Kgemm index, advanced without division: kg += step.
struct Tap {
    int c, s, r;
    __device__ __forceinline__ void start(int kg, int C, int S) {
        const int rs = kg / C;
        c = kg - rs * C;
        r = rs / S;
        s = rs - r * S;
    }
    __device__ __forceinline__ void advance(int step, int C, int S) {
        c += step;
        while (c >= C) {
            c -= C;
            if (++s == S) s = 0, ++r;
        }
    }
    // The same walk when it wraps at most WRAPS times (VEC 8: C >= 8, so a step of BK wraps at most BK/8 times):
    // selects instead of a loop, so the main loop's body stays one basic block.
    template <int WRAPS>
    __device__ __forceinline__ void advance_bounded(int step, int C, int S) {
        c += step;
#pragma unroll
        for (int u = 0; u < WRAPS; ++u) {
            const bool wrap = c >= C;
            c = wrap ? c - C : c;
            const int s1 = wrap ? s + 1 : s;
            const bool row = s1 == S;  // only after a wrap (s < S before it)
            s = row ? 0 : s1;
            r = row ? r + 1 : r;
        }
    }
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int PAD_A, int PAD_B>
struct Conv2dShape {
    static constexpr int kWarpsN = BN / WN;
    static constexpr int kThreads = (BM / WM) * kWarpsN * 32;
    static constexpr int kAElems = BM * (BK + PAD_A);
    static constexpr int kBElems = BN * (BK + PAD_B);
    static constexpr int kStageBytes = (kAElems + kBElems) * 2;
    static constexpr int kSmemBytes = STAGES * kStageBytes;
};

}  // namespace conv
}  // namespace smemtile

// Defaults: a 128 x 128 x 32 block tile of 8 warps of 64 x 32, 4 stages, 16-byte gathers, no bias or ReLU.
template <typename T = smemtile::bf16, typename TC = smemtile::bf16, int BM = 128, int BN = 128, int BK = 32,
          int WM = 64, int WN = 32, int STAGES = 4, int GROUP_M = 8, int MIN_BLOCKS = 1, int VEC = 8,
          bool BIAS = false, bool RELU = false, int PAD_A = 0, int SWZ_A_B = smemtile::conv::swizzle_b(BK),
          int SWZ_A_M = 3, int SWZ_A_S = smemtile::conv::swizzle_s(BK), int PAD_B = 0,
          int SWZ_B_B = smemtile::conv::swizzle_b(BK), int SWZ_B_M = 3, int SWZ_B_S = smemtile::conv::swizzle_s(BK)>
__global__ void __launch_bounds__(smemtile::conv::Conv2dShape<BM, BN, BK, WM, WN, STAGES, PAD_A, PAD_B>::kThreads,
                                  MIN_BLOCKS)
conv2d(int Nb, int H, int W, int C, int K, int R, int S, int stride, int pad, int P, int Q,
       const T* __restrict__ x, int ldx, const T* __restrict__ f, int ldf, const float* __restrict__ bias,
       TC* __restrict__ y, int ldy) {
    namespace cv = smemtile::conv;
    using Shape = cv::Conv2dShape<BM, BN, BK, WM, WN, STAGES, PAD_A, PAD_B>;
    using LA = smemtile::SmemTile<BM, BK, PAD_A, SWZ_A_B, SWZ_A_M, SWZ_A_S>;  // As[m][kg]
    using LB = smemtile::SmemTile<BN, BK, PAD_B, SWZ_B_B, SWZ_B_M, SWZ_B_S>;  // Bs[k][kg]
    constexpr int THREADS = Shape::kThreads;
    constexpr int WARPS_N = Shape::kWarpsN;
    constexpr int MI = WM / 16, NI = WN / 8, KSTEPS = BK / 16;

    static_assert(cv::same_type<T, smemtile::f16>::value || cv::same_type<T, smemtile::bf16>::value,
                  "T (the x and f element type) must be smemtile::f16 or smemtile::bf16");
    static_assert(cv::same_type<TC, float>::value || cv::same_type<TC, smemtile::f16>::value ||
                      cv::same_type<TC, smemtile::bf16>::value,
                  "TC (the y element type) must be float, smemtile::f16 or smemtile::bf16");
    static_assert(WM % 16 == 0, "WM must be a multiple of 16: a warp's rows are m16 mma tiles");
    static_assert(WN % 16 == 0, "WN must be a multiple of 16: one ldmatrix.x4 loads B for two n8 mma tiles");
    static_assert(BM % WM == 0 && BN % WN == 0, "the warp tiles WM x WN must tile the block tile BM x BN");
    static_assert(THREADS >= 32 && THREADS <= 1024, "a block needs 1 to 32 warps: (BM/WM) * (BN/WN) <= 32");
    static_assert(BK % 32 == 0 && cv::is_pow2(BK),
                  "BK must be a power of two >= 32: two k16 mma steps per 32, whole 16-byte chunks per row");
    static_assert(THREADS % (BK / 8) == 0 && (BM * BK / 8) % THREADS == 0,
                  "every thread gathers the same number of A chunks: BM*BK/8 % THREADS == 0 (whole rows per pass)");
    static_assert((BN * BK / 8) % THREADS == 0,
                  "every thread copies the same number of filter chunks: BN*BK/8 % THREADS == 0");
    static_assert(STAGES >= 2 && STAGES <= 5, "STAGES (cp.async ring depth) must be 2 to 5");
    static_assert(PAD_A % 8 == 0 && PAD_B % 8 == 0,
                  "padding must be a multiple of 8 elements: cp.async and ldmatrix rows are 16-byte aligned");
    static_assert((SWZ_A_B == 0 || SWZ_A_M >= 3) && (SWZ_B_B == 0 || SWZ_B_M >= 3),
                  "a swizzle must move whole 16-byte granules (M >= 3): cp.async writes and ldmatrix reads 16 bytes");
    static_assert(GROUP_M >= 1, "GROUP_M (block rows per L2 group) must be at least 1");
    static_assert(MIN_BLOCKS >= 1, "MIN_BLOCKS (blocks per SM for __launch_bounds__) must be at least 1");
    static_assert(VEC == 8 || VEC == 1,
                  "VEC must be 8 (16-byte gathers: C, ldx, ldf % 8 == 0, x and f 16-byte aligned) or 1 (any layout)");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    static_assert(__CUDA_ARCH__ >= 800, "conv2d needs sm_80 or newer (cp.async, bf16 mma.sync)");
#endif

    extern __shared__ __align__(128) unsigned char conv2d_smem[];
    const unsigned smem0 = smemtile::smem_u32(conv2d_smem);
    constexpr int A_BYTES = Shape::kAElems * 2;  // stage s: As at smem0 + s * kStageBytes, Bs right after it

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int M = Nb * P * Q, KG = R * S * C;

    // Grouped block order: GROUP_M block rows share each filter panel in L2.
    const int grid_m = (M + BM - 1) / BM, grid_n = (K + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(grid_m - first_m, GROUP_M);
    const int block_m = first_m + (pid % per_group) % group_rows;
    const int block_n = (pid % per_group) / group_rows;
    const int m0 = block_m * BM, n0 = block_n * BN;
    const int warp_m = (warp / WARPS_N) * WM, warp_n = (warp % WARPS_N) * WN;

    if constexpr (VEC == 8) {  // the host picks VEC 1 otherwise; a misuse is made visible: this tile becomes NaN
        const bool vec = ((C | ldx | ldf) & 7) == 0 &&
                         ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(f)) & 15) == 0;
        if (!vec) {
            for (int e = tid; e < BM * BN; e += THREADS) {
                const int m = m0 + e / BN, n = n0 + e % BN;
                if (m < M && n < K) cv::store_y(y + (long long)m * ldy + n, __int_as_float(0x7fc00000));
            }
            return;
        }
    }

    // ---- copy coordinates (fixed per thread): chunk c = tid + i * THREADS of 8 elements ----------------------
    constexpr int CPR = BK / 8;                     // chunks per row (As and Bs rows both hold BK elements)
    constexpr int A_ITERS = BM * BK / 8 / THREADS;  // A chunks per thread per stage
    constexpr int B_ITERS = BN * BK / 8 / THREADS;
    constexpr int ROWS = THREADS / CPR;             // rows one pass covers
    const int c_row = tid / CPR, c_col = (tid % CPR) * 8;

    // Each A pass: its output pixel's image origin and image start (rows past M: an origin that never tests inside)
    int a_h0[A_ITERS], a_w0[A_ITERS];
    long long a_img[A_ITERS];  // n * H
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
        const int m = m0 + c_row + i * ROWS;
        if (m < M) {
            const int nimg = m / (P * Q), rem = m - nimg * (P * Q);
            const int p = rem / Q, q = rem - p * Q;
            a_h0[i] = p * stride - pad, a_w0[i] = q * stride - pad, a_img[i] = (long long)nimg * H;
        } else {
            a_h0[i] = -(1 << 30), a_w0[i] = 0, a_img[i] = 0;
        }
    }
    cv::Tap tap;  // the filter position of kg = (next tile) * BK + c_col
    tap.start(c_col, C, S);
    int b_kg = c_col;  // the filter column of this thread's B chunks in the next tile
    const unsigned short* xs = reinterpret_cast<const unsigned short*>(x);
    const unsigned short* fs = reinterpret_cast<const unsigned short*>(f);

    // issue(sa): the A gather and the B chunks of the next K tile into the stage at sa (As; Bs follows)
    auto issue = [&](unsigned sa) {
#pragma unroll
        for (int i = 0; i < A_ITERS; ++i) {
            const unsigned dst = sa + 2 * LA::offset(c_row + i * ROWS, c_col);
            if constexpr (VEC == 8) {  // 8 channels of one tap: whole or zero
                const int ih = a_h0[i] + tap.r, iw = a_w0[i] + tap.s;
                const bool ok = tap.r < R && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                const unsigned short* src = ok ? xs + ((a_img[i] + ih) * W + iw) * ldx + tap.c : xs;
                cv::cp_async_16(dst, src, ok ? 16 : 0);
            } else {  // each element its own tap
                unsigned wd[4];
                cv::Tap t = tap;
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int ih = a_h0[i] + t.r, iw = a_w0[i] + t.s;
                    const bool ok = t.r < R && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                    const unsigned v = ok ? xs[((a_img[i] + ih) * W + iw) * ldx + t.c] : 0u;
                    if (e & 1) {
                        wd[e >> 1] |= v << 16;
                    } else {
                        wd[e >> 1] = v;
                    }
                    t.advance(1, C, S);
                }
                cv::st_shared_v4(dst, wd[0], wd[1], wd[2], wd[3]);
            }
        }
#pragma unroll
        for (int j = 0; j < B_ITERS; ++j) {
            const int n = n0 + c_row + j * ROWS;
            const unsigned dst = sa + A_BYTES + 2 * LB::offset(c_row + j * ROWS, c_col);
            const int valid = n < K ? max(0, min(8, KG - b_kg)) : 0;  // VEC 8: 0 or 8 (KG % 8 == 0)
            const unsigned short* src = valid ? fs + (long long)n * ldf + b_kg : fs;
            if constexpr (VEC == 8) {
                cv::cp_async_16(dst, src, 2 * valid);
            } else {
                unsigned wd[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const unsigned lo = 2 * e < valid ? src[2 * e] : 0u;
                    const unsigned hi = 2 * e + 1 < valid ? src[2 * e + 1] : 0u;
                    wd[e] = lo | (hi << 16);
                }
                cv::st_shared_v4(dst, wd[0], wd[1], wd[2], wd[3]);
            }
        }
        if constexpr (VEC == 8) {
            tap.advance_bounded<BK / 8>(BK, C, S);
        } else {
            tap.advance(BK, C, S);
        }
        b_kg += BK;
    };

    // ---- fragments and accumulators -------------------------------------------------------------------------
    unsigned fa[2][MI][4];
    unsigned fb[2][NI][2];
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    constexpr bool A_XOR = SWZ_A_B != 0, B_XOR = SWZ_B_B != 0;
    constexpr bool A_STEP = cv::fragment_steps_exact<LA, A_XOR>(1, BM / WM, WM, KSTEPS, MI);
    constexpr bool B_STEP = cv::fragment_steps_exact<LB, B_XOR>(3, WARPS_N, WN, KSTEPS, NI / 2);
    const int fa_row = warp_m + (lane & 15), fa_col = (lane >> 4) * 8;
    const int fb_row = warp_n + (lane & 7) + ((lane >> 4) << 3), fb_col = ((lane >> 3) & 1) * 8;
    const int fa_base = LA::offset(fa_row, fa_col), fb_base = LB::offset(fb_row, fb_col);
    auto fa_off = [&](int i, int kk) {
        return A_STEP ? cv::step_offset<LA, A_XOR>(fa_base, 16 * kk, 16 * i) : LA::offset(fa_row + 16 * i, fa_col + 16 * kk);
    };
    auto fb_off = [&](int j, int kk) {
        return B_STEP ? cv::step_offset<LB, B_XOR>(fb_base, 16 * kk, 16 * j) : LB::offset(fb_row + 16 * j, fb_col + 16 * kk);
    };
    auto load_frags = [&](int buf, unsigned sa, int kk) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
            cv::ldsm_x4(sa + 2 * fa_off(i, kk), fa[buf][i][0], fa[buf][i][1], fa[buf][i][2], fa[buf][i][3]);
#pragma unroll
        for (int j = 0; j < NI / 2; ++j)
            cv::ldsm_x4(sa + A_BYTES + 2 * fb_off(j, kk), fb[buf][2 * j][0], fb[buf][2 * j][1], fb[buf][2 * j + 1][0],
                        fb[buf][2 * j + 1][1]);
    };

    // ---- main loop ------------------------------------------------------------------------------------------------
    const int k_tiles = (KG + BK - 1) / BK;
    constexpr unsigned STAGE = Shape::kStageBytes, RING = STAGES * Shape::kStageBytes;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) issue(smem0 + s * STAGE);
        cv::cp_async_commit();
    }
    unsigned read_off = 0, write_off = (STAGES - 1) * STAGE;
    // One K tile. `steady`: a tile STAGES-1 ahead exists, so its copies are issued unconditionally and the body
    // is one basic block (ptxas interleaves the copies with the mma.sync, as in hgemm); the last STAGES-1 tiles
    // take the guarded body.
    auto tile = [&](const bool steady, int kt) {
        cv::cp_async_wait<STAGES - 2>();  // tile kt (this thread's copies) has landed
        __syncthreads();                  // everyone's; tile kt-1 is no longer read
        const unsigned sa = smem0 + read_off;
        load_frags(0, sa, 0);
        if (steady || kt + STAGES - 1 < k_tiles) issue(smem0 + write_off);
        cv::cp_async_commit();
        write_off = write_off + STAGE == RING ? 0 : write_off + STAGE;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            if (kk + 1 < KSTEPS) load_frags((kk + 1) & 1, sa, kk + 1);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int jj = (i & 1) ? NI - 1 - j : j;  // serpentine: reuse the last B fragment
                    cv::mma_16816<T>(acc[i][jj], fa[kk & 1][i], fb[kk & 1][jj]);
                }
        }
        read_off = read_off + STAGE == RING ? 0 : read_off + STAGE;
    };
    int kt = 0;
    for (; kt + STAGES - 1 < k_tiles; ++kt) tile(true, kt);
    for (; kt < k_tiles; ++kt) tile(false, kt);
    cv::cp_async_wait<0>();

    // ---- epilogue: lane owns rows r, r+8 of each m16 tile and columns c, c+1 of each n8 tile ---------------
    const int r0 = m0 + warp_m + (lane >> 2), c0 = n0 + warp_n + (lane & 3) * 2;
    const bool y_vec = (ldy % 2 == 0) && (reinterpret_cast<unsigned long long>(y) % (2 * sizeof(TC)) == 0);
    float bv[NI][2];
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int n = c0 + j * 8 + e;
            bv[j][e] = BIAS && n < K ? bias[n] : 0.f;
        }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = r0 + i * 16 + h * 8;
            if (m >= M) continue;
            TC* yrow = y + (long long)m * ldy;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int n = c0 + j * 8;
                float v0 = acc[i][j][2 * h] + bv[j][0], v1 = acc[i][j][2 * h + 1] + bv[j][1];
                if (RELU) v0 = fmaxf(v0, 0.f), v1 = fmaxf(v1, 0.f);
                if (y_vec && n + 1 < K) {
                    cv::store_y2(yrow + n, v0, v1);
                } else {
                    if (n < K) cv::store_y(yrow + n, v0);
                    if (n + 1 < K) cv::store_y(yrow + n + 1, v1);
                }
            }
        }
}

// =====================================================================================================================
// conv2d_wgmma (sm_90a only): the same convolution, GEMM view and arguments, on Hopper's wgmma.
//
//   x --gather, cp.async.cg 16 B, zero-fill (halo, padding, rows past M, Kgemm tail)--> As[BM][64]  } STAGES-deep
//   f --cp.async.cg 16 B, zero-fill (past K, Kgemm tail)------------------------------> Bs[BN][64]  } mbarrier ring
//   both written by the producer warpgroup in the 128-byte-swizzled layout TMA's SWIZZLE_128B writes for a [rows][64]
//   box of 16-bit elements: 16-byte chunk j of row r at r*128 + (j ^ r%8)*16 (every tile 1024-byte aligned)
//   consumers: wgmma.mma_async.m64nBNk16 from K-major 128B-swizzled shared-memory descriptors, fp32 accumulators
//   epilogue: + bias, ReLU, convert, 2-element stores from registers (one where y rows are not 2-element aligned)
//
// Template parameters (each checked by a static_assert):
//   T, TC        as conv2d's (x and f f16 / bf16; y float, f16 or bf16)
//   BM, BN       block tile of the GEMM view; BK is 64 (one 128-byte swizzle row). BM / CONSUMERS = WG_M (64 or 128)
//                rows per consumer warpgroup, MI = WG_M / 64 wgmma row blocks, all BN columns: MI * BN / 2 fp32
//                accumulators per thread (<= 128); BN 64, 128 or 256 (the wgmma n)
//   STAGES       ring depth, 2 to 6
//   CONSUMERS    consumer warpgroups, 1 or 2 (threads = (CONSUMERS + 1) * 128: warpgroup 0 is the producer)
//   GROUP_M      block rows per L2 group (the block order of conv2d)
//   BIAS, RELU   epilogue
//   MIN_BLOCKS   __launch_bounds__ minimum blocks per SM (1 to 3): two or three resident blocks overlap one block's
//                epilogue and prologue with another's main loop (registers capped at 64K / (MIN_BLOCKS * threads))
// Needs c, ldx, ldf multiples of 8 and x, f 16-byte aligned (16-byte gathers; else the kernel writes NaN to its y
// tile, as conv2d's VEC 8); the family refuses such problems for this path and builds conv2d (VEC 1) instead.
//
// ---- Synchronisation ----------------------------------------------------------------------------------------------
//   full[s]  initialised with 128 arrivals: every producer thread, after issuing its copies of a stage, executes
//            cp.async.mbarrier.arrive.noinc (the arrival happens when all of that thread's earlier cp.async have
//            completed; .noinc: the pending count is not raised first, so the 128 are the barrier's expected count)
//   empty[s] initialised with CONSUMERS arrivals: one thread of each consumer warpgroup after wgmma.wait_group shows
//            the warpgroup's MMAs on the stage are done
//   producer thread: wait empty[s] (parity) -> cp.async A chunks, B chunks -> arrive.noinc full[s]
//   consumer:        wait full[s] (parity) -> fence.proxy.async.shared::cta (the cp.async writes are generic-proxy
//                    writes; wgmma reads shared memory through the async proxy: the fence orders the writes this
//                    thread has observed through the barrier before its later async-proxy reads) -> wgmma.fence ->
//                    4 x MI wgmma -> commit -> wait_group 1 -> release the previous stage (one group in flight)
//
// ---- Shared-memory accesses (lane -> (row, col), 2-byte elements; smemtile/families/conv2d: the spec) ----------------
// Producer thread pt = tid (warpgroup 0), chunk column j = pt % 8, passes i (A) and jj (B) of 16 rows:
//   A gather (cp.async 16 B), i in [0, BM/16):   As row = pt // 8 + 16*i, col = (pt % 8) * 8   (swizzled: TMA 128B)
//   B copy (cp.async 16 B), jj in [0, BN/16):    Bs row = pt // 8 + 16*jj, col = (pt % 8) * 8
//   wgmma reads (8-row x 16-byte core matrices, described as ldmatrix.x4 phases as wgmma_gemm does):
//     A, warp w of consumer c, mi, kk:  As row = c*WG_M + mi*64 + (w%4)*16 + lane%16, col = kk*16 + (lane//16)*8
//     B, nj in [0, BN/64), kk:          Bs row = (w%4)*(BN/4) + nj*16 + lane%16,    col = kk*16 + (lane//16)*8
// A warp's 32 copies cover 4 rows x 8 chunks: under the 128B swizzle each row's 8 chunks are a permutation of its
// 128 bytes, so every copy phase (8 lanes, one row) and every core-matrix phase is conflict-free.
//
// Resources and launch: block (CONSUMERS + 1) * 128 threads, grid ceil(N*P*Q / BM) * ceil(K / BN) (conv2d's block
// order), dynamic shared memory 1024 (alignment slack) + STAGES * (BM + BN) * 128 + 16 * STAGES bytes.
//
// The device helpers below (mbarriers, wgmma and its descriptor) are the instructions kernels/wgmma_gemm.cu uses,
// written again in smemtile::conv: the generated file inlines only smem_layout.cuh, so one family's file cannot
// include another's (a translation unit may hold both families' generated files).

namespace smemtile {
namespace conv {

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SMEMTILE_CONV_SM90A 1  // the instructions below exist (host pass: parsed only)
#else
#define SMEMTILE_CONV_SM90A 0
#endif

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
#if SMEMTILE_CONV_SM90A
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
#if SMEMTILE_CONV_SM90A
    asm volatile(
        "{\n.reg .pred done;\nCONV_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra CONV_WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
#if SMEMTILE_CONV_SM90A
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// The barrier's arrival once every cp.async this thread issued before it has completed (not counted in advance).
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned bar) {
#if SMEMTILE_CONV_SM90A
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if SMEMTILE_CONV_SM90A
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async() {
#if SMEMTILE_CONV_SM90A
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_fence() {
#if SMEMTILE_CONV_SM90A
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if SMEMTILE_CONV_SM90A
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if SMEMTILE_CONV_SM90A
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// K-major operand, rows of 128 bytes, 128B swizzle: start address >> 4 (bits 0-13), LBO 1 (unused when swizzled
// K-major), SBO 1024 >> 4 (8-row atoms of 1024 bytes, bits 32-45), layout type 1 = 128B (bits 62-63).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// Keeps reads of the accumulators below the wgmma.wait_group that makes them valid.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma.mma_async.m64nNk16 (N = 64, 128, 256), f16 or bf16 inputs, fp32 accumulators d[0 .. N/2): operands
// %0 .. %(N/2 - 1) the accumulators, then the two descriptors and the scale-d flag.
#define SMEMTILE_CV_A8(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define SMEMTILE_CV_A32(i) SMEMTILE_CV_A8(i), SMEMTILE_CV_A8(i + 8), SMEMTILE_CV_A8(i + 16), SMEMTILE_CV_A8(i + 24)
template <int N, bool BF16>
struct Mma;
#define SMEMTILE_CV_MMA(N, BF16, TY, REGS, OPS, DA, DB, P)                                                     \
    template <>                                                                                                \
    struct Mma<N, BF16> {                                                                                      \
        __device__ __forceinline__ static void run(float (&d)[N / 2], unsigned long long da,                 \
                                                   unsigned long long db, int scale_d) {                     \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                     \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, %" #DA     \
                         ", %" #DB ", p, 1, 1, 0, 0;\n}\n"                                                    \
                         : OPS                                                                                 \
                         : "l"(da), "l"(db), "r"(scale_d));                                                    \
        }                                                                                                      \
    };
#define SMEMTILE_CV_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SMEMTILE_CV_R1 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SMEMTILE_CV_R2 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define SMEMTILE_CV_R3 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define SMEMTILE_CV_R64 SMEMTILE_CV_R0 ", " SMEMTILE_CV_R1
#define SMEMTILE_CV_R128 SMEMTILE_CV_R64 ", " SMEMTILE_CV_R2 ", " SMEMTILE_CV_R3
#define SMEMTILE_CV_A64 SMEMTILE_CV_A32(0), SMEMTILE_CV_A32(32)
#define SMEMTILE_CV_A128 SMEMTILE_CV_A64, SMEMTILE_CV_A32(64), SMEMTILE_CV_A32(96)
#if SMEMTILE_CONV_SM90A
SMEMTILE_CV_MMA(64, false, "f16", SMEMTILE_CV_R0, SMEMTILE_CV_A32(0), 32, 33, 34)
SMEMTILE_CV_MMA(128, false, "f16", SMEMTILE_CV_R64, SMEMTILE_CV_A64, 64, 65, 66)
SMEMTILE_CV_MMA(256, false, "f16", SMEMTILE_CV_R128, SMEMTILE_CV_A128, 128, 129, 130)
SMEMTILE_CV_MMA(64, true, "bf16", SMEMTILE_CV_R0, SMEMTILE_CV_A32(0), 32, 33, 34)
SMEMTILE_CV_MMA(128, true, "bf16", SMEMTILE_CV_R64, SMEMTILE_CV_A64, 64, 65, 66)
SMEMTILE_CV_MMA(256, true, "bf16", SMEMTILE_CV_R128, SMEMTILE_CV_A128, 128, 129, 130)
#endif
#undef SMEMTILE_CV_MMA
#undef SMEMTILE_CV_R0
#undef SMEMTILE_CV_R1
#undef SMEMTILE_CV_R2
#undef SMEMTILE_CV_R3
#undef SMEMTILE_CV_R64
#undef SMEMTILE_CV_R128
#undef SMEMTILE_CV_A8
#undef SMEMTILE_CV_A32
#undef SMEMTILE_CV_A64
#undef SMEMTILE_CV_A128

// 128B swizzle of a [rows][64] 16-bit tile (TMA SWIZZLE_128B's layout): byte offset of 16-byte chunk j of row r.
__host__ __device__ constexpr unsigned swz128(int r, int j) { return r * 128u + ((j ^ (r & 7)) * 16u); }

template <int BM, int BN, int STAGES>
struct WgmmaShape {
    static constexpr int kABytes = BM * 128;  // one stage of A: BM rows of 64 elements
    static constexpr int kBBytes = BN * 128;
    static constexpr int kSmemBytes = 1024 + STAGES * (kABytes + kBBytes) + 16 * STAGES;
};

}  // namespace conv
}  // namespace smemtile

// Defaults: a 128 x 256 block tile, two consumer warpgroups of 64 x 256, 4 stages.
template <typename T = smemtile::bf16, typename TC = smemtile::bf16, int BM = 128, int BN = 256, int STAGES = 4,
          int CONSUMERS = 2, int GROUP_M = 8, bool BIAS = false, bool RELU = false, int MIN_BLOCKS = 1>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128, MIN_BLOCKS)
conv2d_wgmma(int Nb, int H, int W, int C, int K, int R, int S, int stride, int pad, int P, int Q,
             const T* __restrict__ x, int ldx, const T* __restrict__ f, int ldf, const float* __restrict__ bias,
             TC* __restrict__ y, int ldy) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // A pass for a target without the sm_90a features (nvcc -arch=sm_90a also embeds compute_90 PTX; an sm_80
    // build of the file): wgmma does not exist there. The family builds this kernel for sm_90a only.
    __trap();
#else
    namespace cv = smemtile::conv;
    using Shape = cv::WgmmaShape<BM, BN, STAGES>;
    constexpr bool BF16 = cv::same_type<T, smemtile::bf16>::value;
    constexpr int BK = 64;
    constexpr int WG_M = BM / CONSUMERS;  // rows per consumer warpgroup
    constexpr int MI = WG_M / 64;         // m64 wgmma blocks per consumer
    constexpr int ACC = BN / 2;           // fp32 accumulators per thread per m64 block
    constexpr int A_BYTES = Shape::kABytes, B_BYTES = Shape::kBBytes;
    constexpr int A_PASSES = BM / 16, B_PASSES = BN / 16;  // 16 rows of 8 chunks per producer pass
    static_assert(cv::same_type<T, smemtile::f16>::value || cv::same_type<T, smemtile::bf16>::value,
                  "T (the x and f element type) must be smemtile::f16 or smemtile::bf16");
    static_assert(cv::same_type<TC, float>::value || cv::same_type<TC, smemtile::f16>::value ||
                      cv::same_type<TC, smemtile::bf16>::value,
                  "TC (the y element type) must be float, smemtile::f16 or smemtile::bf16");
    static_assert(CONSUMERS == 1 || CONSUMERS == 2, "CONSUMERS: 1 or 2 consumer warpgroups");
    static_assert(BM % (64 * CONSUMERS) == 0 && (MI == 1 || MI == 2), "BM / CONSUMERS must be 64 or 128 rows");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN: 64, 128 or 256 (the wgmma n)");
    static_assert(MI * ACC <= 128, "at most 128 fp32 accumulators per thread (BM / CONSUMERS / 64 * BN / 2)");
    static_assert(STAGES >= 2 && STAGES <= 6, "STAGES (mbarrier ring depth) must be 2 to 6");
    static_assert(GROUP_M >= 1, "GROUP_M (block rows per L2 group) must be at least 1");
    static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS <= 3, "MIN_BLOCKS (resident blocks per SM) must be 1 to 3");

    extern __shared__ unsigned char conv2d_wgmma_smem[];
    const unsigned base = (smemtile::smem_u32(conv2d_wgmma_smem) + 1023u) & ~1023u;  // the launch adds 1024
    const unsigned a_s = base, b_s = base + STAGES * A_BYTES;
    const unsigned bars = b_s + STAGES * B_BYTES;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x;
    const int wgi = tid / 128;
    const int M = Nb * P * Q, KG = R * S * C;
    const int nk = (KG + BK - 1) / BK;

    // conv2d's grouped block order
    const int grid_m = (M + BM - 1) / BM, grid_n = (K + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(grid_m - first_m, GROUP_M);
    const int m0 = (first_m + (pid % per_group) % group_rows) * BM;
    const int n0 = ((pid % per_group) / group_rows) * BN;

    {  // 16-byte gathers only: a misuse is made visible (this tile becomes NaN) instead of faulting
        const bool vec = ((C | ldx | ldf) & 7) == 0 &&
                         ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(f)) & 15) == 0;
        if (!vec) {
            for (int e = tid; e < BM * BN; e += blockDim.x) {
                const int m = m0 + e / BN, n = n0 + e % BN;
                if (m < M && n < K) cv::store_y(y + (long long)m * ldy + n, __int_as_float(0x7fc00000));
            }
            return;
        }
    }

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            cv::mbar_init(full(s), 128);         // the producer threads' cp.async arrivals (noinc)
            cv::mbar_init(empty(s), CONSUMERS);  // one arrival per consumer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wgi == 0) {
        // ---- producer warpgroup: every thread gathers A_PASSES chunks of A and copies B_PASSES chunks of B ----
        const int pt = tid, row0 = pt / 8, j = pt % 8;
        int a_h0[A_PASSES], a_w0[A_PASSES];
        long long a_img[A_PASSES];  // n * H
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const int m = m0 + row0 + 16 * i;
            if (m < M) {
                const int nimg = m / (P * Q), rem = m - nimg * (P * Q);
                const int p = rem / Q, q = rem - p * Q;
                a_h0[i] = p * stride - pad, a_w0[i] = q * stride - pad, a_img[i] = (long long)nimg * H;
            } else {
                a_h0[i] = -(1 << 30), a_w0[i] = 0, a_img[i] = 0;
            }
        }
        cv::Tap tap;  // the filter position of kg = kt * 64 + j * 8
        tap.start(j * 8, C, S);
        int b_kg = j * 8;
        const unsigned short* xs = reinterpret_cast<const unsigned short*>(x);
        const unsigned short* fs = reinterpret_cast<const unsigned short*>(f);
        const unsigned a_off = cv::swz128(row0, j), b_off = a_off;  // pass i adds 16 rows = 2048 bytes
        for (int kt = 0; kt < nk; ++kt) {
            const int s = kt % STAGES;
            cv::mbar_wait(empty(s), ((kt / STAGES) & 1) ^ 1);  // the first round passes (the phase before counts)
            const unsigned sa = a_s + s * A_BYTES + a_off, sb = b_s + s * B_BYTES + b_off;
#pragma unroll
            for (int i = 0; i < A_PASSES; ++i) {  // 8 channels of one tap: whole or zero
                const int ih = a_h0[i] + tap.r, iw = a_w0[i] + tap.s;
                const bool ok = tap.r < R && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                const unsigned short* src = ok ? xs + ((a_img[i] + ih) * W + iw) * ldx + tap.c : xs;
                cv::cp_async_16(sa + i * 2048, src, ok ? 16 : 0);
            }
#pragma unroll
            for (int jj = 0; jj < B_PASSES; ++jj) {
                const int n = n0 + row0 + 16 * jj;
                const bool ok = n < K && b_kg < KG;  // KG % 8 == 0: a chunk is whole or past the end
                const unsigned short* src = ok ? fs + (long long)n * ldf + b_kg : fs;
                cv::cp_async_16(sb + jj * 2048, src, ok ? 16 : 0);
            }
            cv::cp_async_arrive_noinc(full(s));
            tap.advance_bounded<BK / 8>(BK, C, S);
            b_kg += BK;
        }
        cv::cp_async_wait_all();
    } else {
        // ---- consumer warpgroups -------------------------------------------------------------------------------
        const int c = wgi - 1, ct = tid - wgi * 128;
        const int w = ct / 32, lane = ct % 32;
        float d[MI][ACC];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int i = 0; i < ACC; ++i) d[mi][i] = 0.f;
        for (int kt = 0; kt < nk; ++kt) {
            const int s = kt % STAGES;
            cv::mbar_wait(full(s), (kt / STAGES) & 1);
            cv::fence_proxy_async();  // generic-proxy cp.async writes -> the async proxy's wgmma reads
            cv::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    const unsigned long long da =
                        cv::wgmma_desc(a_s + s * A_BYTES + (c * WG_M + mi * 64) * 128 + kk * 32);
                    const unsigned long long db = cv::wgmma_desc(b_s + s * B_BYTES + kk * 32);
                    cv::Mma<BN, BF16>::run(d[mi], da, db, 1);
                }
            }
            cv::wgmma_commit();
            cv::wgmma_wait<1>();  // the previous stage's MMAs are done: release it
            if (kt > 0 && ct == 0) cv::mbar_arrive(empty((kt - 1) % STAGES));
        }
        cv::wgmma_wait<0>();
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) cv::fence_regs(d[mi]);

        // ---- epilogue: thread (w, lane) holds rows 16w + lane/4 (+8) and columns 8j + 2(lane%4) (+1) -------
        const bool y_vec = (ldy % 2 == 0) && (reinterpret_cast<unsigned long long>(y) % (2 * sizeof(TC)) == 0);
        const int row_base = m0 + c * WG_M + 16 * w + lane / 4, col_base = n0 + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < ACC / 4; ++j) {
            const int n = col_base + 8 * j;
            const float b0 = BIAS && n < K ? bias[n] : 0.f, b1 = BIAS && n + 1 < K ? bias[n + 1] : 0.f;
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int m = row_base + mi * 64 + 8 * h;
                    if (m >= M) continue;
                    float v0 = d[mi][4 * j + 2 * h] + b0, v1 = d[mi][4 * j + 2 * h + 1] + b1;
                    if (RELU) v0 = fmaxf(v0, 0.f), v1 = fmaxf(v1, 0.f);
                    TC* yrow = y + (long long)m * ldy;
                    if (y_vec && n + 1 < K) {
                        cv::store_y2(yrow + n, v0, v1);
                    } else {
                        if (n < K) cv::store_y(yrow + n, v0);
                        if (n + 1 < K) cv::store_y(yrow + n + 1, v1);
                    }
                }
        }
    }
#endif
}
