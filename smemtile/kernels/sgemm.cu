// smemtile kernel family: sgemm (fp32, FFMA; no tensor cores, so TF32 is never involved).
//
//     C = alpha * A * B + beta * C      A: M x K, B: K x N, C: M x N, all row-major with leading dimensions
//
// Any M, N, K: edge tiles are masked (zero-filled on load, guarded on store). beta == 0 never reads C
// (SPLIT_K > 1 adds into C; see Split K below). Unaligned A or B rows (K or N not a multiple of 4) either go
// through the 4-byte loops below or, with the family's REPACK, are first copied by smemtile_sgemm_repack into a
// workspace with 16-byte rows, the kernel then getting lda / ldb multiples of 4.
//
// Block tile BM x BN, K step BK. Warps tile the block as (BM / WM) x (BN / WN) with WM = 4 * TM, WN = 8 * TN:
// the 32 lanes of a warp form a 4 (m) x 8 (n) grid and each lane owns TM x TN accumulators, split into
// (TM / 4) x (TN / 4) sub-tiles of 4 x 4 spaced 16 rows and 32 columns apart. For every k the lane reads its
// A column part and B row part as float4s:
//
//     As[k][wm + lm*4 + i*16 .. +3]   i < TM/4      4 distinct float4 per instruction, each a 8-lane broadcast
//     Bs[k][wn + ln*4 + j*32 .. +3]   j < TN/4      8 distinct float4 per instruction: 128 contiguous bytes
//
// The lane grid is interleaved (lane bits 1,3 -> lm; bits 0,2,4 -> ln) so that every lane quad reads at most two
// distinct float4s: the hardware then serves the warp in halves (2 wavefronts per read instead of 4).
// The inner loop is conflict-free for any layout whose rows keep float4s whole (PAD % 4 == 0, swizzle M >= 2).
// A is stored transposed (k-major, As[BK][BM]) exactly so that those A reads are float4s along m.
//
// Global -> shared, per K step (one "stage"):
//   A, A_VEC = 1 (default): chunk c = tid + i * THREADS is the float4 A[m][k .. k+3], r = c / 2, m = r % BM,
//      k = (r / BM) * 8 + (c % 2) * 4. A warp loads 16 rows x 32 bytes (one full sector per row) into registers
//      and stores each float4 transposed, As[k+q][m] (four 4-byte stores): lanes hit 16 consecutive m at k and
//      k+4, conflict-free when the row stride is 4 mod 32 words (PAD = 4 with BM = 128), 2-way when dense.
//   A, A_VEC = 0: element e = tid + i * THREADS, kk = e % 8, r = e / 8, m = r % BM, k = (r / BM) * 8 + kk:
//      one 4-byte cp.async A[m][k] -> As[k][m] per element, 8 consecutive k of 4 rows per warp instruction
//      (k-major with stride BM: 8-way bank conflict when PAD = 0 and no swizzle). Holds no registers.
//   B: chunk c = tid + i * THREADS, k = c / (BN/4), n = (c % (BN/4)) * 4: 16-byte cp.async when B is 16-byte
//      aligned and ldb % 4 == 0 (checked at run time, uniform per launch), 4-byte copies otherwise.
//   Whole tiles take an unmasked path (every K tile but a partial last one, A and B 16-byte aligned): A rows
//   past M are clamped to row M-1 and B chunks past N zero-filled; those values only reach rows >= M or
//   columns >= N of C, which are never stored. The partial K tile, unaligned A or B and A_VEC = 0 take the
//   masked copies (zero-filled edges), except with RAGGED = 1 (the family sets it for problems whose K or N is
//   not a multiple of 4): unaligned whole tiles then take an unmasked loop of 4-byte copies, A through registers
//   as 8 consecutive k of 4 rows per warp instruction, B by 4-byte cp.async, edge rows and columns clamped
//   (0.86-0.90x cuBLAS at 2999x3001x3003 with 128x64 tiles against 0.73-0.80x masked; bench/NOTES.md, session 4).
//   It stays out of the kernel otherwise: its mere presence made ptxas schedule the aligned loop of 128x128
//   8x16 tiles 4-6 % slower.
//
// Pipeline, sm_80+ (CP_ASYNC): STAGES-deep ring of shared buffers.
//     prologue: tiles 0 .. STAGES-2 issued, one commit_group per tile (empty groups keep the count uniform)
//     loop t:   cp.async.wait_group(STAGES-2)    -> this thread's copies of tile t have landed
//               __syncthreads()                 -> everyone's have; everyone finished computing tile t-1
//               issue tile t+STAGES-1 into slot (t-1) % STAGES (B by cp.async; A by cp.async, or with A_VEC
//               into registers), commit_group
//               compute from slot t % STAGES
//               A_VEC: store the A registers into slot (t-1) % STAGES (read from step t+STAGES-1 on, after
//               the barriers in between)
//     The loop runs two or three times: unmasked copies while whole tiles remain (the 16-byte loop, or with
//     RAGGED the 4-byte one for unaligned A or B), then the masked copies and the drain.
// sm_70/75 (no CP_ASYNC): register double-buffering over two shared slots: the next tile's global loads go to
// registers before the current tile's math and are stored to the other slot after it; one barrier per step.
//
// Split K (SPLIT_K > 1): blockIdx.y = z computes the K range [z*kc, (z+1)*kc), kc = ceil(K / (BK*SPLIT_K))*BK,
// and adds alpha * its partial product into C with atomicAdd; beta is not applied: C must hold beta*C (zero for
// beta = 0) first, which smemtile_sgemm_splitk_prepare below does (the launch plan runs it before the GEMM).
// For small M (a few block rows) that keeps every SM busy.
//
// Blocks are ordered in groups of GROUP_M block-rows (as in Triton's matmul tutorial) so that consecutive
// blocks share A and B panels in L2.
//
// Shared memory (bytes) = STAGES * (BK * (BM + PAD_A) + BK * (BN + PAD_B)) * 4. Up to 48 KiB it is declared
// statically (ptxas reports it); above, it is dynamic and the host must call cudaFuncSetAttribute(
// MaxDynamicSharedMemorySize) before launching. Launch: grid = (ceil(M/BM) * ceil(N/BN), SPLIT_K),
// block = (BM/WM) * (BN/WN) * 32 threads.
//
// Registers: the default 16x8 thread tile (128 accumulators) needs about 227 registers: MIN_BLOCKS = 1, one block
// of 8 warps per SM. An 8x8 tile with MIN_BLOCKS = 2 gets 128 per thread (256 threads); its 64 accumulators,
// fragments and the A_VEC registers fit that exactly for BK = 8, STAGES = 2 on sm_90 (ptxas 13.0), while other
// stage counts or archs may spill a few values (the family's relax() then falls back to A_VEC = 0, then to
// MIN_BLOCKS = 1, for whatever the user left at its default).
#include "smem_layout.cuh"

namespace smemtile {

template <int BM, int BN, int BK, int TM, int TN, int STAGES, int PAD_A, int PAD_B>
struct SgemmShape {
    static constexpr int kWM = 4 * TM;  // warp tile rows: 4 lanes along m
    static constexpr int kWN = 8 * TN;  // warp tile columns: 8 lanes along n
    static constexpr int kThreads = (BM / kWM) * (BN / kWN) * 32;
    static constexpr int kStageFloats = BK * (BM + PAD_A) + BK * (BN + PAD_B);
    static constexpr int kSmemBytes = STAGES * kStageFloats * 4;
    static constexpr bool kStaticSmem = kSmemBytes <= kStaticSmemBytes;
};

namespace sg {  // sgemm's cp.async helpers (smem_u32 is in smem_layout.cuh)

// cp.async with a source size: bytes past src_bytes are zero-filled, so masked edges need no branch.
// (Only reachable from the CP_ASYNC branch; the guard keeps sm_70/75 builds free of sm_80 PTX.)
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, int src_bytes) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_16(float* dst, const float* src, int src_bytes) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace sg
}  // namespace smemtile

// Split K's preparation: C = beta * C, or exactly 0 for beta == 0 (C is not read then: NaN or garbage in C never
// leaks into the result). Grid-stride in both dimensions, so any grid the launch plan picks covers C.
extern "C" __global__ void smemtile_sgemm_splitk_prepare(float* __restrict__ C, int M, int N, int ldc, float beta) {
    for (int m = blockIdx.y; m < M; m += gridDim.y) {
        float* row = C + (long long)m * ldc;
        for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x)
            row[n] = beta == 0.f ? 0.f : beta * row[n];
    }
}

// Repacking (the family's REPACK): a copy of an operand whose rows are not 16-byte aligned (A when K % 4 != 0,
// B when N % 4 != 0) into a workspace with rows of ldd = ceil(cols / 4) * 4 floats, zero-filled past cols, so the
// GEMM that follows streams whole tiles through its 16-byte loop. One float4 of dst per thread (four 4-byte loads
// of src); blockIdx.y walks the rows (grid-stride, any grid covers the array).
extern "C" __global__ void smemtile_sgemm_repack(const float* __restrict__ src, int rows, int cols, int lds,
                                                 float* __restrict__ dst, int ldd) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (c >= ldd) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* s = src + (long long)r * lds + c;
        float4 v;
        v.x = c < cols ? s[0] : 0.f;
        v.y = c + 1 < cols ? s[1] : 0.f;
        v.z = c + 2 < cols ? s[2] : 0.f;
        v.w = c + 3 < cols ? s[3] : 0.f;
        *reinterpret_cast<float4*>(dst + (long long)r * ldd + c) = v;
    }
}

// Defaults = the family's (smemtile/families/sgemm), the fastest measured on the H200 (bench/NOTES.md).
template <int BM = 256, int BN = 128, int BK = 8, int TM = 16, int TN = 8, int STAGES = 3, bool CP_ASYNC = true,
          int PAD_A = 4, int SWZ_A_B = 0, int SWZ_A_M = 0, int SWZ_A_S = 0,
          int PAD_B = 0, int SWZ_B_B = 0, int SWZ_B_M = 0, int SWZ_B_S = 0, int GROUP_M = 8, int MIN_BLOCKS = 1,
          int A_VEC = 1, int SPLIT_K = 1, int RAGGED = 0>
__global__ void __launch_bounds__(smemtile::SgemmShape<BM, BN, BK, TM, TN, STAGES, PAD_A, PAD_B>::kThreads, MIN_BLOCKS)
sgemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda, const float* __restrict__ B, int ldb,
      float beta, float* __restrict__ C, int ldc) {
    using Shape = smemtile::SgemmShape<BM, BN, BK, TM, TN, STAGES, PAD_A, PAD_B>;
    using LA = smemtile::SmemTile<BK, BM, PAD_A, SWZ_A_B, SWZ_A_M, SWZ_A_S>;  // As[k][m], k-major
    using LB = smemtile::SmemTile<BK, BN, PAD_B, SWZ_B_B, SWZ_B_M, SWZ_B_S>;  // Bs[k][n]
    constexpr int THREADS = Shape::kThreads;
    constexpr int WM = Shape::kWM, WN = Shape::kWN;

    static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN must be multiples of 4: the inner loop reads float4s");
    static_assert(BM % WM == 0, "BM must be a multiple of the warp tile height WM = 4*TM (4 lanes along m)");
    static_assert(BN % WN == 0, "BN must be a multiple of the warp tile width WN = 8*TN (8 lanes along n)");
    static_assert(BM * BN == THREADS * TM * TN, "the threads' TM x TN register tiles must cover the BM x BN tile");
    static_assert(THREADS >= 32 && THREADS <= 1024, "a block needs 1 to 32 warps");
    static_assert(BK % 8 == 0, "BK must be a multiple of 8: A is copied in runs of 8 consecutive k");
    static_assert(A_VEC == 0 || A_VEC == 1, "A_VEC selects the A copy: 0 = 4-byte cp.async, 1 = float4 via registers");
    static_assert(A_VEC == 1 || (BM * BK) % THREADS == 0,
                  "every thread must copy the same number of A elements: BM*BK % threads == 0");
    static_assert(A_VEC == 0 || (BM * BK / 4) % THREADS == 0,
                  "every thread must copy the same number of A float4s: BM*BK/4 % threads == 0");
    static_assert((BK * BN / 4) % THREADS == 0, "every thread must copy the same number of B float4s: BK*BN/4 % threads == 0");
    static_assert(PAD_A % 4 == 0 && PAD_B % 4 == 0, "padding must be a multiple of 4 floats to keep float4 reads aligned");
    static_assert((SWZ_A_B == 0 || SWZ_A_M >= 2) && (SWZ_B_B == 0 || SWZ_B_M >= 2),
                  "a swizzle must move whole float4s (M >= 2) because the inner loop reads float4s");
    static_assert(STAGES >= 2, "the pipeline needs at least 2 shared-memory stages");
    static_assert(CP_ASYNC || STAGES == 2, "without cp.async the kernel double-buffers: STAGES must be 2");
    static_assert(GROUP_M >= 1, "GROUP_M (block rows per L2 group) must be at least 1");
    static_assert(SPLIT_K >= 1, "SPLIT_K (K slices, blockIdx.y) must be at least 1");
    static_assert(RAGGED == 0 || RAGGED == 1, "RAGGED: 1 compiles in the unmasked loop for unaligned A or B, 0 not");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    static_assert(!CP_ASYNC, "cp.async needs sm_80 or newer");
#endif

    constexpr int B_VEC_PER_THREAD = BK * BN / 4 / THREADS;
    constexpr int B_PER_THREAD = BK * BN / THREADS;

    // Shared memory: static up to 48 KiB, dynamic above (the host raises the limit).
    float* smem;
    if constexpr (Shape::kStaticSmem) {
        __shared__ __align__(16) float smem_static[Shape::kSmemBytes / 4];
        smem = smem_static;
    } else {
        extern __shared__ float4 smem_dynamic[];
        smem = reinterpret_cast<float*>(smem_dynamic);
    }
    auto As = [&](int slot) { return smem + slot * Shape::kStageFloats; };
    auto Bs = [&](int slot) { return smem + slot * Shape::kStageFloats + LA::kElems; };

    if constexpr (SPLIT_K > 1) {  // slice blockIdx.y: K range [kz, kz + kc), kc a multiple of BK
        const int kc = (K + BK * SPLIT_K - 1) / (BK * SPLIT_K) * BK;
        const int kz = blockIdx.y * kc;
        A += kz;  // kz % BK == 0 keeps A and B as aligned as they were
        B += (long long)kz * ldb;
        K = max(0, min(K - kz, kc));
    }

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;

    // Grouped block order (GROUP_M block rows share the B panels in L2).
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(grid_m - first_m, GROUP_M);
    const int block_m = first_m + (pid % per_group) % group_rows;
    const int block_n = (pid % per_group) / group_rows;
    const int m0 = block_m * BM, n0 = block_n * BN;

    const int warp_m = (warp / (BN / WN)) * WM, warp_n = (warp % (BN / WN)) * WN;
    // Lanes as a 4 (m) x 8 (n) grid, interleaved so that every lane quad holds 2 m x 2 n: each quad then reads
    // at most 2 distinct float4 of As and of Bs, the hardware serves the warp in halves, and each read costs
    // 2 wavefronts instead of 4 (lane bits 0,2,4 -> ln; bits 1,3 -> lm).
    const int ln = (lane & 1) | ((lane >> 1) & 2) | ((lane >> 2) & 4);
    const int lm = ((lane >> 1) & 1) | ((lane >> 2) & 2);
    const int a_col = warp_m + lm * 4;  // + i * 16
    const int b_col = warp_n + ln * 4;  // + j * 32

    const bool a_vec = (lda % 4 == 0) && ((reinterpret_cast<unsigned long long>(A) & 15) == 0);
    const bool b_vec = (ldb % 4 == 0) && ((reinterpret_cast<unsigned long long>(B) & 15) == 0);
    const int k_tiles = (K + BK - 1) / BK;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    auto compute = [&](const float* as, const float* bs) {
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM / 4; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(as + LA::offset(k, a_col + i * 16));
                a[4 * i] = v.x, a[4 * i + 1] = v.y, a[4 * i + 2] = v.z, a[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN / 4; ++j) {
                const float4 v = *reinterpret_cast<const float4*>(bs + LB::offset(k, b_col + j * 32));
                b[4 * j] = v.x, b[4 * j + 1] = v.y, b[4 * j + 2] = v.z, b[4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    };

    // ---- A copy coordinates (the same every K step) ------------------------------------------------------
    // A_VEC = 1: chunk c = tid + i * THREADS is the float4 A[m][k .. k+3] with r = c / 2, m = r % BM,
    //   k = (r / BM) * 8 + (c % 2) * 4: a warp reads 16 rows x 32 bytes (one sector per row) and stores the four
    //   floats transposed, As[k+q][m]: lanes hit m = 16 consecutive rows at k and k+4 (conflict-free when the
    //   row stride is 4 mod 32 floats, e.g. BM = 128 with PAD 4).
    // A_VEC = 0: element e = tid + i * THREADS, r = e / 8, m = r % BM, k = (r / BM) * 8 + e % 8 (4-byte cp.async).
    constexpr int A_LANE_K = A_VEC ? 2 : 8;                  // threads along one 8-deep k run of a row
    constexpr int A_ITEMS = A_VEC ? BM * BK / 4 / THREADS : BM * BK / THREADS;  // copies per thread per stage
    constexpr int A_ROWS_PER_PASS = THREADS / A_LANE_K;      // rows one copy index covers
    static_assert(BM % A_ROWS_PER_PASS == 0 || A_ROWS_PER_PASS % BM == 0,
                  "BM and threads/8 (threads/2 with A_VEC) must divide one another (A copy passes)");
    constexpr int A_PASSES = BM % A_ROWS_PER_PASS == 0 ? BM / A_ROWS_PER_PASS : 1;  // copies per k run
    constexpr int A_RUNS_PER_PASS = BM % A_ROWS_PER_PASS == 0 ? 1 : A_ROWS_PER_PASS / BM;
    const int a_m = (tid / A_LANE_K) % BM;
    const int a_k = (tid / A_LANE_K) / BM * 8 + (tid % A_LANE_K) * (A_VEC ? 4 : 1);
    // copy i: row a_m + a_moff(i), column a_k + a_koff(i) (compile-time offsets)
    auto a_moff = [](int i) { return (i % A_PASSES) * (BM % A_ROWS_PER_PASS == 0 ? A_ROWS_PER_PASS : 0); };
    auto a_koff = [](int i) { return (i / A_PASSES) * A_RUNS_PER_PASS * 8; };
    const float* a_src = A + (long long)(m0 + a_m) * lda + a_k;  // + k0 + a_moff(i) * lda + a_koff(i)

    // ---- B copy coordinates: chunk c = tid + j * THREADS, k = c / (BN/4), n = (c % (BN/4)) * 4 ------------
    const int b_k = tid / (BN / 4), b_n = (tid % (BN / 4)) * 4;
    static_assert(THREADS % (BN / 4) == 0, "threads must be a multiple of BN/4 (whole B rows per copy pass)");
    auto b_koff = [](int j) { return j * (THREADS / (BN / 4)); };

    // A tile kt -> registers (A_VEC): unmasked float4 loads for whole tiles, masked loads on the edges.
    float4 ra[A_VEC ? A_ITEMS : 1];
    auto load_a = [&](int kt) {
        const int k0 = kt * BK;
        {
#pragma unroll
            for (int i = 0; i < A_ITEMS; ++i) {
                const int m = m0 + a_m + a_moff(i), k = k0 + a_k + a_koff(i);
                const float* p = A + (long long)m * lda + k;
                const bool row = m < M;
                if (a_vec && row && k + 3 < K) {
                    ra[i] = *reinterpret_cast<const float4*>(p);
                } else {
                    ra[i].x = (row && k < K) ? p[0] : 0.f;
                    ra[i].y = (row && k + 1 < K) ? p[1] : 0.f;
                    ra[i].z = (row && k + 2 < K) ? p[2] : 0.f;
                    ra[i].w = (row && k + 3 < K) ? p[3] : 0.f;
                }
            }
        }
    };
    auto store_a = [&](float* as) {  // registers -> As[k .. k+3][m], transposed
#pragma unroll
        for (int i = 0; i < A_ITEMS; ++i) {
            const int m = a_m + a_moff(i), k = a_k + a_koff(i);
            as[LA::offset(k, m)] = ra[i].x;
            as[LA::offset(k + 1, m)] = ra[i].y;
            as[LA::offset(k + 2, m)] = ra[i].z;
            as[LA::offset(k + 3, m)] = ra[i].w;
        }
    };

    if constexpr (CP_ASYNC) {
        // issue(kt, slot): B tile kt by 16-byte cp.async (4-byte on unaligned B); A tile kt by 4-byte cp.async
        // (A_VEC = 0) or into registers (A_VEC = 1: store_a writes them to the slot after this step's math).
        auto issue = [&](int kt, int slot) {
            const int k0 = kt * BK;
            float* bs = Bs(slot);
            if constexpr (A_VEC) {
                load_a(kt);
            } else {
                float* as = As(slot);
#pragma unroll
                for (int i = 0; i < A_ITEMS; ++i) {
                    const int m = a_m + a_moff(i), k = a_k + a_koff(i);
                    const bool ok = (m0 + m < M) && (k0 + k < K);
                    const float* src = a_src + (long long)a_moff(i) * lda + (k0 + a_koff(i));
                    smemtile::sg::cp_async_4(as + LA::offset(k, m), ok ? src : A, ok ? 4 : 0);
                }
            }
            if (b_vec) {
#pragma unroll
                for (int j = 0; j < B_VEC_PER_THREAD; ++j) {
                    const int k = b_k + b_koff(j);
                    const int left = (k0 + k < K) ? N - (n0 + b_n) : 0;
                    const int bytes = left >= 4 ? 16 : (left > 0 ? left * 4 : 0);
                    const float* src = bytes ? B + (long long)(k0 + k) * ldb + (n0 + b_n) : B;
                    smemtile::sg::cp_async_16(bs + LB::offset(k, b_n), src, bytes);
                }
            } else {
#pragma unroll
                for (int i = 0; i < B_PER_THREAD; ++i) {
                    const int e = tid + i * THREADS;
                    const int k = e / BN, n = e % BN;
                    const bool ok = (k0 + k < K) && (n0 + n < N);
                    const float* src = ok ? B + (long long)(k0 + k) * ldb + (n0 + n) : B;
                    smemtile::sg::cp_async_4(bs + LB::offset(k, n), src, ok ? 4 : 0);
                }
            }
        };

        // Unmasked copies (tiles kt < fast_end): every K tile but a partial last one, when A and B are 16-byte
        // aligned. Edge rows of A are clamped to row M-1 and B chunks past column N are zero-filled or, when
        // wholly outside, read column 0: those values only reach rows >= M / columns >= N of C, never stored.
        // The pointers advance one K tile per issue, starting at tile STAGES-1 (the prologue issues 0..STAGES-2).
        const int fast_end = (A_VEC && a_vec && b_vec) ? K / BK : 0;
        const float* a_next[A_PASSES];
#pragma unroll
        for (int p = 0; p < A_PASSES; ++p)
            a_next[p] = A + (long long)min(m0 + a_m + a_moff(p), M - 1) * lda + a_k + (STAGES - 1) * BK;
        const int b_left = N - (n0 + b_n);  // columns this thread's chunks keep (same for every j)
        const int b_bytes = b_left >= 4 ? 16 : (b_left > 0 ? b_left * 4 : 0);
        const float* b_next = B + (long long)(b_k + (STAGES - 1) * BK) * ldb + (b_bytes ? n0 + b_n : 0);
        const long long b_step = (long long)BK * ldb;
        auto issue_fast = [&](int slot) {
            float* bs = Bs(slot);
#pragma unroll
            for (int i = 0; i < A_ITEMS; ++i)
                ra[i] = *reinterpret_cast<const float4*>(a_next[i % A_PASSES] + a_koff(i));
#pragma unroll
            for (int j = 0; j < B_VEC_PER_THREAD; ++j)
                smemtile::sg::cp_async_16(bs + LB::offset(b_k + b_koff(j), b_n), b_next + (long long)b_koff(j) * ldb, b_bytes);
#pragma unroll
            for (int p = 0; p < A_PASSES; ++p) a_next[p] += BK;
            b_next += b_step;
        };

        // Prologue: STAGES-1 tiles in flight, one group each.
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < k_tiles) {
                issue(s, s);
                if constexpr (A_VEC) store_a(As(s));
            }
            smemtile::sg::cp_async_commit();
        }
        int read_slot = 0, write_slot = STAGES - 1;
        int kt = 0;
        if constexpr (!RAGGED) {  // (a RAGGED kernel is built for lda = K or ldb = N not a multiple of 4)
            for (; kt + STAGES - 1 < fast_end; ++kt) {  // steady state: unmasked, a tile issued every step
                smemtile::sg::cp_async_wait<STAGES - 2>();  // tile kt (this thread's copies) has landed
                __syncthreads();                        // all copies landed; slot write_slot no longer read
                issue_fast(write_slot);
                smemtile::sg::cp_async_commit();
                compute(As(read_slot), Bs(read_slot));
                store_a(As(write_slot));  // read from step kt + STAGES - 1 on, after later barriers
                read_slot = (read_slot + 1 == STAGES) ? 0 : read_slot + 1;
                write_slot = (write_slot + 1 == STAGES) ? 0 : write_slot + 1;
            }
        }
        if constexpr (RAGGED && A_VEC) {
            // Whole tiles of a RAGGED kernel (built for lda = K or ldb = N not a multiple of 4; the 16-byte loop
            // above is compiled out): unmasked copies without float4 loads of A. A goes through registers in the
            // A_VEC = 0 mapping, element e = tid + i * THREADS, r = e / 8, m = r % BM, k = (r / BM) * 8 + e % 8:
            // a warp instruction reads 8 consecutive k of 4 rows (4-8 sectors, where the four 4-byte loads of an
            // A_VEC float4 touch 16 rows each) and its transposed store As[k][m] is conflict-free for a row
            // stride of 4 mod 32 words (PAD 4). (A 4-byte cp.async of the same mapping measured slower: the
            // copy's shared writes follow the global sectors, 4-8 wavefronts each.) Rows past M read row M-1
            // (clamped): their values only reach rows of C that are never stored. B: 16-byte copies when B is
            // aligned; else one 4-byte cp.async per element, e = tid + i * THREADS -> Bs[e / BN][e % BN], its
            // column clamped to N-1 the same way.
            constexpr int A0_ROWS_PER_PASS = THREADS / 8;
            static_assert((BM * BK) % THREADS == 0 && (BM % A0_ROWS_PER_PASS == 0 || A0_ROWS_PER_PASS % BM == 0),
                          "RAGGED = 1 copies A in runs of 8 k per thread: BM*BK % threads == 0 and BM, threads/8 "
                          "dividing one another");
            static_assert(THREADS % BN == 0 || BN % THREADS == 0,
                          "RAGGED = 1 copies B one element per thread: threads and BN must divide one another");
            constexpr int A0_ITEMS = BM * BK / THREADS;
            constexpr int A0_PASSES = BM % A0_ROWS_PER_PASS == 0 ? BM / A0_ROWS_PER_PASS : 1;
            constexpr int A0_RUNS_PER_PASS = BM % A0_ROWS_PER_PASS != 0 ? A0_ROWS_PER_PASS / BM : 1;
            constexpr int B4_COLS = BN > THREADS ? BN / THREADS : 1;  // columns one thread copies
            auto a0_moff = [](int i) { return (i % A0_PASSES) * (BM % A0_ROWS_PER_PASS == 0 ? A0_ROWS_PER_PASS : 0); };
            auto a0_koff = [](int i) { return (i / A0_PASSES) * A0_RUNS_PER_PASS * 8; };
            const int a0_m = (tid / 8) % BM, a0_k = (tid / 8) / BM * 8 + tid % 8;
            const int a0_last = M - 1 - (m0 + a0_m);  // row offsets past it are clamped (negative: row M-1)
            const float* a0_next = A + (long long)(m0 + a0_m) * lda + a0_k + (STAGES - 1) * BK;
            const float* b4_next = B + (long long)((STAGES - 1) * BK + (BN > THREADS ? 0 : tid / BN)) * ldb;
            int b4_col[B4_COLS];
#pragma unroll
            for (int c = 0; c < B4_COLS; ++c) b4_col[c] = min(n0 + tid % BN + c * THREADS, N - 1);
            float ra0[A0_ITEMS];
            auto load_a0 = [&]() {
#pragma unroll
                for (int i = 0; i < A0_ITEMS; ++i)
                    ra0[i] = a0_next[(long long)min(a0_moff(i), a0_last) * lda + a0_koff(i)];
                a0_next += BK;
            };
            auto store_a0 = [&](float* as) {  // registers -> As[k][m]: 8 k x 4 m per warp instruction
#pragma unroll
                for (int i = 0; i < A0_ITEMS; ++i) as[LA::offset(a0_k + a0_koff(i), a0_m + a0_moff(i))] = ra0[i];
            };
            auto issue_b = [&](float* bs) {
                if (b_vec) {
#pragma unroll
                    for (int j = 0; j < B_VEC_PER_THREAD; ++j)
                        smemtile::sg::cp_async_16(bs + LB::offset(b_k + b_koff(j), b_n), b_next + (long long)b_koff(j) * ldb, b_bytes);
                    b_next += b_step;
                } else {
#pragma unroll
                    for (int i = 0; i < B_PER_THREAD; ++i) {
                        // e = tid + i * THREADS: row e / BN, column tid % BN + c * THREADS
                        const int k = BN > THREADS ? (i * THREADS) / BN : tid / BN + (i * THREADS) / BN;
                        const int c = BN > THREADS ? ((i * THREADS) % BN) / THREADS : 0;
                        const int krow = BN > THREADS ? k : (i * THREADS) / BN;  // b4_next holds tid / BN
                        smemtile::sg::cp_async_4(bs + LB::offset(k, tid % BN + c * THREADS), b4_next + (long long)krow * ldb + b4_col[c], 4);
                    }
                    b4_next += b_step;
                }
            };
            for (; kt + STAGES - 1 < K / BK; ++kt) {  // steady state: unmasked, A without float4 loads
                smemtile::sg::cp_async_wait<STAGES - 2>();
                __syncthreads();
                load_a0();
                issue_b(Bs(write_slot));
                smemtile::sg::cp_async_commit();
                compute(As(read_slot), Bs(read_slot));
                store_a0(As(write_slot));
                read_slot = (read_slot + 1 == STAGES) ? 0 : read_slot + 1;
                write_slot = (write_slot + 1 == STAGES) ? 0 : write_slot + 1;
            }
        }
        for (; kt < k_tiles; ++kt) {  // the rest: masked copies (partial K tile, unaligned A or B), drain
            smemtile::sg::cp_async_wait<STAGES - 2>();  // tile kt (this thread's copies) has landed
            __syncthreads();                        // all copies landed; slot write_slot no longer read
            const bool more = kt + STAGES - 1 < k_tiles;
            if (more) issue(kt + STAGES - 1, write_slot);
            smemtile::sg::cp_async_commit();
            compute(As(read_slot), Bs(read_slot));
            if constexpr (A_VEC) {
                if (more) store_a(As(write_slot));
            }
            read_slot = (read_slot + 1 == STAGES) ? 0 : read_slot + 1;
            write_slot = (write_slot + 1 == STAGES) ? 0 : write_slot + 1;
        }
        smemtile::sg::cp_async_wait<0>();
    } else {
        float rs[A_VEC ? 1 : A_ITEMS];  // A elements (A_VEC = 0)
        float4 rb[B_VEC_PER_THREAD];
        float rbs[B_PER_THREAD];
        auto load = [&](int kt) {
            const int k0 = kt * BK;
            if constexpr (A_VEC) {
                load_a(kt);
            } else {
#pragma unroll
                for (int i = 0; i < A_ITEMS; ++i) {
                    const int m = a_m + a_moff(i), k = a_k + a_koff(i);
                    rs[i] = (m0 + m < M && k0 + k < K) ? a_src[(long long)a_moff(i) * lda + k0 + a_koff(i)] : 0.f;
                }
            }
            if (b_vec) {
#pragma unroll
                for (int j = 0; j < B_VEC_PER_THREAD; ++j) {
                    const int k = b_k + b_koff(j);
                    const float* src = B + (long long)(k0 + k) * ldb + (n0 + b_n);
                    const int left = (k0 + k < K) ? N - (n0 + b_n) : 0;
                    if (left >= 4) {
                        rb[j] = *reinterpret_cast<const float4*>(src);
                    } else {
                        rb[j] = make_float4(left > 0 ? src[0] : 0.f, left > 1 ? src[1] : 0.f, left > 2 ? src[2] : 0.f, 0.f);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < B_PER_THREAD; ++i) {
                    const int e = tid + i * THREADS;
                    const int k = e / BN, n = e % BN;
                    rbs[i] = (k0 + k < K && n0 + n < N) ? B[(long long)(k0 + k) * ldb + (n0 + n)] : 0.f;
                }
            }
        };
        auto store = [&](int slot) {
            float* as = As(slot);
            float* bs = Bs(slot);
            if constexpr (A_VEC) {
                store_a(as);
            } else {
#pragma unroll
                for (int i = 0; i < A_ITEMS; ++i) as[LA::offset(a_k + a_koff(i), a_m + a_moff(i))] = rs[i];
            }
            if (b_vec) {
#pragma unroll
                for (int j = 0; j < B_VEC_PER_THREAD; ++j)
                    *reinterpret_cast<float4*>(bs + LB::offset(b_k + b_koff(j), b_n)) = rb[j];
            } else {
#pragma unroll
                for (int i = 0; i < B_PER_THREAD; ++i) {
                    const int e = tid + i * THREADS;
                    bs[LB::offset(e / BN, e % BN)] = rbs[i];
                }
            }
        };

        if (k_tiles > 0) {
            load(0);
            store(0);
        }
        __syncthreads();
        int slot = 0;
        for (int kt = 0; kt < k_tiles; ++kt) {
            if (kt + 1 < k_tiles) load(kt + 1);  // global loads in flight during the math
            compute(As(slot), Bs(slot));
            slot ^= 1;
            if (kt + 1 < k_tiles) store(slot);  // the other slot: last read before the previous barrier
            __syncthreads();
        }
    }

    // Epilogue: C = alpha * acc + beta * C, float4 where the row is aligned and whole. Split K: every slice
    // adds alpha * acc with atomics (beta is ignored: the caller scales C by beta, or zeroes it, beforehand).
    if constexpr (SPLIT_K > 1) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + a_col + (i / 4) * 16 + (i % 4);
            if (m >= M) continue;
            float* crow = C + (long long)m * ldc;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int n = n0 + b_col + (j / 4) * 32 + (j % 4);
                if (n < N) atomicAdd(crow + n, alpha * acc[i][j]);
            }
        }
        return;
    }
    const bool c_vec = (ldc % 4 == 0) && ((reinterpret_cast<unsigned long long>(C) & 15) == 0);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + a_col + (i / 4) * 16 + (i % 4);
        if (m >= M) continue;
        float* crow = C + (long long)m * ldc;
#pragma unroll
        for (int j4 = 0; j4 < TN / 4; ++j4) {
            const int n = n0 + b_col + j4 * 32;
            float v[4];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) v[jj] = alpha * acc[i][4 * j4 + jj];
            if (c_vec && n + 3 < N) {
                float4* p = reinterpret_cast<float4*>(crow + n);
                if (beta != 0.f) {
                    const float4 old = *p;
                    v[0] += beta * old.x, v[1] += beta * old.y, v[2] += beta * old.z, v[3] += beta * old.w;
                }
                *p = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) {
                    if (n + jj < N) crow[n + jj] = beta != 0.f ? v[jj] + beta * crow[n + jj] : v[jj];
                }
            }
        }
    }
}
