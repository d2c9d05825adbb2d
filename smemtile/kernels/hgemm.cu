// smemtile kernel family: hgemm (fp16 / bf16 tensor cores, mma.sync.m16n8k16, fp32 accumulation; sm_80+).
//
//     C = alpha * A * B + beta * C     A: M x K row-major (lda >= K); B: K x N row-major (ldb >= N) or, with
//                                      B_COL, column-major (element (k, n) at B[n * ldb + k], ldb >= K);
//                                      C: M x N row-major (ldc >= N), fp32, fp16 or bf16 (TC).
//
// Template parameters (each checked by a static_assert that states its rule):
//   T            smemtile::f16 or smemtile::bf16: A and B (the raw 16-bit patterns; __half / __nv_bfloat16
//                pointers are passed reinterpret_cast, same size and layout)
//   TC           float, smemtile::f16 or smemtile::bf16: C (accumulation is always fp32)
//   B_COL        false: B row-major (read with ldmatrix.trans); true: B column-major
//   BM, BN, BK   block tile; BK % 32 == 0 (two k16 steps per fragment double buffer), BK, BN powers of two
//   WM, WN       warp tile; multiples of 16; THREADS = (BM/WM) * (BN/WN) * 32 (1 to 32 warps)
//   STAGES       cp.async ring depth, 2 to 5
//   GROUP_M      block rows per L2 group (block order)
//   SPLIT_K      K slices (blockIdx.z), fp32 atomics into C (TC = float only)
//   MIN_BLOCKS   __launch_bounds__ minimum blocks per SM (registers <= 65536 / (THREADS * MIN_BLOCKS))
//   ALIGN        8: 16-byte cp.async copies, needs lda, ldb % 8 == 0 and 16-byte aligned A, B (else the kernel
//                writes NaN to its C tiles instead of faulting); 1: any lda, ldb, alignment: 2-byte loads through
//                registers, one chunk at a time (the host's choice for odd leading dimensions); 2: any: 4-byte
//                loads (fetch8_words), every load of a K tile issued before its shared stores (measured 7 %
//                slower than 1 on the H200, bench/NOTES.md issue 19 phase 3)
//   PAD_A, SWZ_A_B/M/S, PAD_B, SWZ_B_B/M/S: the SmemTile layouts of As and Bs (defaults: the conflict-free
//                swizzles below; PAD % 8 == 0, swizzle M >= 3 so that 16-byte granules stay whole)
//
// Any M, N >= 1, K >= 0: edge tiles are masked and the K tail too (a chunk of 8 k that crosses K copies only its
// valid bytes, zero-filling the rest); beta == 0 never reads C.
//
// ---- Data flow ---------------------------------------------------------------------------------------------------
//   global --cp.async.cg 16 B--> shared As[BM][BK], Bs[BK][BN] (Bs[BN][BK] with B_COL), STAGES-deep ring
//   shared --ldmatrix.x4 (B row-major: .trans)--> fragments, double-buffered over the k16 steps
//   fragments --mma.sync.m16n8k16.row.col.f32.{f16,bf16}--> fp32 accumulators (MI x NI x 4 per thread)
//   accumulators --alpha, beta, convert--> 2-element vector stores to C (fp32 atomics with SPLIT_K > 1)
//
// Block tile BM x BN, K step BK; warp w owns the WM x WN warp tile at
//   warp_m = (w / (BN/WN)) * WM,  warp_n = (w % (BN/WN)) * WN,
// i.e. MI = WM/16 x NI = WN/8 mma tiles of 16 x 8 (4 accumulators per lane each). A 64 x 64 warp tile holds 128
// fp32 accumulators and 2 x 32 fragment registers.
//
// Global sources of the copies: A chunk (row r, column c) of K tile kt reads A[(m0 + r) * lda + kt*BK + c]; rows
// past M are clamped to row M-1 (B_COL: rows past N to N-1), whose values only reach accumulators that are never
// stored; B row-major chunks keep their columns below N (zero-filled beyond). Every address stays inside the
// operands. Full K tiles take unmasked copies; the partial last one (and every tile with ALIGN 1) the masked ones.
//
// ---- Shared-memory accesses: lane -> (row, col), elements of 2 bytes (smemtile spec expressions) -------------------
// Notation: tid = threadIdx.x, lane = tid % 32, warp = tid / 32, THREADS, WARPS_N = BN/WN.
//   A copy (cp.async 16 B), i in [0, BM*BK/8/THREADS):       As  row = (tid + i*THREADS) // (BK/8)
//                                                                 col = ((tid + i*THREADS) % (BK/8)) * 8
//   B copy, row-major (cp.async 16 B), j in [0, BK*BN/8/THREADS):
//                                                             Bs  row = (tid + j*THREADS) // (BN/8)      (k)
//                                                                 col = ((tid + j*THREADS) % (BN/8)) * 8 (n)
//   B copy, B_COL (cp.async 16 B), j as above:              Bs  row = (tid + j*THREADS) // (BK/8)      (n)
//                                                                 col = ((tid + j*THREADS) % (BK/8)) * 8 (k)
//   A fragments (ldmatrix.x4), mi in [0, WM/16), kk in [0, BK/16):
//                                                             As  row = (warp // WARPS_N)*WM + mi*16 + lane % 16
//                                                                 col = kk*16 + (lane // 16) * 8
//   B fragments, row-major (ldmatrix.x4.trans), nj in [0, WN/16), kk as above:
//                                                             Bs  row = kk*16 + lane % 16                    (k)
//                                                                 col = (warp % WARPS_N)*WN + nj*16 + (lane // 16)*8 (n)
//   B fragments, B_COL (ldmatrix.x4), nj, kk:                 Bs  row = (warp % WARPS_N)*WN + nj*16 + lane % 8
//                                                                       + (lane // 16) * 8                  (n)
//                                                                 col = kk*16 + ((lane // 8) % 2) * 8         (k)
//   (ALIGN 1 and 2: the same chunks, written by st.shared.v4 from registers instead of cp.async.)
// The epilogue does not touch shared memory. Lane l of an ldmatrix.x4 gives the row address of matrix l // 8,
// row l % 8; the four matrices are a0..a3 of mma's A operand, or b0, b1 of the n8 tiles 2nj and 2nj+1.
// smemtile/families/hgemm/__init__.py (Hgemm.accesses) holds these as spec expressions, the family's one copy.
//
// ---- Swizzle ------------------------------------------------------------------------------------------------------
// Both tiles use SmemTile<ROWS, COLS, 0, B, 3, S> = CuTe Swizzle<B, 3, S> on the element offset row*COLS + col:
// the 16-byte granules (8 elements, M = 3) of each 128-byte group are permuted by the row bits just above one
// 128-byte line:
//     COLS = 32 (BK 32):   Swizzle<2,3,3>   granule ^= (row >> 1) & 3      2 rows per 128-byte line
//     COLS = 64 (BK 64):   Swizzle<3,3,3>   granule ^= row & 7             one row per line
//     COLS = 2^c >= 64:    Swizzle<3,3,c-3> granule (bits 3..5 of col) ^= row & 7   (Bs, BN = 128: <3,3,4>)
//
//        element offset bit: ... | c+2 c+1 c | ... 5 4 3 | 2 1 0 |        (c = log2 COLS >= 6)
//                                  \_ row&7 _/     \gran/   \elem/
//                                      XOR ---------^
// An ldmatrix phase (8 lanes = 8 rows x 16 bytes at one column) touches 8 distinct granule slots = all 32 banks,
// and a cp.async warp (32 x 16 bytes: whole 128-byte groups of one or more rows) writes each group as a
// permutation of it: both sides conflict-free, no padding. `smemtile analyze` of an hgemm spec: every access
// at its ideal wavefronts (dense rows: A_frag 4-way, B_frag 8-way). The kernel keeps one base offset per operand
// and lane and moves it by XOR (column steps) and add (row steps); constexpr checks prove that equal to
// SmemTile::offset for every lane, warp and step of the configuration (else it calls SmemTile::offset).
//
// ---- Pipeline (cp.async groups) -----------------------------------------------------------------------------------
//   prologue: tiles 0 .. STAGES-2 issued, one commit_group each (empty groups past the last tile keep the count)
//             wait_group(STAGES-2); __syncthreads(); fragments of (tile 0, k16 step 0) into buffer 0
//   tile kt, k16 step kk (KSTEPS = BK/16 >= 2):
//     load the fragments of step kk+1 (of tile kt+1, step 0, when kk == KSTEPS-1; none after the last tile)
//     into the other buffer
//     kk == 0:        issue tile kt+STAGES-1 into slot (kt-1) % STAGES (its readers passed the barrier of tile
//                     kt-1), commit_group                         -> STAGES+kt groups committed
//     mma.sync over step kk's fragments (MI x NI instructions)
//     kk == KSTEPS-2: wait_group(STAGES-2) -> groups 0..kt+1 complete: tile kt+1 landed (this thread's copies)
//                     __syncthreads()      -> everyone's copies landed, and every read of tile kt (the last, the
//                                             fragments of step KSTEPS-1, came before) is done
// One barrier per K tile. The steady-state loop issues full tiles unconditionally, so its body is one basic block
// and ptxas interleaves the copy instructions with the mma.sync (bench/NOTES.md, version 2); a second loop
// takes the masked last tile and the drain.
//
// ---- Split K, block order -----------------------------------------------------------------------------------------
// SPLIT_K > 1: blockIdx.z = z computes the K range [z*kc, (z+1)*kc), kc = ceil(K / (BK*SPLIT_K)) * BK, and adds
// alpha * its partial product into C with fp32 atomics (C must be float); beta is not applied: the caller first
// runs hgemm_splitk_prepare (C = beta * C, zeros for beta == 0, never reading C then).
// Blocks run in groups of GROUP_M block rows (Triton's matmul order) so that consecutive blocks share panels in L2.
//
// ---- Resources and launch -----------------------------------------------------------------------------------------
// Shared memory (bytes, always dynamic) = STAGES * (BM*(BK+PAD_A) + B rows * (B cols + PAD_B)) * 2
//   e.g. 256 x 128 x 32, 4 stages: 4 * (256*32 + 32*128) * 2 = 98304 B. Above 48 KiB the host raises
//   cudaFuncAttributeMaxDynamicSharedMemorySize (cuFuncSetAttribute) first.
// Launch: grid = (ceil(M/BM) * ceil(N/BN), 1, SPLIT_K), block = (THREADS, 1, 1), dynamic smem as above; with
//   SPLIT_K > 1 first hgemm_splitk_prepare<<<min(M, 65535), 256>>>(C, M, N, ldc, beta).
// Registers: 226-255 per thread for 64 x 64 warp tiles (ptxas 13.0, 0 spills): 8 warps and 1 block/SM, or 4 warps
//   and 2 blocks/SM.
#include "smem_layout.cuh"

namespace smemtile {

// Element types: smemtile::f16 and smemtile::bf16 (the raw bits, from smem_layout.cuh).

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
// The conflict-free swizzle of a tile whose rows hold `cols` 2-byte elements (a power of two >= 8): 16-byte
// granules (M = 3), permuted within 128-byte groups by the row bits just above one 128-byte line.
__host__ __device__ constexpr int hgemm_swizzle_b(int cols) { return cols >= 64 ? 3 : ilog2(cols / 8); }
__host__ __device__ constexpr int hgemm_swizzle_s(int cols) { return cols >= 64 ? ilog2(cols) - 3 : 3; }

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_COL, int PAD_A, int PAD_B>
struct HgemmShape {
    static constexpr int kWarpsN = BN / WN;
    static constexpr int kThreads = (BM / WM) * kWarpsN * 32;
    static constexpr int kAElems = BM * (BK + PAD_A);
    static constexpr int kBElems = B_COL ? BN * (BK + PAD_B) : BK * (BN + PAD_B);
    static constexpr int kStageBytes = (kAElems + kBElems) * 2;
    static constexpr int kSmemBytes = STAGES * kStageBytes;
};

// ---- address steps, proved at compile time --------------------------------------------------------------------------
// Every shared-memory access below is base(lane) moved by compile-time steps: a column step x (16 elements: the
// next k16 step, or the next pair of n8 tiles) and a row step y (rows * stride). For the swizzles used here the
// column step only flips granule bits that the lane's own granule never carries into, and the row step moves
// whole swizzle periods of rows, so
//     offset(row + y_rows, col + 16 x) == (offset(row, col) OP 16 x) + y_rows * stride,   OP = ^ (swizzled), + (not)
// and the kernel keeps one base offset per operand in a register instead of one per (x, y). The functions below
// check that identity for every lane, warp and step of the configuration (constexpr); where it does not hold the
// kernel computes SmemTile::offset exactly instead.
template <class L, bool XOR>
__host__ __device__ constexpr int step_offset(int base, int x16, int y_rows) {
    return (XOR ? (base ^ x16) : base + x16) + y_rows * L::kStride;
}
// Fragment loads (kind 1: A, rows m from warp_m, x = k16 step, y = m16 tile; kind 2: B row-major, rows k,
// columns n from warp_n, x = n16 pair, y = k16 step; kind 3: B_COL, rows n from warp_n, x = k16 step, y = n16 pair),
// for `origins` warp origins `origin_step` apart.
template <class L, bool XOR>
__host__ __device__ constexpr bool fragment_steps_exact(int kind, int origins, int origin_step, int nx, int ny) {
    for (int o = 0; o < origins; ++o)
        for (int lane = 0; lane < 32; ++lane) {
            int r = 0, c = 0;
            if (kind == 1) r = o * origin_step + lane % 16, c = (lane / 16) * 8;
            if (kind == 2) r = lane % 16, c = o * origin_step + (lane / 16) * 8;
            if (kind == 3) r = o * origin_step + lane % 8 + (lane / 16) * 8, c = ((lane / 8) % 2) * 8;
            const int base = L::offset(r, c);
            for (int x = 0; x < nx; ++x)
                for (int y = 0; y < ny; ++y)
                    if (L::offset(r + 16 * y, c + 16 * x) != step_offset<L, XOR>(base, 16 * x, 16 * y)) return false;
        }
    return true;
}
// Copies: chunk c = tid + i * THREADS -> row c / CPR, column (c % CPR) * 8; pass i moves THREADS / CPR rows.
template <class L>
__host__ __device__ constexpr bool copy_steps_exact(int threads, int cpr, int iters) {
    for (int tid = 0; tid < threads; ++tid)
        for (int i = 0; i < iters; ++i) {
            const int r = tid / cpr, c = (tid % cpr) * 8, rows = threads / cpr;
            if (L::offset(r + i * rows, c) != L::offset(r, c) + i * rows * L::kStride) return false;
        }
    return true;
}

// The sm_80 instructions below are guarded so that the file still parses for older targets (the kernel itself
// static_asserts sm_80+).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
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
// One 16-byte chunk of 8 elements through registers (ALIGN 1 and 2): the first n elements at p, zeros beyond,
// as the four 32-bit words of st.shared.v4 (the first element in the low half). fetch_masked: 2-byte loads.
__host__ __device__ __forceinline__ void fetch_masked(const unsigned short* p, int n, unsigned (&w)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const unsigned lo = 2 * e < n ? p[2 * e] : 0u;
        const unsigned hi = 2 * e + 1 < n ? p[2 * e + 1] : 0u;
        w[e] = lo | (hi << 16);
    }
}
// fetch8_words (ALIGN 2): all 8 elements valid, p only 2-byte aligned (odd leading dimensions). A 4-byte aligned
// p takes four 4-byte loads; otherwise (p = 2 mod 4) the element before and after three aligned words are 2-byte
// loads and the words are funnel-shifted into place:
//     p = 2 mod 4:   | h0 | x0 = e1 e2 | x1 = e3 e4 | x2 = e5 e6 | h4 |   ->  w = (e0 e1)(e2 e3)(e4 e5)(e6 e7)
// Every load stays inside the chunk's 16 bytes (memcheck-clean at the ends of the arrays); in a warp the two
// cases are predicated, not branched: 3 loads always, then 1 (aligned) or 2 (not) more.
__host__ __device__ __forceinline__ void fetch8_words(const unsigned short* p, unsigned (&w)[4]) {
    const bool mis = (reinterpret_cast<unsigned long long>(p) & 2) != 0;
    const unsigned* q = reinterpret_cast<const unsigned*>(p + (mis ? 1 : 0));
    const unsigned x0 = q[0], x1 = q[1], x2 = q[2];
    unsigned x3 = 0u, h0 = 0u, h4 = 0u;
    if (mis) {
        h0 = p[0];
        h4 = p[7];
    } else {
        x3 = q[3];
    }
    w[0] = mis ? h0 | (x0 << 16) : x0;
    w[1] = mis ? (x0 >> 16) | (x1 << 16) : x1;
    w[2] = mis ? (x1 >> 16) | (x2 << 16) : x2;
    w[3] = mis ? (x2 >> 16) | (h4 << 16) : x3;
}
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 750
    if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(addr));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(addr));
    }
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

// C element conversions. Pairs pack the first (lower-address) element in the low half.
template <typename TC>
__device__ __forceinline__ float load_c(const TC* p) {
    if constexpr (same_type<TC, float>::value) {
        return *p;
    } else {
        const unsigned short h = reinterpret_cast<const unsigned short*>(p)[0];
        if constexpr (same_type<TC, bf16>::value) {
            return __uint_as_float(static_cast<unsigned>(h) << 16);
        } else {
            float f;
            asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
            return f;
        }
    }
}
template <typename TC>
__device__ __forceinline__ void store_c(TC* p, float v) {
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
// Two adjacent elements, p aligned to their size (8 bytes for float, 4 for 16-bit types).
template <typename TC>
__device__ __forceinline__ void load_c2(const TC* p, float& v0, float& v1) {
    if constexpr (same_type<TC, float>::value) {
        const float2 c = *reinterpret_cast<const float2*>(p);
        v0 = c.x, v1 = c.y;
    } else {
        const unsigned w = *reinterpret_cast<const unsigned*>(p);
        if constexpr (same_type<TC, bf16>::value) {
            v0 = __uint_as_float(w << 16), v1 = __uint_as_float(w & 0xffff0000u);
        } else {
            asm("{ .reg .f16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n cvt.f32.f16 %1, hi;\n}\n"
                : "=f"(v0), "=f"(v1)
                : "r"(w));
        }
    }
}
template <typename TC>
__device__ __forceinline__ void store_c2(TC* p, float v0, float v1) {
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

}  // namespace smemtile

// C = beta * C (zeros when beta == 0, C never read then): the caller's step before a SPLIT_K > 1 launch, which
// adds every K slice's alpha * A_z * B_z into C with atomics. Any grid; e.g. block 256, grid min(M, 65535).
extern "C" __global__ void hgemm_splitk_prepare(float* C, int M, int N, int ldc, float beta) {
    for (int m = blockIdx.x; m < M; m += gridDim.x) {
        float* row = C + (long long)m * ldc;
        for (int n = threadIdx.x; n < N; n += blockDim.x) row[n] = beta == 0.f ? 0.f : beta * row[n];
    }
}

// Defaults: 256 x 128 x 32 block tile, 8 warps of 64 x 64, 4 stages, 1 block/SM, the conflict-free swizzles: the
// fastest measured at 4096^3 and 8192^3 on the H200 (bench/NOTES.md; 128 x 256 is 1-2 % behind).
template <typename T = smemtile::bf16, typename TC = float, bool B_COL = false,
          int BM = 256, int BN = 128, int BK = 32, int WM = 64, int WN = 64, int STAGES = 4,
          int GROUP_M = 8, int SPLIT_K = 1, int MIN_BLOCKS = 1, int ALIGN = 8,
          int PAD_A = 0, int SWZ_A_B = smemtile::hgemm_swizzle_b(BK), int SWZ_A_M = 3,
          int SWZ_A_S = smemtile::hgemm_swizzle_s(BK),
          int PAD_B = 0, int SWZ_B_B = smemtile::hgemm_swizzle_b(B_COL ? BK : BN), int SWZ_B_M = 3,
          int SWZ_B_S = smemtile::hgemm_swizzle_s(B_COL ? BK : BN)>
__global__ void __launch_bounds__(smemtile::HgemmShape<BM, BN, BK, WM, WN, STAGES, B_COL, PAD_A, PAD_B>::kThreads,
                                  MIN_BLOCKS)
hgemm(int M, int N, int K, float alpha, const T* __restrict__ A, int lda, const T* __restrict__ B, int ldb,
      float beta, TC* __restrict__ C, int ldc) {
    using Shape = smemtile::HgemmShape<BM, BN, BK, WM, WN, STAGES, B_COL, PAD_A, PAD_B>;
    using LA = smemtile::SmemTile<BM, BK, PAD_A, SWZ_A_B, SWZ_A_M, SWZ_A_S>;  // As[m][k]
    using LB = smemtile::SmemTile<B_COL ? BN : BK, B_COL ? BK : BN, PAD_B, SWZ_B_B, SWZ_B_M, SWZ_B_S>;  // Bs[k][n] / [n][k]
    constexpr int THREADS = Shape::kThreads;
    constexpr int WARPS_N = Shape::kWarpsN;
    constexpr int MI = WM / 16, NI = WN / 8, KSTEPS = BK / 16;

    static_assert(smemtile::same_type<T, smemtile::f16>::value || smemtile::same_type<T, smemtile::bf16>::value,
                  "T (the A and B element type) must be smemtile::f16 or smemtile::bf16");
    static_assert(smemtile::same_type<TC, float>::value || smemtile::same_type<TC, smemtile::f16>::value ||
                      smemtile::same_type<TC, smemtile::bf16>::value,
                  "TC (the C element type) must be float, smemtile::f16 or smemtile::bf16");
    static_assert(WM % 16 == 0, "WM must be a multiple of 16: a warp's rows are m16 mma tiles");
    static_assert(WN % 16 == 0, "WN must be a multiple of 16: one ldmatrix.x4 loads B for two n8 mma tiles");
    static_assert(BM % WM == 0 && BN % WN == 0, "the warp tiles WM x WN must tile the block tile BM x BN");
    static_assert(THREADS >= 32 && THREADS <= 1024, "a block needs 1 to 32 warps: (BM/WM) * (BN/WN) <= 32");
    static_assert(BK % 32 == 0,
                  "BK must be a multiple of 32: two k16 mma steps per 32, the fragment double buffer alternates");
    static_assert(smemtile::is_pow2(BK) && smemtile::is_pow2(BN),
                  "BK and BN must be powers of two (whole 16-byte chunks per copy pass, swizzle rows)");
    static_assert(THREADS % (BK / 8) == 0 && (BM * BK / 8) % THREADS == 0,
                  "every thread copies the same number of A chunks: BM*BK/8 % THREADS == 0 (whole rows per pass)");
    static_assert(B_COL ? (THREADS % (BK / 8) == 0 && (BN * BK / 8) % THREADS == 0)
                        : (THREADS % (BN / 8) == 0 && (BK * BN / 8) % THREADS == 0),
                  "every thread copies the same number of B chunks: BK*BN/8 % THREADS == 0 and THREADS a multiple "
                  "of the 16-byte chunks per B row");
    static_assert(STAGES >= 2 && STAGES <= 5, "STAGES (cp.async ring depth) must be 2 to 5");
    static_assert(PAD_A % 8 == 0 && PAD_B % 8 == 0,
                  "padding must be a multiple of 8 elements: cp.async and ldmatrix rows are 16-byte aligned");
    static_assert((SWZ_A_B == 0 || SWZ_A_M >= 3) && (SWZ_B_B == 0 || SWZ_B_M >= 3),
                  "a swizzle must move whole 16-byte granules (M >= 3): cp.async writes and ldmatrix reads 16 bytes");
    static_assert(GROUP_M >= 1, "GROUP_M (block rows per L2 group) must be at least 1");
    static_assert(SPLIT_K >= 1, "SPLIT_K (K slices, blockIdx.z) must be at least 1");
    static_assert(SPLIT_K == 1 || smemtile::same_type<TC, float>::value,
                  "SPLIT_K > 1 adds the K slices into C with fp32 atomics: C must be float");
    static_assert(MIN_BLOCKS >= 1, "MIN_BLOCKS (blocks per SM for __launch_bounds__) must be at least 1");
    static_assert(ALIGN == 8 || ALIGN == 2 || ALIGN == 1,
                  "ALIGN must be 8 (16-byte cp.async: lda, ldb % 8 == 0, A and B 16-byte aligned), 2 (any leading "
                  "dimension: 4-byte loads through registers, a tile's loads before its stores) or 1 (any: 2-byte "
                  "loads, one chunk at a time)");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    static_assert(__CUDA_ARCH__ >= 800, "hgemm needs sm_80 or newer (cp.async, bf16 mma.sync)");
#endif

    extern __shared__ __align__(128) unsigned char hgemm_smem[];
    const unsigned smem0 = smemtile::smem_u32(hgemm_smem);
    // stage s: As at smem0 + s * kStageBytes, Bs right after it
    constexpr int A_BYTES = Shape::kAElems * 2;

    if constexpr (SPLIT_K > 1) {  // slice blockIdx.z: K range [kz, kz + kc), kc a multiple of BK
        const int kc = (K + BK * SPLIT_K - 1) / (BK * SPLIT_K) * BK;
        const int kz = blockIdx.z * kc;
        A += kz;  // kz % 8 == 0 keeps the 16-byte alignment
        B += B_COL ? kz : (long long)kz * ldb;
        K = max(0, min(K - kz, kc));
    }

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;

    // Grouped block order: GROUP_M block rows share each B panel in L2.
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(grid_m - first_m, GROUP_M);
    const int block_m = first_m + (pid % per_group) % group_rows;
    const int block_n = (pid % per_group) / group_rows;
    const int m0 = block_m * BM, n0 = block_n * BN;
    const int warp_m = (warp / WARPS_N) * WM, warp_n = (warp % WARPS_N) * WN;

    const int k_tiles = (K + BK - 1) / BK;
    if constexpr (ALIGN == 8) {
        // The 16-byte copies need lda, ldb % 8 == 0 and 16-byte aligned A, B; the host picks ALIGN 1 otherwise.
        // A misuse is made visible without faulting: this block's C tile becomes NaN.
        const bool vec = ((lda | ldb) & 7) == 0 &&
                         ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15) == 0;
        if (!vec) {
            for (int e = tid; e < BM * BN; e += THREADS) {
                const int m = m0 + e / BN, n = n0 + e % BN;
                if (m < M && n < N) smemtile::store_c(C + (long long)m * ldc + n, __int_as_float(0x7fc00000));
            }
            return;
        }
    }

    // ---- copy coordinates (fixed per thread): chunk c = tid + i * THREADS of 8 elements ----------------------
    constexpr int A_CPR = BK / 8;                    // chunks per As row
    constexpr int A_ITERS = BM * BK / 8 / THREADS;   // chunks per thread per stage
    constexpr int A_ROWS = THREADS / A_CPR;          // rows one pass covers
    const int a_row = tid / A_CPR, a_col = (tid % A_CPR) * 8;
    constexpr int B_CPR = B_COL ? BK / 8 : BN / 8;
    constexpr int B_ITERS = BK * BN / 8 / THREADS;
    constexpr int B_ROWS = THREADS / B_CPR;
    const int b_row = tid / B_CPR, b_col = (tid % B_CPR) * 8;
    constexpr bool A_COPY_STEP = smemtile::copy_steps_exact<LA>(THREADS, A_CPR, A_ITERS);
    constexpr bool B_COPY_STEP = smemtile::copy_steps_exact<LB>(THREADS, B_CPR, B_ITERS);
    const int a_dst = LA::offset(a_row, a_col), b_dst = LB::offset(b_row, b_col);
    auto a_dst_off = [&](int i) {
        return A_COPY_STEP ? a_dst + i * A_ROWS * LA::kStride : LA::offset(a_row + i * A_ROWS, a_col);
    };
    auto b_dst_off = [&](int j) {
        return B_COPY_STEP ? b_dst + j * B_ROWS * LB::kStride : LB::offset(b_row + j * B_ROWS, b_col);
    };

    // Global sources: the next K tile's chunk of pass 0 for this thread. Pass i of A (of B_COL) is row
    // a_row + i * A_ROWS; rows past M (past N) are clamped to the last row: those values only reach accumulator rows
    // (columns) that are never stored, and every address stays inside the operand. B row-major chunks past N keep
    // their valid columns (zero-filled beyond); a chunk wholly past N reads nothing from column n0 (valid).
    const int b_nvalid = B_COL ? 8 : max(0, min(8, N - (n0 + b_col)));  // row-major B: columns this thread keeps
    const unsigned short* a_next = reinterpret_cast<const unsigned short*>(A) + (long long)(m0 + a_row) * lda + a_col;
    const unsigned short* b_next =
        B_COL ? reinterpret_cast<const unsigned short*>(B) + (long long)(n0 + b_row) * ldb + b_col  // (k, n) at n*ldb+k
              : reinterpret_cast<const unsigned short*>(B) + (long long)b_row * ldb + n0 + (b_nvalid ? b_col : 0);
    auto a_pass = [&](int i) {  // element offset of pass i from pass 0 (row clamped to M - 1)
        return (long long)(min(m0 + a_row + i * A_ROWS, M - 1) - (m0 + a_row)) * lda;
    };
    auto b_pass = [&](int j) {  // B_COL: rows n clamped to N - 1; row-major: k rows (masked per tile instead)
        return B_COL ? (long long)(min(n0 + b_row + j * B_ROWS, N - 1) - (n0 + b_row)) * ldb
                     : (long long)j * B_ROWS * ldb;
    };
    const long long b_tile = B_COL ? BK : (long long)BK * ldb;  // b_next advance per K tile (A: BK)

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
    constexpr bool A_STEP = smemtile::fragment_steps_exact<LA, A_XOR>(1, BM / WM, WM, KSTEPS, MI);
    constexpr bool B_STEP = B_COL ? smemtile::fragment_steps_exact<LB, B_XOR>(3, WARPS_N, WN, KSTEPS, NI / 2)
                                  : smemtile::fragment_steps_exact<LB, B_XOR>(2, WARPS_N, WN, NI / 2, KSTEPS);
    const int fa_row = warp_m + (lane & 15), fa_col = (lane >> 4) * 8;
    const int fb_row = B_COL ? warp_n + (lane & 7) + ((lane >> 4) << 3) : (lane & 15);
    const int fb_col = B_COL ? ((lane >> 3) & 1) * 8 : warp_n + (lane >> 4) * 8;
    const int fa_base = LA::offset(fa_row, fa_col), fb_base = LB::offset(fb_row, fb_col);
    auto fa_off = [&](int i, int kk) {  // A tile i (16 rows), k16 step kk
        return A_STEP ? smemtile::step_offset<LA, A_XOR>(fa_base, 16 * kk, 16 * i)
                      : LA::offset(fa_row + 16 * i, fa_col + 16 * kk);
    };
    auto fb_off = [&](int j, int kk) {  // B n16 pair j, k16 step kk
        if constexpr (B_COL) {
            return B_STEP ? smemtile::step_offset<LB, B_XOR>(fb_base, 16 * kk, 16 * j)
                          : LB::offset(fb_row + 16 * j, fb_col + 16 * kk);
        } else {
            return B_STEP ? smemtile::step_offset<LB, B_XOR>(fb_base, 16 * j, 16 * kk)
                          : LB::offset(fb_row + 16 * kk, fb_col + 16 * j);
        }
    };
    auto load_frags = [&](int buf, unsigned sa, int kk) {  // sa: the stage's As address (Bs follows)
#pragma unroll
        for (int i = 0; i < MI; ++i)
            smemtile::ldsm_x4<false>(sa + 2 * fa_off(i, kk), fa[buf][i][0], fa[buf][i][1], fa[buf][i][2],
                                     fa[buf][i][3]);
#pragma unroll
        for (int j = 0; j < NI / 2; ++j)
            smemtile::ldsm_x4<!B_COL>(sa + A_BYTES + 2 * fb_off(j, kk), fb[buf][2 * j][0], fb[buf][2 * j][1],
                                      fb[buf][2 * j + 1][0], fb[buf][2 * j + 1][1]);
    };
    auto mma_step = [&](int buf) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int jj = (i & 1) ? NI - 1 - j : j;  // serpentine: reuse the last B fragment
                smemtile::mma_16816<T>(acc[i][jj], fa[buf][i], fb[buf][jj]);
            }
    };

    // ---- main loop: 16-byte cp.async (ALIGN 8) or loads through registers (ALIGN 2: 4-byte words, 1: 2-byte) ----
    {
        constexpr bool VEC = ALIGN == 8;
        // One 16-byte chunk: its first n elements, the rest zero-filled (src points inside the operand).
        auto copy_chunk = [&](unsigned dst, const unsigned short* src, int n) {
            if constexpr (VEC) {
                smemtile::cp_async_16(dst, src, 2 * n);
            } else {
                unsigned w[4];
                smemtile::fetch_masked(src, n, w);
                smemtile::st_shared_v4(dst, w[0], w[1], w[2], w[3]);
            }
        };
        // issue(k0, sa): the A and B chunks of the K tile at k0 into the stage at sa (As; Bs follows); then the
        // source pointers move to the next tile. FULL: the tile lies inside K (and, ALIGN 8, the operands are
        // 16-byte aligned), so no k masks (the common case; the compiler keeps the pass offsets in registers).
        auto issue = [&](const bool full, int k0, unsigned sa) {  // inlined with a constant `full`
            const int a_kvalid = full ? 8 : max(0, min(8, K - (k0 + a_col)));
            if constexpr (ALIGN == 2) {
                if (full) {
                    // the tile's chunks in batches of COPY_BATCH: every load of a batch, then its shared stores
                    // (one exposed load latency per batch, not per chunk; a batch's words fit the registers the
                    // 64 x 64 warp tile leaves; bench/NOTES.md, issue 19 phase 3)
                    constexpr int CHUNKS = A_ITERS + B_ITERS, COPY_BATCH = 6;
#pragma unroll
                    for (int c0 = 0; c0 < CHUNKS; c0 += COPY_BATCH) {
                        unsigned w[COPY_BATCH][4];
#pragma unroll
                        for (int c = c0; c < min(CHUNKS, c0 + COPY_BATCH); ++c) {
                            if (c < A_ITERS) {
                                smemtile::fetch8_words(a_next + a_pass(c), w[c - c0]);
                            } else if (B_COL || b_nvalid == 8) {
                                smemtile::fetch8_words(b_next + b_pass(c - A_ITERS), w[c - c0]);
                            } else {  // the N edge of row-major B: the valid columns, zeros beyond
                                smemtile::fetch_masked(
                                    b_nvalid ? b_next + b_pass(c - A_ITERS) : reinterpret_cast<const unsigned short*>(B),
                                    b_nvalid, w[c - c0]);
                            }
                        }
#pragma unroll
                        for (int c = c0; c < min(CHUNKS, c0 + COPY_BATCH); ++c) {
                            const unsigned dst = c < A_ITERS ? sa + 2 * a_dst_off(c) : sa + A_BYTES + 2 * b_dst_off(c - A_ITERS);
                            smemtile::st_shared_v4(dst, w[c - c0][0], w[c - c0][1], w[c - c0][2], w[c - c0][3]);
                        }
                    }
                    a_next += BK;
                    b_next += b_tile;
                    return;
                }
            }
#pragma unroll
            for (int i = 0; i < A_ITERS; ++i) {
                if (full) {
                    smemtile::cp_async_16(sa + 2 * a_dst_off(i), a_next + a_pass(i));
                } else {
                    const unsigned short* src = a_kvalid ? a_next + a_pass(i) : reinterpret_cast<const unsigned short*>(A);
                    copy_chunk(sa + 2 * a_dst_off(i), src, a_kvalid);
                }
            }
#pragma unroll
            for (int j = 0; j < B_ITERS; ++j) {
                // valid elements of the chunk: B_COL masks k (rows are clamped), row-major masks k rows and n
                const int n = B_COL ? (full ? 8 : max(0, min(8, K - (k0 + b_col))))
                                    : ((full || k0 + b_row + j * B_ROWS < K) ? b_nvalid : 0);
                const unsigned dst = sa + A_BYTES + 2 * b_dst_off(j);
                if (full && B_COL) {
                    smemtile::cp_async_16(dst, b_next + b_pass(j));
                } else if (full) {
                    smemtile::cp_async_16(dst, b_next + b_pass(j), 2 * n);
                } else {
                    copy_chunk(dst, n ? b_next + b_pass(j) : reinterpret_cast<const unsigned short*>(B), n);
                }
            }
            a_next += BK;
            b_next += b_tile;
        };
        // tiles [0, full_tiles) take the unmasked copies
        const int full_tiles = ALIGN != 1 ? K / BK : 0;
        auto issue_tile = [&](int t, unsigned sa) {
            if (t < full_tiles) {
                issue(true, t * BK, sa);
            } else if (t < k_tiles) {
                issue(false, t * BK, sa);
            }
        };

        constexpr unsigned STAGE = Shape::kStageBytes, RING = STAGES * Shape::kStageBytes;
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            issue_tile(s, smem0 + s * STAGE);
            smemtile::cp_async_commit();
        }
        smemtile::cp_async_wait<STAGES - 2>();
        __syncthreads();
        // stage offsets (bytes from smem0) of the tile being read and of the slot written next
        unsigned read_off = 0, write_off = (STAGES - 1) * STAGE;
        load_frags(0, smem0, 0);
        // One K tile. `steady`: the tile issued here is a full one, so the copies are unconditional and the whole
        // body is one basic block: ptxas interleaves the copy instructions with the mma.sync of step 0 (behind a
        // branch they would hold back the tensor cores of every warp at once, right after each barrier).
        auto tile = [&](const bool steady, int kt) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                // (copies through registers, and the masked ones, go first: their registers are free again before
                // the fragments of step 1 arrive; 16-byte cp.async need none and go after them)
                // (the last tile loads no fragments of a tile after it: `verify --ncu` counts every ldmatrix)
                if (kk != 0 || (steady && ALIGN == 8)) {
                    if (steady || kk + 1 < KSTEPS || kt + 1 < k_tiles)
                        load_frags((kk + 1) & 1, smem0 + read_off, (kk + 1) % KSTEPS);
                }
                if (kk == 0) {
                    if (steady) {
                        issue(true, (kt + STAGES - 1) * BK, smem0 + write_off);
                    } else {
                        issue_tile(kt + STAGES - 1, smem0 + write_off);
                    }
                    if (!steady || ALIGN != 8) load_frags(1, smem0 + read_off, 1);
                    smemtile::cp_async_commit();
                    write_off = write_off + STAGE == RING ? 0 : write_off + STAGE;
                }
                mma_step(kk & 1);
                if (kk == KSTEPS - 2) {  // after the last fragment load of tile kt
                    smemtile::cp_async_wait<STAGES - 2>();  // tile kt+1 (this thread's chunks) has landed
                    __syncthreads();                        // everyone's; tile kt is no longer read
                    read_off = read_off + STAGE == RING ? 0 : read_off + STAGE;
                }
            }
        };
        int kt = 0;
        for (; kt + STAGES - 1 < full_tiles; ++kt) tile(true, kt);  // steady state: full tiles issued
        for (; kt < k_tiles; ++kt) tile(false, kt);                 // the masked last tile and the drain
        smemtile::cp_async_wait<0>();
    }

    // ---- epilogue: lane owns rows r, r+8 of each m16 tile and columns c, c+1 of each n8 tile ---------------
    const int r0 = m0 + warp_m + (lane >> 2), c0 = n0 + warp_n + (lane & 3) * 2;
    if constexpr (SPLIT_K > 1) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = r0 + i * 16 + h * 8;
                if (m >= M) continue;
                float* crow = reinterpret_cast<float*>(C) + (long long)m * ldc;
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int n = c0 + j * 8;
                    if (n < N) atomicAdd(crow + n, alpha * acc[i][j][2 * h]);
                    if (n + 1 < N) atomicAdd(crow + n + 1, alpha * acc[i][j][2 * h + 1]);
                }
            }
        return;
    }
    const bool c_vec = (ldc % 2 == 0) && (reinterpret_cast<unsigned long long>(C) % (2 * sizeof(TC)) == 0);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = r0 + i * 16 + h * 8;
            if (m >= M) continue;
            TC* crow = C + (long long)m * ldc;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int n = c0 + j * 8;
                float v0 = alpha * acc[i][j][2 * h], v1 = alpha * acc[i][j][2 * h + 1];
                if (c_vec && n + 1 < N) {
                    if (beta != 0.f) {
                        float o0, o1;
                        smemtile::load_c2(crow + n, o0, o1);
                        v0 += beta * o0, v1 += beta * o1;
                    }
                    smemtile::store_c2(crow + n, v0, v1);
                } else {
                    if (n < N) smemtile::store_c(crow + n, beta != 0.f ? v0 + beta * smemtile::load_c(crow + n) : v0);
                    if (n + 1 < N)
                        smemtile::store_c(crow + n + 1, beta != 0.f ? v1 + beta * smemtile::load_c(crow + n + 1) : v1);
                }
            }
        }
}
