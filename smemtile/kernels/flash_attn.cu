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


// ==================================================================================================================
// PATH 1: flash_attn_wgmma, FlashAttention forward for Hopper (sm_90a only), the FlashAttention-3-style path
// (issue 32). Measured standalone first (bench/flash_attn_sm90: fa_sm90.cuh is this kernel as the H200 checked it,
// with its own TensorMap type); the family instantiates it for PATH 1 (smemtile/families/flash_attn/hopper.py).
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
// smemtile::fa (PATH 0's in smemtile::fattn) so the file can share a translation unit with the other families'
// generated files. The sm_90a instructions are emitted only where __CUDA_ARCH_FEAT_SM90_ALL is defined
// (SMEMTILE_FA_SM90A): an sm_80 build of this file parses them and never instantiates the kernel (its body is
// __trap() there).


namespace smemtile {
namespace fa {

// TensorMap: smemtile::TensorMap (smem_layout.cuh), the 128-byte CUtensorMap every family's TMA kernels take.

template <class A, class B>
struct same {
    static constexpr bool value = false;
};
template <class A>
struct same<A, A> {
    static constexpr bool value = true;
};

inline constexpr int kBM = 128;           // query rows per CTA (2 consumer warpgroups x 64)
inline constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups
inline constexpr int kProducerRegs = 40;  // 128 * 40 + 256 * 232 = 64,512 <= 65,536
inline constexpr int kConsumerRegs = 232;

template <int HD, int BN, int STAGES>
__host__ __device__ constexpr int smem_bytes() {
    return 1024 + kBM * HD * 2 + 2 * STAGES * BN * HD * 2 + 8 * (2 + 4 * STAGES);
}

// The helpers below exist only where the sm_90a instructions do (the host pass parses them; an sm_80 or plain
// sm_90 device pass leaves them out: the kernel's body is __trap() there).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SMEMTILE_FA_SM90A 1
#else
#define SMEMTILE_FA_SM90A 0
#endif
#if SMEMTILE_FA_SM90A

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

#endif  // SMEMTILE_FA_SM90A

}  // namespace fa
}  // namespace smemtile

// OVERLAP 0: per KV tile S, wait, softmax, O += P V, wait (the two consumer warpgroups interleave on their own).
// OVERLAP 1 (FA3's intra-warpgroup pipelining): S_{j} and O += P_{j-1} V_{j-1} are issued back to back; the
// softmax of tile j runs while the P V wgmmas of tile j - 1 are in flight; O is rescaled after they complete.
// OVERLAP 2: OVERLAP 1 with the two consumer warpgroups taking turns to issue their GEMMs (FA3's ping-pong).
template <typename T, int HD, int BN, int STAGES, int CAUSAL, int OVERLAP>
__global__ void __launch_bounds__(smemtile::fa::kThreads, 1)
    flash_attn_wgmma(const T* q, const T* k, const T* v, T* o, float* lse,
                     const __grid_constant__ smemtile::TensorMap tm_q,
                     const __grid_constant__ smemtile::TensorMap tm_k,
                     const __grid_constant__ smemtile::TensorMap tm_v, int batch, int heads, int seq_q,
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
        // exp(x) = exp2(x * log2 e); scale 0 means 1/sqrt(HD), as in PATH 0 (the family passes the problem's scale)
        const float scale2 = (scale == 0.f ? rsqrtf((float)HD) : scale) * 1.4426950408889634f;
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
