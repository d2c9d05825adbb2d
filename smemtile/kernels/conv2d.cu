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
