// smemtile kernel family: flash_attn (attention forward with the online softmax, fp16 / bf16 in, fp32
// accumulation; PATH 0: mma.sync.m16n8k16 + ldmatrix + a cp.async ring, sm_80+, the FlashAttention-2 schedule).
//
//     O[b, i, h, :] = sum_j softmax_j(scale * Q[b, i, h, :] . K[b, j, h, :] [+ causal mask]) V[b, j, h, :]
//     lse[b, h, i]  = log(sum_j exp(scale * Q[b, i, h, :] . K[b, j, h, :]))     (natural log, fp32)
//
//     q: [batch, seq_q, heads, HD], element (b, i, h, d) at q[b*q_sb + i*q_ss + h*q_sh + d]  (d contiguous)
//     k, v: [batch, seq_kv, heads, HD] with their own strides; o like q with its own; lse [batch, heads, seq_q]
//     contiguous float32. Strides in elements. causal: query i sees keys j <= i (top-left aligned, as torch's
//     scaled_dot_product_attention(is_causal=True)); scale 0 means 1/sqrt(HD).
//
// Template parameters (each checked by a static_assert that states its rule):
//   T          smemtile::f16 or smemtile::bf16 (q, k, v, o)
//   HD         head dimension, 64 or 128
//   BM         query rows per block = 16 * WARPS (each warp owns 16 rows: one m16 mma tile)
//   BN         keys per KV tile, 32, 64 or 128
//   STAGES     depth of the cp.async ring of KV tiles (K and V of one tile per stage), 1 to 3
//   WARPS      warps per block, 4 or 8
//   CAUSAL     0 or 1
//   PATH       0 (this kernel); 1 is reserved for the sm_90a path (wgmma, TMA) and refused here
//   PAD_x, SWZ_x_B/M/S (x = Q, K, V): the SmemTile layouts of Qs, Ks, Vs (defaults: Swizzle<3,3,log2(HD)-3>,
//              the conflict-free XOR of 16-byte chunks; PAD % 8 == 0, swizzle M >= 3)
//
// ---- Data flow ----------------------------------------------------------------------------------------------------
//   q --cp.async.cg 16 B (zero-fill past seq_q)--> Qs[BM][HD] --ldmatrix.x4, once--> Q A-fragments (registers)
//   k --cp.async.cg 16 B (zero-fill past seq_kv)--> Ks[BN][HD] } one stage of a STAGES-deep ring, one commit
//   v --cp.async.cg 16 B (zero-fill past seq_kv)--> Vs[BN][HD] } group per KV tile
//   S = Q K^T: ldmatrix.x4 of Ks (rows = keys: K^T is the column-major B operand), mma.sync, fp32 S in registers
//   online softmax in registers: t = S * scale * log2(e); m = max(m, rowmax t) (quad shuffles); p = 2^(t - m)
//     (ex2.approx); l = l * 2^(m_old - m) + rowsum p (per thread; the quad sums it once, at the end); O *= 2^(m_old - m)
//   P to 16-bit A fragments in registers: the m16n8 accumulator of keys 16kk..16kk+15 is the m16k16 A fragment
//   O += P V: ldmatrix.x4.trans of Vs (rows = keys, V is the row-major B operand), mma.sync
//   epilogue: O / l stored as 2-element pairs (rows past seq_q are not stored); lse = (m + log2(l)) * ln 2
//
// ---- Masks and tails ----------------------------------------------------------------------------------------------
//   keys j >= seq_kv get -inf (only the last tile can hold them; their K and V rows are zero-filled, so P * V
//   stays 0); causal: key j > query i gets -inf. The causal block stops at its last visible key,
//   min(seq_kv, q0 + BM): fully masked KV tiles are never loaded; only tiles crossing the diagonal (or the
//   seq_kv tail) run the masking code. Every query row sees key 0, so every row's max is finite after tile 0.
//   Causal blocks run in reverse order of their row blocks (the longest first: fewer idle SMs in the last wave).
//
// ---- Shared-memory accesses: lane -> (row, col), elements of 2 bytes (smemtile spec expressions) ------------------
// Notation: tid = threadIdx.x, lane = tid % 32, warp = tid / 32, THREADS = 32 * WARPS, CPR = HD / 8 chunks a row.
//   Q copy (cp.async 16 B), i in [0, BM*CPR/THREADS):         Qs row = (tid + i*THREADS) // CPR
//                                                                col = ((tid + i*THREADS) % CPR) * 8
//   K copy, V copy (cp.async 16 B), j in [0, BN*CPR/THREADS):  Ks/Vs as the Q copy, BN rows
//   Q fragments (ldmatrix.x4, once), kk in [0, HD/16):        Qs row = warp*16 + lane % 16, col = kk*16 + (lane // 16)*8
//   K fragments (ldmatrix.x4), nj in [0, BN/16), kk:          Ks row = nj*16 + lane % 8 + (lane // 16)*8
//                                                                col = kk*16 + ((lane // 8) % 2)*8
//   V fragments (ldmatrix.x4.trans), kk in [0, BN/16), nj in [0, HD/16):
//                                                             Vs row = kk*16 + lane % 16, col = nj*16 + (lane // 16)*8
// smemtile/families/flash_attn/__init__.py (FlashAttn.accesses) holds these as spec expressions, the family's one
// copy. An ldmatrix phase (8 lanes) reads 8 rows at one 16-byte column: with rows of 128 or 256 bytes all 8 land
// on one bank quad (8-way); Swizzle<3,3,S> (chunk c of row r stored at chunk c ^ (r % 8) of its 128-byte group)
// spreads them over all 32 banks, and a copy's 8 lanes (one row's 8 chunks of a group) stay a permutation.
//
// ---- Pipeline -----------------------------------------------------------------------------------------------------
//   prologue: Q (one commit group), then KV tiles 0 .. STAGES-2 (one group each, empty past the last tile)
//   wait_group(STAGES-1) + barrier: Q landed; every warp ldmatrix's its 16 rows of Q once
//   tile j: wait_group(STAGES-2) -> this thread's copies of tile j landed; __syncthreads() -> everyone's, and
//           every read of tile j-1 is done; issue tile j+STAGES-1 into slot (j-1) % STAGES, commit; compute tile j
//   STAGES 1: barrier, issue tile j, wait_group 0, barrier, compute (no overlap: the baseline the ring beats)
//
// ---- Resources and launch -----------------------------------------------------------------------------------------
// Shared memory (bytes, dynamic) = (BM*(HD+PAD_Q) + STAGES * BN * (2*HD + PAD_K + PAD_V)) * 2
// Launch: grid = (ceil(seq_q / BM), batch * heads, 1), block = (32 * WARPS, 1, 1).
// The kernel needs q, k, v, o 16-byte aligned and every stride a multiple of 8 elements (16-byte cp.async rows);
// the host helper refuses anything else; a misuse that reaches the kernel writes NaN to its O tile, no fault.
#include "smem_layout.cuh"

namespace smemtile {
namespace fattn {

template <typename X, typename Y>
struct same_type {
    static constexpr bool value = false;
};
template <typename X>
struct same_type<X, X> {
    static constexpr bool value = true;
};

__host__ __device__ constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }
// The conflict-free swizzle of rows of `cols` 2-byte elements (cols >= 64): Swizzle<3, 3, log2(cols) - 3>.
__host__ __device__ constexpr int swizzle_s(int cols) { return ilog2(cols) - 3; }

// offset(r + 16y, c + 16x) == (offset(r, c) ^ 16x) + 16y * stride for every lane's (r, c) of a fragment load
// (kind 0: r = lane % 16, c = (lane / 16) * 8; kind 1: r = lane % 8 + (lane / 16) * 8, c = ((lane / 8) % 2) * 8)
// over nx column and ny row steps: then one base offset per thread and an XOR per step address every fragment.
// Checked at compile time; where it fails (an odd padding) the kernel computes SmemTile::offset per load.
template <class L>
__host__ __device__ constexpr bool xor_steps_exact(int kind, int nx, int ny) {
    for (int lane = 0; lane < 32; ++lane) {
        const int r = kind == 0 ? lane % 16 : lane % 8 + (lane / 16) * 8;
        const int c = kind == 0 ? (lane / 16) * 8 : ((lane / 8) % 2) * 8;
        const int base = L::offset(r, c);
        for (int x = 0; x < nx; ++x)
            for (int y = 0; y < ny; ++y)
                if (L::offset(r + 16 * y, c + 16 * x) != ((base ^ (16 * x)) + 16 * y * L::kStride)) return false;
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
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    if constexpr (same_type<T, bf16>::value) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
}
// Two fp32 values as one 32-bit register of two 16-bit values (lo: the lower column), round to nearest even.
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned w;
    if constexpr (same_type<T, bf16>::value) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(hi), "f"(lo));
#endif
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(hi), "f"(lo));
    }
    return w;
}
__device__ __forceinline__ float ex2(float x) {  // 2^x; ex2.approx(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// log2(x) and 1/x, approximate (a few ulps): the epilogue's l is >= 1 (the row max contributes 2^0), so no
// denormal or zero reaches them; IEEE logf and division would branch on the value
__device__ __forceinline__ float lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <int HD, int BM, int BN, int STAGES, int PAD_Q, int PAD_K, int PAD_V>
struct FlashShape {
    static constexpr int kQElems = BM * (HD + PAD_Q);
    static constexpr int kKElems = BN * (HD + PAD_K);
    static constexpr int kVElems = BN * (HD + PAD_V);
    static constexpr int kStageBytes = (kKElems + kVElems) * 2;
    static constexpr int kSmemBytes = kQElems * 2 + STAGES * kStageBytes;
};

}  // namespace fattn
}  // namespace smemtile

// Defaults: bf16, head dimension 128, 64 query rows x 64 keys, 2 stages, 4 warps, not causal.
template <typename T = smemtile::bf16, int HD = 128, int BM = 64, int BN = 64, int STAGES = 2, int WARPS = 4,
          int CAUSAL = 0, int PATH = 0, int PAD_Q = 0, int SWZ_Q_B = 3, int SWZ_Q_M = 3,
          int SWZ_Q_S = smemtile::fattn::swizzle_s(HD), int PAD_K = 0, int SWZ_K_B = 3, int SWZ_K_M = 3,
          int SWZ_K_S = smemtile::fattn::swizzle_s(HD), int PAD_V = 0, int SWZ_V_B = 3, int SWZ_V_M = 3,
          int SWZ_V_S = smemtile::fattn::swizzle_s(HD)>
__global__ void __launch_bounds__(WARPS * 32)
flash_attn(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
           float* __restrict__ lse, int batch, int heads, int seq_q, int seq_kv, long long q_sb, long long q_ss,
           long long q_sh, long long k_sb, long long k_ss, long long k_sh, long long v_sb, long long v_ss,
           long long v_sh, long long o_sb, long long o_ss, long long o_sh, float scale) {
    namespace fa = smemtile::fattn;
    using Shape = fa::FlashShape<HD, BM, BN, STAGES, PAD_Q, PAD_K, PAD_V>;
    using LQ = smemtile::SmemTile<BM, HD, PAD_Q, SWZ_Q_B, SWZ_Q_M, SWZ_Q_S>;  // Qs[row][d]
    using LK = smemtile::SmemTile<BN, HD, PAD_K, SWZ_K_B, SWZ_K_M, SWZ_K_S>;  // Ks[key][d]
    using LV = smemtile::SmemTile<BN, HD, PAD_V, SWZ_V_B, SWZ_V_M, SWZ_V_S>;  // Vs[key][d]
    constexpr int THREADS = WARPS * 32;
    constexpr int CPR = HD / 8;          // 16-byte chunks per row
    constexpr int KD = HD / 16;          // k16 steps of S = Q K^T (and Q A-fragments)
    constexpr int NS = BN / 8;           // n8 tiles of S
    constexpr int KV = BN / 16;          // k16 steps of O += P V
    constexpr int NO = HD / 8;           // n8 tiles of O
    constexpr int Q_ITERS = BM * CPR / THREADS;
    constexpr int KV_ITERS = BN * CPR / THREADS;
    constexpr int ROWS = THREADS / CPR;  // rows one copy pass covers

    static_assert(fa::same_type<T, smemtile::f16>::value || fa::same_type<T, smemtile::bf16>::value,
                  "T (the q, k, v, o element type) must be smemtile::f16 or smemtile::bf16");
    static_assert(PATH == 0, "PATH 1 (the sm_90a wgmma/TMA path) is reserved and not built yet: use PATH 0");
    static_assert(HD == 64 || HD == 128, "HD (head dimension) must be 64 or 128");
    static_assert(WARPS == 4 || WARPS == 8, "WARPS must be 4 or 8");
    static_assert(BM == 16 * WARPS, "BM must be 16 * WARPS: each warp owns 16 query rows (one m16 mma tile)");
    static_assert(BN == 32 || BN == 64 || BN == 128, "BN (keys per KV tile) must be 32, 64 or 128");
    static_assert(STAGES >= 1 && STAGES <= 3, "STAGES (cp.async ring depth of KV tiles) must be 1 to 3");
    static_assert(CAUSAL == 0 || CAUSAL == 1, "CAUSAL must be 0 or 1");
    static_assert(THREADS % CPR == 0 && (BM * CPR) % THREADS == 0 && (BN * CPR) % THREADS == 0,
                  "the 16-byte chunks of the Q, K and V tiles must split evenly over the threads in whole rows");
    static_assert(PAD_Q % 8 == 0 && PAD_K % 8 == 0 && PAD_V % 8 == 0,
                  "padding must be a multiple of 8 elements: cp.async and ldmatrix rows are 16-byte aligned");
    static_assert((SWZ_Q_B == 0 || SWZ_Q_M >= 3) && (SWZ_K_B == 0 || SWZ_K_M >= 3) && (SWZ_V_B == 0 || SWZ_V_M >= 3),
                  "a swizzle must move whole 16-byte granules (M >= 3): cp.async writes and ldmatrix reads 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    static_assert(__CUDA_ARCH__ >= 800, "flash_attn PATH 0 needs sm_80 or newer (cp.async, bf16 mma.sync)");
#endif

    extern __shared__ __align__(128) unsigned char flash_attn_smem[];
    const unsigned sq = smemtile::smem_u32(flash_attn_smem);  // Qs, then STAGES x (Ks, Vs)
    const unsigned skv = sq + Shape::kQElems * 2;
    constexpr int K_BYTES = Shape::kKElems * 2;  // stage s: Ks at skv + s * kStageBytes, Vs right after it

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;  // accumulator row (and row + 8) and column pair of this lane
    const int bh = blockIdx.y;
    const int b = bh / heads, h = bh - b * heads;
    const int mblock = CAUSAL ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int q0 = mblock * BM;
    const int kv_end = CAUSAL ? min(seq_kv, q0 + BM) : seq_kv;  // keys past it are masked for every row here
    const int n_tiles = (kv_end + BN - 1) / BN;

    const unsigned short* qs = reinterpret_cast<const unsigned short*>(q) + b * q_sb + h * q_sh;
    const unsigned short* ks = reinterpret_cast<const unsigned short*>(k) + b * k_sb + h * k_sh;
    const unsigned short* vs = reinterpret_cast<const unsigned short*>(v) + b * v_sb + h * v_sh;
    unsigned short* os = reinterpret_cast<unsigned short*>(o) + b * o_sb + h * o_sh;

    {  // the host refuses these; a misuse is made visible (this block's O tile becomes NaN), never a fault
        const unsigned long long ptrs = reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(k) |
                                        reinterpret_cast<unsigned long long>(v) | reinterpret_cast<unsigned long long>(o);
        const long long strides = q_sb | q_ss | q_sh | k_sb | k_ss | k_sh | v_sb | v_ss | v_sh | o_sb | o_ss | o_sh;
        if ((ptrs & 15) != 0 || (strides & 7) != 0) {
            for (int e = tid; e < BM * HD; e += THREADS) {
                const int r = q0 + e / HD;
                if (r < seq_q) os[r * o_ss + e % HD] = 0x7fff;  // a NaN in both f16 and bf16
            }
            return;
        }
    }

    // ---- copies: chunk c = tid + i * THREADS of 8 elements, row c / CPR, column (c % CPR) * 8 -----------------
    const int c_row = tid / CPR, c_col = (tid % CPR) * 8;
    auto issue_q = [&]() {
#pragma unroll
        for (int i = 0; i < Q_ITERS; ++i) {
            const int r = c_row + i * ROWS;
            const bool ok = q0 + r < seq_q;
            fa::cp_async_16(sq + 2 * LQ::offset(r, c_col), ok ? qs + (q0 + r) * q_ss + c_col : qs, ok ? 16 : 0);
        }
    };
    auto issue_kv = [&](int tile, int slot) {
        const int kv0 = tile * BN;
        const unsigned sk = skv + slot * Shape::kStageBytes, sv = sk + K_BYTES;
#pragma unroll
        for (int i = 0; i < KV_ITERS; ++i) {
            const int r = c_row + i * ROWS;
            const bool ok = kv0 + r < seq_kv;
            const long long row = ok ? kv0 + r : 0;
            fa::cp_async_16(sk + 2 * LK::offset(r, c_col), ks + row * k_ss + c_col, ok ? 16 : 0);
            fa::cp_async_16(sv + 2 * LV::offset(r, c_col), vs + row * v_ss + c_col, ok ? 16 : 0);
        }
    };

    // ---- fragment addresses: one base per thread, an XOR (column step) and an add (row step) per load ----------
    constexpr bool K_XOR = fa::xor_steps_exact<LK>(1, KD, KV);
    constexpr bool V_XOR = fa::xor_steps_exact<LV>(0, NO / 2, KV);
    const int k_r = (lane & 7) + ((lane >> 4) << 3), k_c = ((lane >> 3) & 1) * 8;  // K fragment lane's row, col
    const int v_r = lane & 15, v_c = (lane >> 4) * 8;                                // V (and Q) fragment lane's
    const int k_base = LK::offset(k_r, k_c), v_base = LV::offset(v_r, v_c);
    auto k_off = [&](int nj, int kk) {
        return K_XOR ? (k_base ^ (16 * kk)) + 16 * nj * LK::kStride : LK::offset(k_r + 16 * nj, k_c + 16 * kk);
    };
    auto v_off = [&](int kk, int nj) {
        return V_XOR ? (v_base ^ (16 * nj)) + 16 * kk * LV::kStride : LV::offset(v_r + 16 * kk, v_c + 16 * nj);
    };

    // ---- prologue: Q, then KV tiles 0 .. STAGES-2 ------------------------------------------------------------------
    issue_q();
    fa::cp_async_commit();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) issue_kv(s, s);
        fa::cp_async_commit();
    }
    fa::cp_async_wait<STAGES - 1>();
    __syncthreads();
    unsigned fq[KD][4];  // Q A-fragments of this warp's 16 rows, every k16 step of HD
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
        fa::ldsm_x4<false>(sq + 2 * LQ::offset(warp * 16 + v_r, v_c + 16 * kk), fq[kk][0], fq[kk][1], fq[kk][2],
                           fq[kk][3]);

    float acc_o[NO][4];
#pragma unroll
    for (int j = 0; j < NO; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_o[j][e] = 0.f;
    const float NEG_INF = __int_as_float(0xff800000);
    float m_run[2] = {NEG_INF, NEG_INF}, l_run[2] = {0.f, 0.f};  // rows g and g + 8 (log2 units; l per thread)
    const float scale_log2 = (scale == 0.f ? rsqrtf((float)HD) : scale) * 1.4426950408889634f;
    const int row0 = q0 + warp * 16 + g;  // this lane's query rows: row0 and row0 + 8

    // ---- one KV tile: S, the online softmax, O += P V ------------------------------------------------------------
    auto compute = [&](int tile, int slot) {
        const int kv0 = tile * BN;
        const unsigned sk = skv + slot * Shape::kStageBytes, sv = sk + K_BYTES;
        float s[NS][4];
#pragma unroll
        for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk)
#pragma unroll
            for (int nj = 0; nj < BN / 16; ++nj) {
                unsigned b0, b1, b2, b3;  // b0, b1 of key tile 2nj; b2, b3 of 2nj + 1
                fa::ldsm_x4<false>(sk + 2 * k_off(nj, kk), b0, b1, b2, b3);
                fa::mma_16816<T>(s[2 * nj], fq[kk], b0, b1);
                fa::mma_16816<T>(s[2 * nj + 1], fq[kk], b2, b3);
            }
        const bool masked = kv0 + BN > seq_kv || (CAUSAL && kv0 + BN - 1 > q0);
#pragma unroll
        for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[j][e] * scale_log2;
                if (masked) {
                    const int col = kv0 + j * 8 + 2 * t4 + (e & 1), row = row0 + (e >> 1) * 8;
                    if (col >= seq_kv || (CAUSAL && col > row)) x = NEG_INF;
                }
                s[j][e] = x;
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = m_run[r];
#pragma unroll
            for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float use = mx == NEG_INF ? 0.f : mx;  // a row with no visible key yet: p = 0, no NaN
            corr[r] = fa::ex2(m_run[r] - use);
            m_run[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < NS; ++j) {
                s[j][2 * r] = fa::ex2(s[j][2 * r] - use);
                s[j][2 * r + 1] = fa::ex2(s[j][2 * r + 1] - use);
                sum += s[j][2 * r] + s[j][2 * r + 1];
            }
            l_run[r] = l_run[r] * corr[r] + sum;
        }
#pragma unroll
        for (int j = 0; j < NO; ++j) {
            acc_o[j][0] *= corr[0], acc_o[j][1] *= corr[0];
            acc_o[j][2] *= corr[1], acc_o[j][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < KV; ++kk) {
            // the accumulators of key tiles 2kk, 2kk + 1 are the A fragment of keys 16kk .. 16kk + 15
            const unsigned pa[4] = {fa::pack2<T>(s[2 * kk][0], s[2 * kk][1]), fa::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                    fa::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    fa::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int nj = 0; nj < HD / 16; ++nj) {
                unsigned b0, b1, b2, b3;  // b0, b1 of d tile 2nj; b2, b3 of 2nj + 1
                fa::ldsm_x4<true>(sv + 2 * v_off(kk, nj), b0, b1, b2, b3);
                fa::mma_16816<T>(acc_o[2 * nj], pa, b0, b1);
                fa::mma_16816<T>(acc_o[2 * nj + 1], pa, b2, b3);
            }
        }
    };

    // ---- main loop -------------------------------------------------------------------------------------------------
    if constexpr (STAGES == 1) {
        for (int j = 0; j < n_tiles; ++j) {
            if (j > 0) __syncthreads();  // every warp is done reading tile j-1
            issue_kv(j, 0);
            fa::cp_async_commit();
            fa::cp_async_wait<0>();
            __syncthreads();
            compute(j, 0);
        }
    } else {
        int slot = 0;
        for (int j = 0; j < n_tiles; ++j) {
            fa::cp_async_wait<(STAGES >= 2 ? STAGES - 2 : 0)>();
            __syncthreads();  // tile j landed for everyone; everyone is done with tile j-1 (its slot is free)
            const int next = j + STAGES - 1;
            if (next < n_tiles) issue_kv(next, slot == 0 ? STAGES - 1 : slot - 1);
            fa::cp_async_commit();
            compute(j, slot);
            slot = slot == STAGES - 1 ? 0 : slot + 1;
        }
    }
    fa::cp_async_wait<0>();  // nothing in flight when the block exits (the last groups are empty)

    // ---- epilogue: O / l, lse = (m + log2 l) ln 2 ------------------------------------------------------------------------
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = row0 + 8 * r;
        const float inv = fa::rcp(l);
        if (row < seq_q) {
            unsigned short* orow = os + row * o_ss + 2 * t4;
#pragma unroll
            for (int j = 0; j < NO; ++j)
                *reinterpret_cast<unsigned*>(orow + j * 8) = fa::pack2<T>(acc_o[j][2 * r] * inv, acc_o[j][2 * r + 1] * inv);
            if (t4 == 0) lse[(long long)bh * seq_q + row] = (m_run[r] + fa::lg2(l)) * 0.6931471805599453f;
        }
    }
}
