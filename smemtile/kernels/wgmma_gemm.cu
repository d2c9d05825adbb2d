// smemtile kernel family: wgmma_gemm (Hopper, sm_90a only): C = A * B^T with TMA, mbarriers and wgmma.
//
//     A: M x K row-major, leading dimension lda (elements, lda * 2 % 16 == 0: TMA's 16-byte global strides)
//     B: N x K row-major (K-major: nn.Linear's weight layout; C = A @ B.T), leading dimension ldb, same rule
//     C: M x N row-major, leading dimension ldc; f16 or bf16 like A and B; fp32 accumulation
//
// Template parameters (each checked by a static_assert):
//   T            smemtile::f16 or smemtile::bf16 (raw 16-bit patterns; __half / __nv_bfloat16 pointers are passed
//                reinterpret_cast: same size and layout)
//   BM, BN       block tile; BK is 64 (one 128-byte swizzle atom row of 16-bit elements). A consumer warpgroup owns
//                WG_M = BM / CONSUMERS rows (MI = WG_M / 64 wgmma row blocks) and all BN columns: MI * BN / 2 fp32
//                accumulators per thread (<= 128)
//   STAGES       mbarrier ring depth (2..8)
//   CONSUMERS    consumer warpgroups (1 or 2)
//   CLUSTER      CTAs per cluster along M (1 or 2); with 2 the pair shares B: each CTA loads half of the B tile
//                and multicasts it to both (cp.async.bulk.tensor .multicast::cluster)
//   WS           1: warp specialisation, warpgroup 0 is the producer (one thread issues TMA), then CONSUMERS
//                consumer warpgroups; 0: every warpgroup computes and thread 0 also issues the loads, STAGES - 1
//                ahead, after it released the stage it refills
//   INFLIGHT     0: a consumer waits for its wgmma group (wgmma.wait_group 0) and releases the stage; 1: it keeps
//                one group in flight (wait_group 1) and releases the previous stage, so the tensor cores always
//                have the next stage's MMAs queued
//   EPI          0: accumulators -> C with 4-byte (or 2-byte) global stores straight from registers; 1: stmatrix into
//                a 128B-swizzled staging tile, then a TMA store per 64-column panel (c_tma), or, when C's row
//                stride is not a multiple of 16 bytes, coalesced masked stores from the staging tile; 2: the same in
//                two passes of BN / 2 columns through a staging tile half the size (one more stage fits)
//   GROUP_M      tile order: GROUP_M cluster rows (of CLUSTER * BM rows) per group, column by column inside it
//   SETMAXNREG   1 (WS only): the producer warpgroup gives registers back (setmaxnreg.dec 40) and the consumers
//                take them (setmaxnreg.inc, up to 240)
// The grid is the launch plan's: one cluster per tile, or a persistent grid of fewer clusters that loop over the
// tiles in the same order (the kernel is the same; only the grid differs).
//
// ---- Data flow (one CTA) -------------------------------------------------------------------------------------------
//   producer thread:  wait empty[s] (parity) -> mbarrier.arrive.expect_tx full[s], (BM + BN) * 128 bytes
//                     -> cp.async.bulk.tensor A box {64, BM} -> As[s]; B box {64, BN / CLUSTER} -> Bs[s] (+ rank half)
//   consumer WG c:    wait full[s] -> wgmma.fence -> 4 x MI wgmma.mma_async.m64nBNk16 (descriptors below) -> commit
//                     -> wait_group INFLIGHT -> one thread arrives on empty[s'] of every CTA of the cluster
//   epilogue:         EPI 0: registers -> global; EPI 1: stmatrix.x4 -> Cs -> fence.proxy.async -> TMA store
//
// ---- Shared memory (dynamic, aligned up to 1024 bytes at run time) ----------------------------------------------
//   As[STAGES][BM][64], Bs[STAGES][BN][64] T         TMA SWIZZLE_128B: 16-byte chunk c of row r at r*128 + (c ^ r%8)*16
//   Cs[CONSUMERS][BN/64/EPI][WG_M][64] T (EPI 1, 2)  the same 128B swizzle (the TMA store reads it with that mode)
//   full[STAGES], empty[STAGES] u64 mbarriers        full: 1 arrival + the stage's bytes; empty: CONSUMERS * CLUSTER
// Every tile starts on a 1024-byte boundary (BM, BN, WG_M multiples of 8 rows of 128 bytes).
//
// ---- wgmma shared-memory descriptors (K-major, 128B swizzle) -----------------------------------------------------
//   bits 0-13 start address >> 4, 16-29 LBO >> 4 (1: unused for swizzled K-major), 32-45 SBO >> 4 (1024 B: 8 rows
//   of 128 B), 62-63 layout type 1 (128B). k-step kk of a stage adds kk * 32 bytes to the start address (inside the
//   swizzle atom: the hardware applies the XOR on the final address, as TMA did).
//
// ---- Shared-memory accesses, lane -> (row, col) (smemtile spec expressions; Python: smemtile/families/wgmma_gemm) --
//   The tensor cores read 8-row x 16-byte core matrices; they are described as the phases of ldmatrix.x4:
//     A, warp w of consumer c, row block mi, k-step kk:  As row = c*WG_M + mi*64 + (w%4)*16 + lane%16
//                                                            col = kk*16 + (lane//16)*8
//     B, column block nj (16 rows of n), k-step kk:       Bs row = nj*16 + lane%16, col = kk*16 + (lane//16)*8
//   Epilogue stmatrix.x4 (EPI 1, 2), warp w of consumer c, mi, column pair q (16 columns; pass = q's half with EPI 2):
//     Cs row = (c*(BN/64/EPI) + ((2q + lane//16)//8) % (BN/64/EPI))*WG_M + mi*64 + (w%4)*16 + ((lane//8)%2)*8 + lane%8
//        col = ((2q + lane//16) % 8) * 8
//   TMA writes (As, Bs) and reads (Cs) whole boxes through the async proxy: no lane addresses.
// Under the 128B swizzle every ldmatrix/stmatrix phase (8 rows x 16 B at one logical chunk) hits 8 distinct
// 16-byte chunk positions = all 32 banks: conflict-free (`smemtile analyze` shows all four modes).
//
// Builds with NVRTC and the shared header alone (no CUDA headers): PTX through inline asm, sm_90a for wgmma and
// setmaxnreg.

#include "smem_layout.cuh"

namespace smemtile {

// smemtile::f16 / smemtile::bf16 (the raw bits) come from smem_layout.cuh.
// smemtile::TensorMap (a CUtensorMap's 128 bytes) comes from smem_layout.cuh too.

namespace wg {

template <class A, class B>
struct same {
    static constexpr bool value = false;
};
template <class A>
struct same<A, A> {
    static constexpr bool value = true;
};

template <int N, bool BF16>
struct Wgmma;

// One wgmma.mma_async m64nNk16 per (N, type): N / 2 fp32 accumulators per thread as "+f" operands %0 .. %N/2-1,
// then the A and B descriptors and the scale-d predicate. The operand lists are spelled once, in groups of 32.
#define SMEMTILE_WG_D8(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define SMEMTILE_WG_D32(i) SMEMTILE_WG_D8(i), SMEMTILE_WG_D8(i + 8), SMEMTILE_WG_D8(i + 16), SMEMTILE_WG_D8(i + 24)
#define SMEMTILE_WG_D64 SMEMTILE_WG_D32(0), SMEMTILE_WG_D32(32)
#define SMEMTILE_WG_D96 SMEMTILE_WG_D64, SMEMTILE_WG_D32(64)
#define SMEMTILE_WG_D128 SMEMTILE_WG_D96, SMEMTILE_WG_D32(96)
#define SMEMTILE_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SMEMTILE_WG_R1 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SMEMTILE_WG_R2 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define SMEMTILE_WG_R3 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define SMEMTILE_WG_R64 SMEMTILE_WG_R0 ", " SMEMTILE_WG_R1
#define SMEMTILE_WG_R96 SMEMTILE_WG_R64 ", " SMEMTILE_WG_R2
#define SMEMTILE_WG_R128 SMEMTILE_WG_R96 ", " SMEMTILE_WG_R3
// N, the type (f16 / bf16), the accumulator names and operands, then the operand numbers of the predicate and
// the two descriptors (N / 2 + 2, N / 2, N / 2 + 1)
#define SMEMTILE_WGMMA(N, BF16, TY, REGS, OPS, P, DA, DB)                                                   \
    template <>                                                                                              \
    struct Wgmma<N, BF16> {                                                                                  \
        __device__ __forceinline__ static void mma(float (&d)[N / 2], unsigned long long da,                 \
                                                   unsigned long long db, int scale_d) {                     \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                   \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS                \
                         "}, %" #DA ", %" #DB ", p, 1, 1, 0, 0;\n}\n"                                       \
                         : OPS                                                                               \
                         : "l"(da), "l"(db), "r"(scale_d));                                                  \
        }                                                                                                    \
    };
SMEMTILE_WGMMA(64, false, "f16", SMEMTILE_WG_R0, SMEMTILE_WG_D32(0), 34, 32, 33)
SMEMTILE_WGMMA(128, false, "f16", SMEMTILE_WG_R64, SMEMTILE_WG_D64, 66, 64, 65)
SMEMTILE_WGMMA(192, false, "f16", SMEMTILE_WG_R96, SMEMTILE_WG_D96, 98, 96, 97)
SMEMTILE_WGMMA(256, false, "f16", SMEMTILE_WG_R128, SMEMTILE_WG_D128, 130, 128, 129)
SMEMTILE_WGMMA(64, true, "bf16", SMEMTILE_WG_R0, SMEMTILE_WG_D32(0), 34, 32, 33)
SMEMTILE_WGMMA(128, true, "bf16", SMEMTILE_WG_R64, SMEMTILE_WG_D64, 66, 64, 65)
SMEMTILE_WGMMA(192, true, "bf16", SMEMTILE_WG_R96, SMEMTILE_WG_D96, 98, 96, 97)
SMEMTILE_WGMMA(256, true, "bf16", SMEMTILE_WG_R128, SMEMTILE_WG_D128, 130, 128, 129)
#undef SMEMTILE_WGMMA
#undef SMEMTILE_WG_R128
#undef SMEMTILE_WG_R96
#undef SMEMTILE_WG_R64
#undef SMEMTILE_WG_R0
#undef SMEMTILE_WG_R1
#undef SMEMTILE_WG_R2
#undef SMEMTILE_WG_R3
#undef SMEMTILE_WG_D128
#undef SMEMTILE_WG_D96
#undef SMEMTILE_WG_D64
#undef SMEMTILE_WG_D32
#undef SMEMTILE_WG_D8

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Wait until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_LOOP:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_LOOP;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// Arrive on the barrier at the same offset in CTA `rank` of the cluster (a CTA's own rank: a local arrival).
// Default semantics (release at CTA scope): the stage's only readers were this warpgroup's wgmmas, complete after
// wgmma.wait_group; a .release.cluster arrive would cost a GPU-wide MEMBAR per stage (seen in the SASS).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(rank)
        : "memory");
}

__device__ __forceinline__ void mbar_arrive_local(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync() {  // every thread of every CTA of the cluster (not .aligned)
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// The same box into the same offset of every CTA in `mask`; each destination's barrier at `bar`'s offset gets
// the bytes.
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const TensorMap* map, int c0, int c1, unsigned bar,
                                                   unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
        : "memory");
}

__device__ __forceinline__ void tma_store(const TensorMap* map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void prefetch_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// K-major operand of rows x 128 bytes, 128B swizzle: start >> 4, LBO 1 (unused), SBO 1024 >> 4, layout type 1.
__device__ __forceinline__ unsigned long long desc_128b(unsigned addr) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// Keeps the compiler from moving reads of the accumulators above the wgmma.wait_group that makes them valid
// (the asynchronous MMA writes them behind the compiler's back).
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
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

__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

// Tile t of the cluster grid in grouped order: GROUP_M cluster rows per group, column-major inside a group.
template <int GROUP_M>
__device__ __forceinline__ void tile_of(int t, int rows, int cols, int& r, int& c) {
    const int per_group = GROUP_M * cols;
    const int first = (t / per_group) * GROUP_M;
    const int height = min(rows - first, GROUP_M);
    const int in_group = t % per_group;
    r = first + in_group % height;
    c = in_group / height;
}

}  // namespace wg
}  // namespace smemtile

// Repack of a 16-bit operand whose rows TMA cannot read (a leading dimension that is not a multiple of 8 elements,
// or a base pointer that is not 16-byte aligned): rows x cols elements at src (leading dimension lds) copied into
// dst with leading dimension ldd (a multiple of 8, dst 256-byte aligned: the launch's workspace). The tensor map
// then reads dst; its dimensions end at cols, so the ldd - cols elements of each row are never read. Launch: grid
// (ceil(cols / 2048), min(rows, 65535)), block 256; each thread copies 8 elements per row it visits.
extern "C" __global__ void smemtile_wgmma_repack(const void* __restrict__ src, int rows, int cols, long long lds,
                                                  void* __restrict__ dst, int ldd) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const unsigned short* s = static_cast<const unsigned short*>(src) + (long long)r * lds;
        unsigned short* d = static_cast<unsigned short*>(dst) + (long long)r * ldd;
        for (int c = (blockIdx.x * 256 + threadIdx.x) * 8; c < cols; c += gridDim.x * 256 * 8) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                if (c + e < cols) d[c + e] = s[c + e];
            }
        }
    }
}

template <typename T, int BM, int BN, int STAGES, int CONSUMERS, int CLUSTER, int WS, int INFLIGHT, int EPI,
          int GROUP_M, int SETMAXNREG>
__global__ void __launch_bounds__((CONSUMERS + WS) * 128, 1)
    wgmma_gemm(int M, int N, int K, const __grid_constant__ smemtile::TensorMap tmA, const __grid_constant__ smemtile::TensorMap tmB,
               const __grid_constant__ smemtile::TensorMap tmC, T* C, int ldc, int c_tma) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // A pass for a target without the sm_90a features (nvcc -arch=sm_90a also embeds compute_90 PTX): wgmma and
    // setmaxnreg do not exist there. The driver runs the sm_90a code on a 9.0 GPU; this stub never runs.
    __trap();
#else
    constexpr bool BF16 = smemtile::wg::same<T, smemtile::bf16>::value;
    constexpr int BK = 64;                   // one 128-byte swizzle row of 16-bit elements
    constexpr int WG_M = BM / CONSUMERS;     // rows per consumer warpgroup
    constexpr int MI = WG_M / 64;            // m64 wgmma blocks per consumer
    constexpr int ACC = BN / 2;              // fp32 accumulators per thread per m64 block
    constexpr int A_BYTES = BM * BK * 2;     // one stage of A
    constexpr int B_BYTES = BN * BK * 2;     // one stage of B (both halves with CLUSTER 2)
    constexpr int B_ROWS = BN / CLUSTER;     // B rows this CTA loads (and multicasts)
    constexpr int PANEL = WG_M * 128;        // one 64-column panel of a consumer's C staging tile
    constexpr int PRODUCER_REGS = 40;
    constexpr int CONSUMER_REGS = (65536 - 128 * PRODUCER_REGS) / (128 * CONSUMERS) / 8 * 8 > 240
                                      ? 240
                                      : (65536 - 128 * PRODUCER_REGS) / (128 * CONSUMERS) / 8 * 8;
    static_assert(smemtile::wg::same<T, smemtile::f16>::value || smemtile::wg::same<T, smemtile::bf16>::value, "T must be smemtile::f16 or smemtile::bf16");
    static_assert(CONSUMERS == 1 || CONSUMERS == 2, "CONSUMERS: 1 or 2 consumer warpgroups");
    static_assert(BM % (64 * CONSUMERS) == 0 && (MI == 1 || MI == 2), "BM / CONSUMERS must be 64 or 128 rows");
    static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN: 64, 128, 192 or 256 (wgmma n)");
    static_assert(MI * ACC <= 128, "at most 128 fp32 accumulators per thread (MI * BN / 2)");
    static_assert(STAGES >= 2 && STAGES <= 8, "STAGES: 2..8");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER: 1 or 2 CTAs");
    static_assert(B_ROWS % 8 == 0, "each CTA's part of the B tile is whole 8-row swizzle atoms");
    static_assert(WS == 0 || WS == 1, "WS: 0 or 1");
    static_assert(INFLIGHT == 0 || INFLIGHT == 1, "INFLIGHT: 0 or 1");
    static_assert(!(WS == 0 && INFLIGHT == 1), "WS 0 refills a stage after releasing it: INFLIGHT must be 0");
    static_assert(EPI >= 0 && EPI <= 2, "EPI: 0 (registers), 1 or 2 (stmatrix + TMA store, the tile in EPI passes)");
    static_assert(EPI == 0 || (BN / 64) % EPI == 0, "EPI 2 stages BN / 2 columns: whole 64-column panels");
    static_assert(SETMAXNREG == 0 || WS == 1, "SETMAXNREG needs a producer warpgroup (WS 1)");
    static_assert(GROUP_M >= 1, "GROUP_M >= 1");

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smemtile::wg::smem_u32(smem_raw) + 1023u) & ~1023u;  // the launch adds 1024 bytes of slack
    const unsigned a_s = base;
    const unsigned b_s = a_s + STAGES * A_BYTES;
    const unsigned c_s = b_s + STAGES * B_BYTES;
    const unsigned bars = c_s + (EPI ? CONSUMERS * WG_M * BN * 2 / EPI : 0);
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x;
    const int wgi = tid / 128;  // warpgroup
    const unsigned rank = CLUSTER > 1 ? smemtile::wg::cluster_rank() : 0u;
    const int m_tiles = (M + BM - 1) / BM, n_tiles = (N + BN - 1) / BN;
    const int rows = (m_tiles + CLUSTER - 1) / CLUSTER;  // cluster rows
    const int tiles = rows * n_tiles;
    const int clusters = gridDim.x / CLUSTER;
    const int cid = blockIdx.x / CLUSTER;
    const int nk = (K + BK - 1) / BK;
    const int my_tiles = cid < tiles ? (tiles - 1 - cid) / clusters + 1 : 0;
    const int iters = my_tiles * nk;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            smemtile::wg::mbar_init(full(s), 1);
            smemtile::wg::mbar_init(empty(s), CONSUMERS * CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        smemtile::wg::prefetch_map(&tmA);
        smemtile::wg::prefetch_map(&tmB);
        if (EPI) smemtile::wg::prefetch_map(&tmC);
    }
    if (CLUSTER > 1) {
        smemtile::wg::cluster_sync();  // the peer's barriers exist before any multicast or remote arrival reaches them
    } else {
        __syncthreads();
    }

    // Loads of iteration p (tile cid + (p / nk) * clusters, k block p % nk) into stage p % STAGES.
    auto produce = [&](int p) {
        const int s = p % STAGES;
        smemtile::wg::mbar_wait(empty(s), ((p / STAGES) & 1) ^ 1);  // the first round passes: the previous phase counts as done
        int tr, tc;
        smemtile::wg::tile_of<GROUP_M>(cid + (p / nk) * clusters, rows, n_tiles, tr, tc);
        const int m0 = (tr * CLUSTER + static_cast<int>(rank)) * BM, n0 = tc * BN, k0 = (p % nk) * BK;
        smemtile::wg::mbar_expect_tx(full(s), A_BYTES + B_BYTES);
        smemtile::wg::tma_load(a_s + s * A_BYTES, &tmA, k0, m0, full(s));
        if constexpr (CLUSTER > 1) {
            smemtile::wg::tma_load_multicast(b_s + s * B_BYTES + rank * (B_ROWS * 128), &tmB, k0, n0 + rank * B_ROWS, full(s),
                                   static_cast<unsigned short>((1u << CLUSTER) - 1));
        } else {
            smemtile::wg::tma_load(b_s + s * B_BYTES, &tmB, k0, n0, full(s));
        }
    };
    auto release = [&](int s) {
        for (int r = 0; r < CLUSTER; ++r) {
            if (CLUSTER > 1) {
                smemtile::wg::mbar_arrive_cluster(empty(s), r);
            } else {
                smemtile::wg::mbar_arrive_local(empty(s));
            }
        }
    };

    const bool producer_wg = WS && wgi == 0;
    if (producer_wg) {
        if constexpr (SETMAXNREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid == 0) {
            for (int p = 0; p < iters; ++p) produce(p);
        }
    } else {
        if constexpr (SETMAXNREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int c = wgi - WS;          // consumer index
        const int ct = tid - wgi * 128;  // thread in the warpgroup
        const int w = ct / 32, lane = ct % 32;
        float d[MI][ACC];
        int p = 0;  // WS 0: iterations whose loads thread 0 has issued
        if (!WS && tid == 0) {
            for (; p < STAGES - 1 && p < iters; ++p) produce(p);
        }
        int g = 0;  // iterations consumed
        for (int t = 0; t < my_tiles; ++t) {
            int tr, tc;
            smemtile::wg::tile_of<GROUP_M>(cid + t * clusters, rows, n_tiles, tr, tc);
            const int m0 = (tr * CLUSTER + static_cast<int>(rank)) * BM, n0 = tc * BN;
            if (nk == 0) {
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int i = 0; i < ACC; ++i) d[mi][i] = 0.f;
            }
            for (int kb = 0; kb < nk; ++kb, ++g) {
                const int s = g % STAGES;
                smemtile::wg::mbar_wait(full(s), (g / STAGES) & 1);
                smemtile::wg::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
                        const unsigned long long da =
                            smemtile::wg::desc_128b(a_s + s * A_BYTES + (c * WG_M + mi * 64) * 128 + kk * 32);
                        const unsigned long long db = smemtile::wg::desc_128b(b_s + s * B_BYTES + kk * 32);
                        smemtile::wg::Wgmma<BN, BF16>::mma(d[mi], da, db, (kb > 0 || kk > 0) ? 1 : 0);
                    }
                }
                smemtile::wg::wgmma_commit();
                if constexpr (INFLIGHT) {
                    smemtile::wg::wgmma_wait<1>();  // the previous stage's MMAs are done: release it
                    if (kb > 0 && ct == 0) release((g - 1) % STAGES);
                } else {
                    smemtile::wg::wgmma_wait<0>();
                    if (ct == 0) release(s);
                }
                if (!WS && tid == 0 && p < iters) {
                    produce(p);  // the stage it refills was released by this thread above (and by the others)
                    ++p;
                }
            }
            if constexpr (INFLIGHT) {
                smemtile::wg::wgmma_wait<0>();
                if (nk > 0 && ct == 0) release((g - 1) % STAGES);
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) smemtile::wg::fence_acc(d[mi]);
            // ---- epilogue ----
            const int row_base = m0 + c * WG_M;
            if constexpr (EPI == 0) {
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
                    for (int j = 0; j < ACC / 4; ++j) {
                        const int col = n0 + 8 * j + 2 * (lane % 4);
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int row = row_base + mi * 64 + 16 * w + lane / 4 + 8 * h;
                            if (row >= M) continue;
                            const float v0 = d[mi][4 * j + 2 * h], v1 = d[mi][4 * j + 2 * h + 1];
                            const unsigned packed = smemtile::wg::pack2<BF16>(v0, v1);
                            T* dst = C + static_cast<long long>(row) * ldc + col;
                            if (col + 1 < N && (ldc % 2) == 0 && (reinterpret_cast<unsigned long long>(C) & 3) == 0) {
                                *reinterpret_cast<unsigned*>(dst) = packed;
                            } else {
                                if (col < N) dst[0].bits = static_cast<unsigned short>(packed & 0xFFFFu);
                                if (col + 1 < N) dst[1].bits = static_cast<unsigned short>(packed >> 16);
                            }
                        }
                    }
                }
            } else {
                // EPI 1: the whole tile staged at once; EPI 2: in two halves of BN / 2 columns through a buffer half the
                // size (the store of the first half must have read it before the second is written)
                const unsigned cs = c_s + c * (WG_M * BN * 2 / EPI);
                // pass h: stage columns [h * BN / EPI, (h + 1) * BN / EPI), then store them (every index into d
                // stays a compile-time constant: the passes split the unrolled q loop, never index it)
                auto begin_pass = [&]() {
                    if (ct == 0) smemtile::wg::tma_store_wait_read();  // the last TMA store has read the staging tile
                    smemtile::wg::named_barrier(1 + c, 128);
                };
                auto finish_pass = [&](int h) {
                    smemtile::wg::fence_proxy_async();  // the TMA store (async proxy) reads what stmatrix wrote
                    smemtile::wg::named_barrier(1 + c, 128);
                    const int col0 = n0 + h * (BN / EPI);
                    if (c_tma) {
                        if (ct == 0) {
                            for (int pnl = 0; pnl < BN / 64 / EPI; ++pnl)
                                smemtile::wg::tma_store(&tmC, cs + pnl * PANEL, col0 + pnl * 64, row_base);
                            smemtile::wg::tma_store_commit();
                        }
                    } else {  // C rows not 16-byte aligned: masked stores, 8 columns per thread and step
                        for (int id = ct; id < WG_M * BN / 8 / EPI; id += 128) {
                            const int row = id / (BN / 8 / EPI), chunk = id % (BN / 8 / EPI);
                            const int grow = row_base + row, gcol = col0 + chunk * 8;
                            if (grow >= M || gcol >= N) continue;
                            const unsigned src =
                                cs + (chunk / 8) * PANEL + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
                            unsigned v[4];
                            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                                         : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                                         : "r"(src));
                            T* dst = C + static_cast<long long>(grow) * ldc + gcol;
#pragma unroll
                            for (int e = 0; e < 8; ++e) {
                                if (gcol + e < N) dst[e].bits = static_cast<unsigned short>(v[e / 2] >> (16 * (e % 2)));
                            }
                        }
                        smemtile::wg::named_barrier(1 + c, 128);  // read before the next pass or tile writes it
                    }
                };
                begin_pass();
#pragma unroll
                for (int q = 0; q < ACC / 8; ++q) {
                    if (EPI == 2 && q == ACC / 16) {  // the first half is staged: store it, then reuse the buffer
                        finish_pass(0);
                        begin_pass();
                    }
                    const int h = (EPI == 2 && q >= ACC / 16) ? 1 : 0;
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
                        const int row = mi * 64 + 16 * w + ((lane / 8) % 2) * 8 + lane % 8;
                        const int chunk = 2 * q + lane / 16 - h * (BN / 8 / EPI);  // 16-byte chunk in this pass
                        const unsigned addr = cs + (chunk / 8) * PANEL + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
                        smemtile::wg::stmatrix_x4(addr, smemtile::wg::pack2<BF16>(d[mi][8 * q + 0], d[mi][8 * q + 1]),
                                                  smemtile::wg::pack2<BF16>(d[mi][8 * q + 2], d[mi][8 * q + 3]),
                                                  smemtile::wg::pack2<BF16>(d[mi][8 * q + 4], d[mi][8 * q + 5]),
                                                  smemtile::wg::pack2<BF16>(d[mi][8 * q + 6], d[mi][8 * q + 7]));
                    }
                }
                finish_pass(EPI - 1);
            }
        }
        if (EPI && ct == 0) smemtile::wg::tma_store_wait_all();
    }
    __syncwarp();
    if (CLUSTER > 1) {
        smemtile::wg::cluster_sync();  // no CTA leaves while its peer may still arrive on its barriers
    }
#endif
}


// Launch plan (smemtile.families.wgmma_gemm; the generated launch_wgmma_gemm() does exactly this):
//   tensor maps: A {K, M} box {64, BM}, B {K, N} box {64, BN / CLUSTER}, C {N, M} box {64, BM / CONSUMERS}, all
//   SWIZZLE_128B, 16-bit elements, out-of-bounds boxes filled with zeros (loads) or clipped (stores);
//   grid (tiles or, persistent, min(tiles, SMS / CLUSTER)) * CLUSTER CTAs in clusters of CLUSTER, block
//   (CONSUMERS + WS) * 128 threads, dynamic shared memory 1024 + STAGES * (BM + BN) * 128 + (EPI ? BM * BN * 2 / EPI) +
//   16 * STAGES bytes (cudaFuncAttributeMaxDynamicSharedMemorySize raised first).
