// smemtile: FlashAttention forward for Hopper (sm_90a only), the FlashAttention-3-style path (issue 32, PATH 1).
// Standalone first (bench/flash_attn_sm90/driver.cu checks and times it); the flash_attn family takes it over.
//
//     O = softmax(scale * Q K^T [+ causal mask]) V,   LSE = log(sum_j exp(scale * s_ij))   (natural log)
//     q, o  [batch, seq_q,  heads, HD]   k, v [batch, seq_kv, heads, HD]   head_dim contiguous, other strides free
//     (elements; q_sb, q_ss, q_sh ...: sub-views, packed QKV); lse float32 [batch, heads, seq_q] contiguous.
//     Causal is top-left aligned (torch SDPA is_causal): query i sees keys j <= i. seq_kv >= 1.
//
// Template parameters (each checked by a static_assert):
//   T        smemtile::f16 or smemtile::bf16 (raw 16-bit patterns from smem_layout.cuh)
//   HD       head dimension, 64 or 128 (HD / 64 panels of 128 bytes per row)
//   BN       KV rows per tile, 64 or 128 (the n of the S = Q K^T wgmma, the k of O += P V)
//   STAGES   depth of the K ring and of the V ring, 2..4
//   CAUSAL   0 or 1
//   OVERLAP  0: the simple schedule (the fallback); 1: FA3's intra-warpgroup pipelining (below); 2: 1 plus FA3's
//            ping-pong of the two consumer warpgroups (named barriers order their GEMM issues)
// BM is fixed at 128 query rows per CTA: two consumer warpgroups of 64 rows each (one m64 wgmma row block).
// Block: 384 threads = warpgroup 0 (producer: one thread issues every TMA load; setmaxnreg.dec 40) + warpgroups
// 1 and 2 (consumers; setmaxnreg.inc 232). Work items: (q tile, batch * head), items = ceil(seq_q / 128) *
// batch * heads; item t is head t / m_tiles (consecutive items share a head, whose K and V then stay in L2) and
// q tile m_tiles - 1 - t % m_tiles (with CAUSAL the longest first). Grid (1-D, chosen by the launch): `items`
// CTAs, one item each, or fewer (persistent: CTA x runs items x, x + gridDim.x, ...; the next item's Q and first
// K/V load while this item's epilogue stores O). The same code serves both.
//
// ---- Schedule (one CTA) -------------------------------------------------------------------------------------------
//   producer:   per item: wait q_empty (both consumers' last S of the previous item completed; not for the first)
//               -> expect_tx q_full (128 * HD * 2 bytes) -> HD / 64 Q boxes {64, 128, 1, 1}; then K_0, and for every
//               KV tile j: K_{j+1}, V_j (K runs one tile ahead: the S of the next tile never waits behind a V).
//               Each load: wait k_empty / v_empty of its stage (s = g % STAGES) -> expect_tx k_full / v_full
//               (BN * HD * 2 bytes) -> HD / 64 boxes {64, BN, 1, 1}.
//   consumer c, OVERLAP 0, per KV tile j: wait k_full[s] -> HD / 16 wgmma m64nBNk16 (Q and K from shared memory,
//               K-major 128B descriptors) -> wait -> arrive k_empty[s] -> mask (tails, causal; only in tiles that
//               need it) -> online softmax in registers (exp2 with scale * log2 e, row max over the 4 lanes of a
//               quad) -> rescale O by exp2(m_old - m_new) -> P to 16-bit A fragments (no data movement: see
//               below) -> wait v_full[s] -> BN / 16 wgmma m64nHDk16 (A = P from registers, B = V from shared
//               memory, transposed: MN-major 128B descriptor) -> wait -> arrive v_empty[s].
//   consumer c, OVERLAP 1: S_0 and its softmax first; then per tile j >= 1: issue S_j = Q K_j^T, issue
//               O += P_{j-1} V_{j-1}, wait for S_j only (wgmma.wait_group 1), arrive k_empty, softmax of S_j while
//               the P V wgmmas run, wait for them, arrive v_empty, rescale O, P_j to A fragments; finally
//               O += P_last V_last. Registers: S (BN / 2) + O (HD / 2) + P (BN / 4) fp32/b32 per thread.
//   consumer c, OVERLAP 2: as 1, and each block of GEMM issues (S_0; then S_j with P_{j-1} V_{j-1}; then the last
//               P V) is a turn: bar.sync on named barrier 1 + c (256 threads) before it, bar.arrive on the other
//               consumer's barrier after it. Consumer 1 arrives on barrier 1 once at the start, so consumer 0 goes
//               first, and skips its arrive after its last turn, so every arrival meets a sync (n_kv + 1 turns
//               each). One warpgroup's softmax then runs while the other's GEMMs use the tensor cores.
//   The empty barriers count 2 arrivals (one thread per consumer warpgroup, after its wgmmas completed); the
//   release of an item's last K tile also arrives on q_empty. Ring positions (g = tiles before this item + j)
//   and the parity of q_full (items so far & 1) carry over from item to item.
//   epilogue:   O / l (l summed over the quad) stored straight from registers with the user's strides (4-byte
//               stores of 2 elements where o and its strides allow, else 2-byte), rows >= seq_q skipped;
//               LSE = (m + log2 l) * ln 2 by the lane owning column 0 of the row.
//   The KV tiles a q tile visits: all ceil(seq_kv / BN), or with CAUSAL only those holding a key <= its last
//   row (fully masked tiles are never loaded). Masking per element happens only in tiles that cross seq_kv or
//   the diagonal of the warpgroup's first row.
//
// ---- Shared memory (dynamic, aligned up to 1024 bytes at run time: the launch adds 1024 bytes of slack) ------------
//   Qs[HD/64][128][64]                 T   TMA SWIZZLE_128B: 16-byte chunk c of row r at r*128 + (c ^ r%8)*16
//   Ks[STAGES][HD/64][BN][64]          T   the same swizzle; panel p holds head-dim columns [64p, 64p + 64)
//   Vs[STAGES][HD/64][BN][64]          T   the same
//   q_full, q_empty, k_full[STAGES], v_full[STAGES], k_empty[STAGES], v_empty[STAGES]   u64 mbarriers
//   bytes = 1024 + 128*HD*2 + 2*STAGES*BN*HD*2 + 8*(2 + 4*STAGES)  (fa::smem_bytes<HD, BN, STAGES>())
//   Every tile starts on a 1024-byte boundary (128 and BN are multiples of 8 rows of 128 bytes).
//
// ---- Tensor maps (encoded by the host, cuTensorMapEncodeTiled; see driver.cu: encode_qkv_map) ---------------------
//   One 4-D map per tensor, 16-bit elements (CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 / FLOAT16), innermost first:
//     dims    {HD, seq, heads, batch}                       (seq = seq_q for Q, seq_kv for K and V)
//     strides {s_ss * 2, s_sh * 2, s_sb * 2} bytes          (each a multiple of 16: strides multiples of 8 elements,
//                                                           base pointer 16-byte aligned)
//     box     {64, 128, 1, 1} for Q, {64, BN, 1, 1} for K and V; element strides {1, 1, 1, 1}
//     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
//     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (out-of-bounds rows read as zeros: the seq tails; a box never crosses into
//     the next head or batch because those are separate dimensions)
//   Box coordinates {64p, row0, head, batch}. The q/k/v pointers and their strides are not read by the kernel
//   (the maps hold them); they are in the signature to keep the family's contract.
//
// ---- wgmma operands ---------------------------------------------------------------------------------------------
//   S = Q K^T, m64nBNk16, k-step kk (16 head-dim columns): A = Qs panel kk/4, rows 64c.., + (kk%4)*32 bytes;
//     B = Ks panel kk/4 (+ (kk%4)*32): both K-major, 128B swizzle: start >> 4, LBO 1 (unused), SBO 1024 >> 4
//     (8 rows of 128 bytes), layout type 1. Adding kk*32 bytes inside the atom works because the hardware applies
//     the XOR on the final address, as TMA did (the same descriptors as wgmma_gemm).
//   O += P V, m64nHDk16, k-step t (16 KV rows): B = Vs + t * 2048 bytes, MN-major (V is [kv][hd]: n contiguous),
//     imm-trans-b 1, 128B swizzle. The canonical MN-major SW128 layout is ((64 n), (8 k, k/8)) with the 64 n of
//     one k in one 128-byte row, so: SBO = 1024 bytes (from one 8-row group of k to the next), LBO = BN * 128
//     bytes (from one 64-column panel of n to the next; used when HD = 128).
//   Accumulator fragment (PTX ISA, wgmma D m64nN, f32): warp w of the warpgroup owns rows 16w..16w+15;
//     d[4j + 2h + e] is row 16w + lane/4 + 8h, column 8j + 2(lane%4) + e   (j < N/8, h, e in {0, 1}).
//   Register A fragment (m64nNk16, 16-bit): a[i] (i < 4) holds 2 elements: row 16w + lane/4 + 8(i%2),
//     columns 2(lane%4) + 8(i/2) + {0, 1}. So the S accumulators of KV columns [16t, 16t + 16) are exactly
//     the A fragment of k-step t: a[i] = pack(d[8t + 2i], d[8t + 2i + 1]) (FA3's observation: no shuffles).
//
// Builds with NVRTC and smem_layout.cuh alone (no CUDA headers): PTX through inline asm. Device helpers live in
// smemtile::fa so the file can share a translation unit with the other families' generated files.

#pragma once
#ifndef SMEMTILE_FA_SM90_CUH
#define SMEMTILE_FA_SM90_CUH

#include "../../smemtile/kernels/smem_layout.cuh"

namespace smemtile {
namespace fa {

// CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value as a __grid_constant__ parameter. Its own name
// here (wgmma_gemm.cu defines smemtile::TensorMap without a guard); the same size and alignment.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

template <class A, class B>
struct same {
    static constexpr bool value = false;
};
template <class A>
struct same<A, A> {
    static constexpr bool value = true;
};

constexpr int kBM = 128;           // query rows per CTA (2 consumer warpgroups x 64)
constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 40;  // 128 * 40 + 256 * 232 = 64,512 <= 65,536
constexpr int kConsumerRegs = 232;

template <int HD, int BN, int STAGES>
__host__ __device__ constexpr int smem_bytes() {
    return 1024 + kBM * HD * 2 + 2 * STAGES * BN * HD * 2 + 8 * (2 + 4 * STAGES);
}

// ---- wgmma wrappers ----------------------------------------------------------------------------------------------
// Operand lists of 32 and 64 fp32 accumulators ("+f", %0 ..), spelled once.
#define SMEMTILE_FA_D8(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define SMEMTILE_FA_D32(i) SMEMTILE_FA_D8(i), SMEMTILE_FA_D8(i + 8), SMEMTILE_FA_D8(i + 16), SMEMTILE_FA_D8(i + 24)
#define SMEMTILE_FA_D64 SMEMTILE_FA_D32(0), SMEMTILE_FA_D32(32)
#define SMEMTILE_FA_R32                                                                                 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SMEMTILE_FA_R64                                                                                          \
    SMEMTILE_FA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
                    "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// SS: A and B from shared memory, both K-major (no transpose). RS: A from 4 registers, B from shared memory
// transposed (MN-major). The operand numbers after the accumulators are spelled per N.
template <int N, bool BF16>
struct Mma;

#define SMEMTILE_FA_MMA(N, BF16, TY, REGS, OPS, DA, DB, P, A0, A1, A2, A3, RB, RP)                                 \
    template <>                                                                                                  \
    struct Mma<N, BF16> {                                                                                        \
        __device__ __forceinline__ static void ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, \
                                                  int scale_d) {                                                 \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                       \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS                    \
                         "}, %" #DA ", %" #DB ", p, 1, 1, 0, 0;\n}\n"                                           \
                         : OPS                                                                                   \
                         : "l"(da), "l"(db), "r"(scale_d));                                                      \
        }                                                                                                        \
        __device__ __forceinline__ static void rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, \
                                                  int scale_d) {                                                 \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #RP ", 0;\n"                                      \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, {%" #A0        \
                         ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #RB ", p, 1, 1, 1;\n}\n"                          \
                         : OPS                                                                                   \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));                  \
        }                                                                                                        \
    };
SMEMTILE_FA_MMA(64, false, "f16", SMEMTILE_FA_R32, SMEMTILE_FA_D32(0), 32, 33, 34, 32, 33, 34, 35, 36, 37)
SMEMTILE_FA_MMA(64, true, "bf16", SMEMTILE_FA_R32, SMEMTILE_FA_D32(0), 32, 33, 34, 32, 33, 34, 35, 36, 37)
SMEMTILE_FA_MMA(128, false, "f16", SMEMTILE_FA_R64, SMEMTILE_FA_D64, 64, 65, 66, 64, 65, 66, 67, 68, 69)
SMEMTILE_FA_MMA(128, true, "bf16", SMEMTILE_FA_R64, SMEMTILE_FA_D64, 64, 65, 66, 64, 65, 66, 67, 68, 69)
#undef SMEMTILE_FA_MMA
#undef SMEMTILE_FA_R64
#undef SMEMTILE_FA_R32
#undef SMEMTILE_FA_D64
#undef SMEMTILE_FA_D32
#undef SMEMTILE_FA_D8

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from reading (or rewriting) accumulators above the wgmma.wait_group that makes them valid.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// K-major operand, rows of 128 bytes, 128B swizzle: start >> 4, LBO 1 (unused), SBO 1024 >> 4, layout type 1.
__device__ __forceinline__ unsigned long long desc_k128(unsigned addr) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// MN-major operand (64 n contiguous per 128-byte row, one row per k), 128B swizzle: LBO = bytes between 64-column
// panels of n, SBO = 1024 bytes between groups of 8 k rows.
__device__ __forceinline__ unsigned long long desc_mn128(unsigned addr, unsigned panel_bytes) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
           (static_cast<unsigned long long>((panel_bytes >> 4) & 0x3FFF) << 16) | (64ull << 32) | (1ull << 62);
}

// ---- mbarriers and TMA --------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Wait until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\nFA_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra FA_WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// One box of a 4-D map {c0 (head dim), c1 (seq), c2 (head), c3 (batch)} into shared memory at dst.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TensorMap* map, int c0, int c1, int c2, int c3,
                                            unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

// Named barriers (bar.sync / bar.arrive with a thread count: the arriving warps do not wait).
__device__ __forceinline__ void bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void prefetch_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

template <bool BF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned w;
    if constexpr (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(hi), "f"(lo));
    }
    return w;
}

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx: 2^x, exp2(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// KV tiles a q tile starting at row m0 visits: every tile of seq_kv, or with CAUSAL those holding a key <= the
// tile's last row (min(m0 + 128, seq_q) - 1).
template <int BN, int CAUSAL>
__device__ __forceinline__ int kv_tiles(int m0, int seq_q, int seq_kv) {
    const int all = (seq_kv + BN - 1) / BN;
    if (!CAUSAL) return all;
    const int last_row = min(m0 + kBM, seq_q) - 1;
    return min(all, last_row / BN + 1);
}

// ---- per-tile pieces of a consumer warpgroup --------------------------------------------------------------------
// S = Q K^T for one KV tile: HD / 16 wgmmas (no fence / commit here). q_wg: the warpgroup's 64 rows of Qs panel 0;
// k_stage: the stage's K panel 0.
template <int HD, int BN, int QPANEL, bool BF16>
__device__ __forceinline__ void qk(float (&sacc)[BN / 2], unsigned q_wg, unsigned k_stage) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const unsigned long long da = desc_k128(q_wg + (kk / 4) * QPANEL + (kk % 4) * 32);
        const unsigned long long db = desc_k128(k_stage + (kk / 4) * (BN * 128) + (kk % 4) * 32);
        Mma<BN, BF16>::ss(sacc, da, db, kk > 0 ? 1 : 0);
    }
}

// O += P V for one KV tile: BN / 16 wgmmas, A = P fragments, B = V (MN-major, 16 KV rows = 2048 bytes per k-step).
template <int HD, int BN, bool BF16>
__device__ __forceinline__ void pv(float (&oacc)[HD / 2], const unsigned (&pa)[BN / 16][4], unsigned v_stage) {
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) Mma<HD, BF16>::rs(oacc, pa[t], desc_mn128(v_stage + t * 2048, BN * 128), 1);
}

// Mask (KV columns >= seq_kv; with CAUSAL columns > row) where the tile needs it, then the online softmax of both
// rows of the thread: p = exp2(scale2 * s - m_new) in place, m and this thread's part of l updated, alpha =
// exp2(m_old - m_new) returned for the rescale of O. n0: the tile's first KV column; row0: the thread's first row
// (the second is row0 + 8); wg_row0: the warpgroup's first row.
template <int BN, int CAUSAL>
__device__ __forceinline__ void softmax_tile(float (&sacc)[BN / 2], float (&m_run)[2], float (&l_run)[2],
                                             float (&alpha)[2], int n0, int row0, int wg_row0, int seq_kv,
                                             float scale2, int lane) {
    const float NEG_INF = -__int_as_float(0x7f800000);
    const bool tail = n0 + BN > seq_kv;
    const bool diag = CAUSAL && n0 + BN - 1 > wg_row0;
    if (tail || diag) {
#pragma unroll
        for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = n0 + 8 * jj + 2 * (lane % 4) + e;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    if (col >= seq_kv || (CAUSAL && col > row0 + 8 * hh)) sacc[4 * jj + 2 * hh + e] = NEG_INF;
                }
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float mx = NEG_INF;
#pragma unroll
        for (int jj = 0; jj < BN / 8; ++jj) mx = fmaxf(mx, fmaxf(sacc[4 * jj + 2 * hh], sacc[4 * jj + 2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes of a quad share the row
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[hh], mx * scale2);
        const float m_use = m_new == NEG_INF ? 0.f : m_new;  // nothing visible yet: p = 0, no inf - inf
        alpha[hh] = fast_exp2(m_run[hh] - m_use);
        m_run[hh] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float p = fast_exp2(fmaf(sacc[4 * jj + 2 * hh + e], scale2, -m_use));
                sacc[4 * jj + 2 * hh + e] = p;
                sum += p;
            }
        }
        l_run[hh] = l_run[hh] * alpha[hh] + sum;
    }
}

template <int HD>
__device__ __forceinline__ void rescale(float (&oacc)[HD / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int jj = 0; jj < HD / 8; ++jj) {
        oacc[4 * jj + 0] *= alpha[0];
        oacc[4 * jj + 1] *= alpha[0];
        oacc[4 * jj + 2] *= alpha[1];
        oacc[4 * jj + 3] *= alpha[1];
    }
}

// P (the S accumulators after softmax_tile) as the A fragments of the BN / 16 k-steps of O += P V.
template <int BN, bool BF16>
__device__ __forceinline__ void to_a(const float (&sacc)[BN / 2], unsigned (&pa)[BN / 16][4]) {
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[t][i] = pack2<BF16>(sacc[8 * t + 2 * i], sacc[8 * t + 2 * i + 1]);
    }
}

// Keeps the A fragments live (and unmodified) until the wgmma.wait_group after the wgmmas that read them.
template <int BN>
__device__ __forceinline__ void fence_a(unsigned (&pa)[BN / 16][4]) {
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(pa[t][i])::"memory");
    }
}

}  // namespace fa
}  // namespace smemtile

// OVERLAP 0: per KV tile S, wait, softmax, O += P V, wait (the two consumer warpgroups interleave on their own).
// OVERLAP 1 (FA3's intra-warpgroup pipelining): S_{j} and O += P_{j-1} V_{j-1} are issued back to back; the
// softmax of tile j runs while the P V wgmmas of tile j - 1 are in flight; O is rescaled after they complete.
// OVERLAP 2: OVERLAP 1 with the two consumer warpgroups taking turns to issue their GEMMs (FA3's ping-pong).
template <typename T, int HD, int BN, int STAGES, int CAUSAL, int OVERLAP>
__global__ void __launch_bounds__(smemtile::fa::kThreads, 1)
    flash_attn_wgmma(const T* q, const T* k, const T* v, T* o, float* lse,
                     const __grid_constant__ smemtile::fa::TensorMap tm_q,
                     const __grid_constant__ smemtile::fa::TensorMap tm_k,
                     const __grid_constant__ smemtile::fa::TensorMap tm_v, int batch, int heads, int seq_q,
                     int seq_kv, long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,
                     long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss,
                     long long o_sh, float scale) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // nvcc -arch=sm_90a also embeds compute_90 PTX, where wgmma and setmaxnreg do not exist; never runs.
    __trap();
#else
    namespace fa = smemtile::fa;
    constexpr bool BF16 = fa::same<T, smemtile::bf16>::value;
    constexpr int BM = fa::kBM;
    constexpr int PANELS = HD / 64;        // 128-byte panels per row
    constexpr int Q_BYTES = BM * HD * 2;   // the Q tile
    constexpr int Q_PANEL = BM * 128;      // one 64-column panel of it
    constexpr int KV_BYTES = BN * HD * 2;  // one stage of K (or V)
    constexpr int KV_PANEL = BN * 128;     // one 64-column panel of it
    constexpr int SACC = BN / 2;           // S accumulators per thread
    constexpr int OACC = HD / 2;           // O accumulators per thread
    static_assert(fa::same<T, smemtile::f16>::value || fa::same<T, smemtile::bf16>::value,
                  "T must be smemtile::f16 or smemtile::bf16");
    static_assert(HD == 64 || HD == 128, "HD: 64 or 128");
    static_assert(BN == 64 || BN == 128, "BN: 64 or 128 KV rows per tile");
    static_assert(STAGES >= 2 && STAGES <= 4, "STAGES: 2..4");
    static_assert(CAUSAL == 0 || CAUSAL == 1, "CAUSAL: 0 or 1");
    static_assert(OVERLAP >= 0 && OVERLAP <= 2,
                  "OVERLAP: 0 (simple), 1 (softmax under the P V wgmmas) or 2 (1 with ping-pong consumers)");
    static_assert(fa::smem_bytes<HD, BN, STAGES>() <= 232448, "shared memory: at most 227 KB per block");
    (void)q, (void)k, (void)v, (void)q_sb, (void)q_ss, (void)q_sh, (void)k_sb, (void)k_ss, (void)k_sh, (void)v_sb,
        (void)v_ss, (void)v_sh;

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (fa::smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned q_s = base;
    const unsigned k_s = q_s + Q_BYTES;
    const unsigned v_s = k_s + STAGES * KV_BYTES;
    const unsigned bars = v_s + STAGES * KV_BYTES;
    const unsigned q_full = bars, q_empty = bars + 8u;
    auto k_full = [&](int s) { return bars + 8u * (2 + s); };
    auto v_full = [&](int s) { return bars + 8u * (2 + STAGES + s); };
    auto k_empty = [&](int s) { return bars + 8u * (2 + 2 * STAGES + s); };
    auto v_empty = [&](int s) { return bars + 8u * (2 + 3 * STAGES + s); };

    const int tid = threadIdx.x;
    const int wgi = tid / 128;
    const int m_tiles = (seq_q + BM - 1) / BM;
    const int items = m_tiles * batch * heads;  // work items (q tile, batch * head)
    // Item t: head bh = t / m_tiles (consecutive items share a head: its K and V stay in L2), q tile counted from
    // the last (with CAUSAL the longest first). The grid is items CTAs (one each) or fewer (persistent: CTA x
    // takes items x, x + gridDim.x, ...); the ring positions and barrier phases carry over from item to item.
    auto decode = [&](int t, int& b, int& h, int& m0, int& n_kv) {
        const int bh = t / m_tiles;
        b = bh / heads;
        h = bh % heads;
        m0 = (m_tiles - 1 - t % m_tiles) * BM;
        n_kv = fa::kv_tiles<BN, CAUSAL>(m0, seq_q, seq_kv);
    };

    if (tid == 0) {
        fa::mbar_init(q_full, 1);
        fa::mbar_init(q_empty, 2);  // both consumers are done with the Q tile (their last S = Q K^T completed)
        for (int s = 0; s < STAGES; ++s) {
            fa::mbar_init(k_full(s), 1);
            fa::mbar_init(v_full(s), 1);
            fa::mbar_init(k_empty(s), 2);  // one arrival per consumer warpgroup
            fa::mbar_init(v_empty(s), 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        fa::prefetch_map(&tm_q);
        fa::prefetch_map(&tm_k);
        fa::prefetch_map(&tm_v);
    }
    __syncthreads();

    if (wgi == 0) {
        // ---- producer: per item Q (after q_empty), K_0, then K_{j+1} before V_j ----
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(fa::kProducerRegs));
        if (tid == 0) {
            int g0 = 0;  // ring position of the item's first KV tile
            int it = 0;  // items of this CTA so far
            for (int t = blockIdx.x; t < items; t += gridDim.x, ++it) {
                int b, h, m0, n_kv;
                decode(t, b, h, m0, n_kv);
                auto load_k = [&](int j) {
                    const int g = g0 + j, s = g % STAGES;
                    fa::mbar_wait(k_empty(s), ((g / STAGES) & 1) ^ 1);  // the first round passes
                    fa::mbar_expect_tx(k_full(s), KV_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        fa::tma_load_4d(k_s + s * KV_BYTES + p * KV_PANEL, &tm_k, 64 * p, j * BN, h, b, k_full(s));
                };
                auto load_v = [&](int j) {
                    const int g = g0 + j, s = g % STAGES;
                    fa::mbar_wait(v_empty(s), ((g / STAGES) & 1) ^ 1);
                    fa::mbar_expect_tx(v_full(s), KV_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        fa::tma_load_4d(v_s + s * KV_BYTES + p * KV_PANEL, &tm_v, 64 * p, j * BN, h, b, v_full(s));
                };
                if (it > 0) fa::mbar_wait(q_empty, (it - 1) & 1);  // the previous item's Q is no longer read
                fa::mbar_expect_tx(q_full, Q_BYTES);
#pragma unroll
                for (int p = 0; p < PANELS; ++p)
                    fa::tma_load_4d(q_s + p * Q_PANEL, &tm_q, 64 * p, m0, h, b, q_full);
                if (n_kv > 0) load_k(0);
                for (int j = 0; j < n_kv; ++j) {
                    if (j + 1 < n_kv) load_k(j + 1);
                    load_v(j);
                }
                g0 += n_kv;
            }
        }
    } else {
        // ---- consumers ----
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(fa::kConsumerRegs));
        const int c = wgi - 1;
        const int ct = tid - wgi * 128;
        const int w = ct / 32, lane = ct % 32;
        const unsigned q_wg = q_s + c * 64 * 128;          // its 64 rows of Qs (panel 0)
        const float scale2 = scale * 1.4426950408889634f;  // exp(x) = exp2(x * log2 e)
        const float NEG_INF = -__int_as_float(0x7f800000);
        const bool vec = (reinterpret_cast<unsigned long long>(o) & 3) == 0 && (o_ss % 2) == 0 &&
                         (o_sh % 2) == 0 && (o_sb % 2) == 0;
        int g0 = 0;  // ring position of the item's first KV tile (the producer's count)
        int it = 0;
        for (int t = blockIdx.x; t < items; t += gridDim.x, ++it) {
            int b, h, m0, n_kv;
            decode(t, b, h, m0, n_kv);
            const int row0 = m0 + c * 64 + 16 * w + lane / 4;  // this thread's rows: row0 and row0 + 8
            const int wg_row0 = m0 + c * 64;                   // the warpgroup's first row
            auto stage = [&](int j) { return (g0 + j) % STAGES; };
            auto parity = [&](int j) { return static_cast<unsigned>(((g0 + j) / STAGES) & 1); };
            // after the item's last S completed (and K released): the Q tile may be reloaded
            auto release_k = [&](int j) {
                if (ct == 0) {
                    fa::mbar_arrive(k_empty(stage(j)));
                    if (j == n_kv - 1) fa::mbar_arrive(q_empty);
                }
            };

            float oacc[OACC];
#pragma unroll
            for (int i = 0; i < OACC; ++i) oacc[i] = 0.f;
            float m_run[2] = {NEG_INF, NEG_INF};  // running row max of scale2 * s
            float l_run[2] = {0.f, 0.f};          // this thread's part of the running row sum
            float sacc[SACC];
            unsigned pa[BN / 16][4];
            float alpha[2];

            fa::mbar_wait(q_full, it & 1);
            if (n_kv == 0 && ct == 0) fa::mbar_arrive(q_empty);  // seq_kv 0: nothing reads Q
            if constexpr (OVERLAP == 0) {
                for (int j = 0; j < n_kv; ++j) {
                    const int s = stage(j);
                    fa::mbar_wait(k_full(s), parity(j));
                    fa::wgmma_fence();
                    fa::qk<HD, BN, Q_PANEL, BF16>(sacc, q_wg, k_s + s * KV_BYTES);
                    fa::wgmma_commit();
                    fa::wgmma_wait<0>();
                    fa::fence_acc(sacc);
                    release_k(j);
                    fa::softmax_tile<BN, CAUSAL>(sacc, m_run, l_run, alpha, j * BN, row0, wg_row0, seq_kv, scale2,
                                                 lane);
                    fa::rescale<HD>(oacc, alpha);
                    fa::to_a<BN, BF16>(sacc, pa);
                    fa::mbar_wait(v_full(s), parity(j));
                    fa::wgmma_fence();
                    fa::pv<HD, BN, BF16>(oacc, pa, v_s + s * KV_BYTES);
                    fa::wgmma_commit();
                    fa::wgmma_wait<0>();
                    fa::fence_acc(oacc);
                    fa::fence_a<BN>(pa);
                    if (ct == 0) fa::mbar_arrive(v_empty(s));
                }
            } else {
                // OVERLAP 2: turn t of this consumer = the t-th block of GEMM issues (n_kv + 1 per item)
                auto turn_begin = [&]() {
                    if constexpr (OVERLAP == 2) fa::bar_sync(1 + c, 256);
                };
                auto turn_end = [&](bool last) {
                    if constexpr (OVERLAP == 2) {
                        if (!(last && c == 1)) fa::bar_arrive(2 - c, 256);  // the other consumer's barrier
                    }
                };
                if (OVERLAP == 2 && c == 1 && n_kv > 0) fa::bar_arrive(1, 256);  // consumer 0 takes the first turn
                if (n_kv > 0) {
                    fa::mbar_wait(k_full(stage(0)), parity(0));
                    turn_begin();
                    fa::wgmma_fence();
                    fa::qk<HD, BN, Q_PANEL, BF16>(sacc, q_wg, k_s + stage(0) * KV_BYTES);
                    fa::wgmma_commit();
                    turn_end(false);
                    fa::wgmma_wait<0>();
                    fa::fence_acc(sacc);
                    release_k(0);
                    fa::softmax_tile<BN, CAUSAL>(sacc, m_run, l_run, alpha, 0, row0, wg_row0, seq_kv, scale2, lane);
                    fa::to_a<BN, BF16>(sacc, pa);  // O is still 0: no rescale
                }
                for (int j = 1; j < n_kv; ++j) {
                    const int s = stage(j), sp = stage(j - 1);
                    // both waits before the fence: a wait loop between the fence and a wgmma makes ptxas insert
                    // another fence (C7519); V_{j-1} was issued right after K_j, so it is there as soon as K_j is
                    fa::mbar_wait(k_full(s), parity(j));
                    fa::mbar_wait(v_full(sp), parity(j - 1));
                    fa::fence_acc(oacc);  // the rescale and the P conversion happen before the fence, not after
                    fa::fence_a<BN>(pa);
                    turn_begin();
                    fa::wgmma_fence();
                    fa::qk<HD, BN, Q_PANEL, BF16>(sacc, q_wg, k_s + s * KV_BYTES);
                    fa::wgmma_commit();
                    fa::pv<HD, BN, BF16>(oacc, pa, v_s + sp * KV_BYTES);
                    fa::wgmma_commit();
                    turn_end(false);
                    fa::wgmma_wait<1>();  // S_j is done; P_{j-1} V_{j-1} may still run
                    fa::fence_acc(sacc);
                    release_k(j);
                    fa::softmax_tile<BN, CAUSAL>(sacc, m_run, l_run, alpha, j * BN, row0, wg_row0, seq_kv, scale2,
                                                 lane);
                    fa::wgmma_wait<0>();
                    fa::fence_acc(oacc);
                    fa::fence_a<BN>(pa);
                    if (ct == 0) fa::mbar_arrive(v_empty(sp));
                    fa::rescale<HD>(oacc, alpha);
                    fa::to_a<BN, BF16>(sacc, pa);
                }
                if (n_kv > 0) {
                    const int sp = stage(n_kv - 1);
                    fa::mbar_wait(v_full(sp), parity(n_kv - 1));
                    fa::fence_acc(oacc);
                    fa::fence_a<BN>(pa);
                    turn_begin();
                    fa::wgmma_fence();
                    fa::pv<HD, BN, BF16>(oacc, pa, v_s + sp * KV_BYTES);
                    fa::wgmma_commit();
                    turn_end(true);
                    fa::wgmma_wait<0>();
                    fa::fence_acc(oacc);
                    fa::fence_a<BN>(pa);
                    if (ct == 0) fa::mbar_arrive(v_empty(sp));
                }
            }
            g0 += n_kv;

            // ---- epilogue: O / l with the user's strides, LSE ----
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                float l = l_run[hh];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                const int row = row0 + 8 * hh;
                if (row >= seq_q) continue;
                const float inv = l > 0.f ? 1.f / l : 0.f;
                T* dst = o + static_cast<long long>(b) * o_sb + static_cast<long long>(row) * o_ss +
                         static_cast<long long>(h) * o_sh;
#pragma unroll
                for (int jj = 0; jj < HD / 8; ++jj) {
                    const int col = 8 * jj + 2 * (lane % 4);
                    const unsigned packed =
                        fa::pack2<BF16>(oacc[4 * jj + 2 * hh] * inv, oacc[4 * jj + 2 * hh + 1] * inv);
                    if (vec) {
                        *reinterpret_cast<unsigned*>(dst + col) = packed;
                    } else {
                        dst[col].bits = static_cast<unsigned short>(packed & 0xFFFFu);
                        dst[col + 1].bits = static_cast<unsigned short>(packed >> 16);
                    }
                }
                if (lane % 4 == 0) {
                    // natural log: (m + log2 l) * ln 2, m in units of log2 (scale2 * s)
                    const float lv = l > 0.f ? (m_run[hh] + __log2f(l)) * 0.6931471805599453f : NEG_INF;
                    lse[(static_cast<long long>(b) * heads + h) * seq_q + row] = lv;
                }
            }
        }
    }
#endif
}

#endif  // SMEMTILE_FA_SM90_CUH
