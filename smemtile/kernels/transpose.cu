// smemtile kernel family: transpose (the classic shared-memory bank-conflict demonstration).
//
//     out[c][r] = in[r][c]      in: rows x cols (leading dimension ld_in >= cols), out: cols x rows (ld_out >= rows), row-major
//
// T is the element type moved as raw bits: float for fp32, unsigned short for fp16/bf16 (no arithmetic, so no
// <cuda_fp16.h>, which NVRTC does not bundle).
//
// A block of TILE x BLOCK_ROWS threads moves one tile of TY input rows x TILE input columns (TY = TILE_Y, or TILE
// when TILE_Y = 0: square); the tile is TILE output rows of TY elements. Every load of a thread is issued before
// the barrier, so several global loads are in flight. Scalar path:
//     phase 1: tile[ty + j][tx] = in[y0 + ty + j][x0 + tx]                 j < TY: a warp writes one tile row
//     phase 2: out[x0 + ty + j][y0 + c0 + tx] = tile[c0 + tx][ty + j]      c0 < TY step TILE, j < TILE: a warp
//              reads one tile column: with PAD = 0 the 32 lanes hit rows c0..c0+31 of one column, stride TILE
//              elements: a 32-way conflict for fp32 with TILE = 32. PAD = 1 (stride TILE + 1) or Swizzle<5,0,5>
//              (col ^= row) makes both phases conflict-free.
// Global accesses are coalesced in both phases (consecutive tx -> consecutive addresses). Edges are masked.
//
// Vector path (V = VEC elements per global access; VEC = 0 picks the widest of at most 16 bytes that fits the
// tile, transpose_auto_vec: 4 for fp32, 8 for fp16 with TILE = 64; VEC = 1 is the scalar path only): whole tiles
// move V * sizeof(T) bytes per global load and store when ld_in and ld_out are multiples of V and both pointers are
// V-aligned (checked at run time; edge tiles and other shapes take the scalar path above). A warp covers 4 rows x 8
// vectors (8 lanes per row: 128 contiguous bytes per row with float4); warp block b = warp + i * warps,
// i < TILE*TY / (32 * V * warps); CG = TILE/V/8 vector groups per input row, CGO = TY/V/8 per output row:
//     phase 1: row = (b / CG) * 4 + lane / 8,    vcol = (b % CG) * 8 + lane % 8
//              v = in[y0 + row][x0 + vcol*V ..];   tile (row, vcol*V + e) = v[e]      (V / W stores of W elements)
//     phase 2: orow = (b / CGO) * 4 + lane / 8,  ovcol = (b % CGO) * 8 + lane % 8
//              v[e] = tile (ovcol*V + e, orow);    out[x0 + orow][y0 + ovcol*V ..] = v (V scalar loads)
// W = the widest run of at most V elements that the layout keeps contiguous and aligned (row stride a multiple
// of W, swizzle granule of at least W elements): phase 1 stores each run as one W * sizeof(T)-byte access, so the
// shared-memory instruction is exactly the one the bank analysis describes (dense fp32: W = 4, one 16-byte store;
// PAD = 1: W = 1, four 4-byte stores). With PACK = 1, phase 2 reads one element per row (a column).
// fp32 with PAD = 1 (row stride 1 mod 32 words): lanes hit bank (row + 4*vcol + e) mod 32 in both phases, so
// both are conflict-free.
//
// PACK = P > 1 (phase 2 of whole tiles): each thread reads P consecutive elements of each of V tile rows, one
// P * sizeof(T)-byte load per row, and transposes the P x V block in registers into P output vectors (rows
// orow0 .. orow0 + P - 1). For fp16, P = 2 moves 2 x 2 blocks as 32-bit words (half2 pairs; the swap is a PRMT
// per output word): half the shared loads of P = 1, 4 bytes wide, so the bank analysis is the fp32 one. A warp
// block covers 4P output rows x 8 vectors, i < NI / P (NI = vectors per thread per tile):
//     phase 2: orow0 = (b / CGO) * 4P + (lane / 8) * P,  ovcol = (b % CGO) * 8 + lane % 8
//              w[e] = tile (ovcol*V + e, orow0 .. orow0 + P - 1);   out[x0 + orow0 + p][y0 + ovcol*V + e] = w[e][p]
// The layout must keep P elements contiguous and aligned (row stride a multiple of P, swizzle granule >= P):
// PAD = 1 cannot; the fix search picks a swizzle (fp32: Swizzle<3,2,6>, fp16: Swizzle<3,3,6|7>, conflict-free).
//
// TILES = n: a block moves n tiles one below the other (input rows y0 = yb + t * TY); the loads of tile t + 1
// are issued before tile t goes through shared memory, so they are in flight while it is staged and stored.
// STREAM = 1: the whole tiles' global loads and stores are evict-first (ld/st.global.cs).
// ASYNC = 1 (sm_80+): phase 1 of whole tiles is cp.async (16 bytes: .cg, L2 only; 4 or 8: .ca) straight from global
// into the tile, no registers and no L1 line held while the bytes are in flight (a plain load lands in L1
// first; the shared memory of 12 or 13 resident blocks leaves L1 28 KB). The layout must keep whole vectors (W = V);
// one tile at a time per block.
// MIN_BLOCKS = n: __launch_bounds__(threads, n), so ptxas keeps the registers at what n blocks per SM allow
// (TILES = 2 needs a second set of vectors: without it fp16 128 x 8 takes 38 registers and 1 block/SM).
//
// A tall tile (TILE_Y > TILE) writes each output row in runs of TY elements (TY * sizeof(T) bytes) while the
// blocks that run at the same time still read whole input rows between them.
//
// Launch order (GROUP): block (bx, by) of the grid takes tile (tx, ty) = (bx, by) when GROUP = 1. With GROUP > 1
// the blocks are numbered in launch order, p = by * gridDim.x + bx, and walk groups of GROUP tile rows column by
// column (Triton's grouped order):
//     ty = first + (p % (GROUP * gridDim.x)) % rows_in_group,   tx = (p % (GROUP * gridDim.x)) / rows_in_group
// so the blocks resident at one time (~8 per SM) cover a square-ish patch of tiles (with GROUP = 1 they read
// whole input rows and write every output row a few hundred bytes at a time). Measured on the H200 (fp32 8192^2,
// bench/results/memory_h200_run1.json): GROUP 8 and 32 are 2 % slower than GROUP 1. GROUP = 0 walks the tiles
// column by column (p % gridDim.y, p / gridDim.y): the resident blocks write whole output rows one after the other
// and read each input row a few hundred bytes at a time; fp16 8192^2 T128x4 P2 0.951x a copy against 0.926x row
// by row, fp32 T64x8 0.949x against 0.943x (bench/results/memory_h200_session6_group.json, as GROUP 64).
//
// Shared memory (static, bytes) = TY * (TILE + PAD) * sizeof(T).
// Launch: grid = (ceil(cols / TILE), ceil(rows / (TY * TILES))), block = (TILE, BLOCK_ROWS).
#include "smem_layout.cuh"

namespace smemtile {
// VEC = 0: the widest vector of at most 16 bytes whose 4 x 8-vector warp blocks tile the TY x TILE tile (and
// the TILE x TY output tile) evenly over the block's warps (1 = the scalar path only).
__host__ __device__ constexpr int transpose_auto_vec(int elem_bytes, int tile, int ty, int warps) {
    int v = elem_bytes < 16 ? 16 / elem_bytes : 1;
    while (v > 1 && ((tile / v) % 8 != 0 || (ty / v) % 8 != 0 || warps < 1 || ((ty / 4) * (tile / v / 8)) % warps != 0))
        v /= 2;
    return v;
}
// One st.shared of exactly BYTES bytes (inline PTX, so the compiler neither splits nor merges it: the
// instruction is the one the bank analysis describes). dst must be BYTES-aligned.
template <int BYTES>
__device__ __forceinline__ void st_shared_bits(void* dst, const void* src) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    if constexpr (BYTES == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(src);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    } else if constexpr (BYTES == 8) {
        const uint2 v = *reinterpret_cast<const uint2*>(src);
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(a), "r"(v.x), "r"(v.y) : "memory");
    } else if constexpr (BYTES == 4) {
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(*reinterpret_cast<const unsigned*>(src)) : "memory");
    } else if constexpr (BYTES == 2) {
        asm volatile("st.shared.b16 [%0], %1;" ::"r"(a), "h"(*reinterpret_cast<const unsigned short*>(src)) : "memory");
    } else {
        static_assert(BYTES == 1, "a shared-memory store moves 1, 2, 4, 8 or 16 bytes");
        asm volatile("st.shared.b8 [%0], %1;" ::"r"(a), "r"(unsigned(*reinterpret_cast<const unsigned char*>(src))) : "memory");
    }
}
// One ld.shared of exactly BYTES bytes (4, 8 or 16; inline PTX, issued as written). src must be BYTES-aligned.
template <int BYTES>
__device__ __forceinline__ void ld_shared_bits(void* dst, const void* src) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(src));
    if constexpr (BYTES == 16) {
        uint4 v;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
        *reinterpret_cast<uint4*>(dst) = v;
    } else if constexpr (BYTES == 8) {
        uint2 v;
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
        *reinterpret_cast<uint2*>(dst) = v;
    } else {
        static_assert(BYTES == 4, "a packed shared-memory load moves 4, 8 or 16 bytes");
        unsigned v;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
        *reinterpret_cast<unsigned*>(dst) = v;
    }
}
// A global vector access of BYTES bytes; STREAM = 1 marks it evict-first in L1 and L2 (ld/st.global.cs: the data
// is used once), 0 is a plain access.
template <int BYTES, int STREAM, typename V>
__device__ __forceinline__ V ld_global(const V* src) {
    if constexpr (STREAM && BYTES == 16) {
        uint4 r;
        asm("ld.global.cs.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(src));
        return *reinterpret_cast<V*>(&r);
    } else if constexpr (STREAM && BYTES == 8) {
        uint2 r;
        asm("ld.global.cs.v2.b32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(src));
        return *reinterpret_cast<V*>(&r);
    } else {
        static_assert(!STREAM || BYTES == 8 || BYTES == 16, "STREAM = 1 needs 8- or 16-byte vectors");
        return *src;
    }
}
template <int BYTES, int STREAM, typename V>
__device__ __forceinline__ void st_global(V* dst, const V& v) {
    if constexpr (STREAM && BYTES == 16) {
        const uint4 r = *reinterpret_cast<const uint4*>(&v);
        asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(r.x), "r"(r.y), "r"(r.z), "r"(r.w) : "memory");
    } else if constexpr (STREAM && BYTES == 8) {
        const uint2 r = *reinterpret_cast<const uint2*>(&v);
        asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(r.x), "r"(r.y) : "memory");
    } else {
        *dst = v;
    }
}
// One cp.async of BYTES (4, 8 or 16) bytes from global to shared: 16 bytes bypass L1 (.cg), 4 and 8 cannot (.ca).
template <int BYTES>
__device__ __forceinline__ void cp_async_bits(void* dst, const void* src) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async moves 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(src) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(a), "l"(src), "n"(BYTES) : "memory");
    }
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
// The widest run of at most v consecutive elements that a (stride, swizzle) layout keeps contiguous and aligned.
__host__ __device__ constexpr int transpose_smem_run(int v, int stride, int swz_b, int swz_m) {
    int w = v;
    while (w > 1 && (stride % w != 0 || (swz_b != 0 && (1 << swz_m) < w))) w /= 2;
    return w;
}
}  // namespace smemtile

template <typename T = float, int TILE = 64, int BLOCK_ROWS = 4, int PAD = 1, int SWZ_B = 0, int SWZ_M = 0,
          int SWZ_S = 0, int VEC = 0, int GROUP = 1, int TILE_Y = 0, int PACK = 1, int TILES = 1,
          int STREAM = 0, int MIN_BLOCKS = 1, int ASYNC = 0, int PITCH = 0>
__global__ void __launch_bounds__(TILE * BLOCK_ROWS, MIN_BLOCKS > 1 ? MIN_BLOCKS : 0)  // 0: no minimum (as if omitted)
transpose(const T* __restrict__ in, T* __restrict__ out, int rows, int cols, int ld_in_arg, int ld_out_arg) {
    // PITCH 1: the rows of in and out are ld_in / ld_out elements apart (the user's layout); PITCH 0: dense
    // (ld_in = cols, ld_out = rows: the launch helper refuses other pitches for such a kernel), the same machine
    // code as a kernel without pitches.
    static_assert(PITCH == 0 || PITCH == 1, "PITCH is 0 (dense rows) or 1 (row pitches ld_in, ld_out)");
    const int ld_in = PITCH ? ld_in_arg : cols, ld_out = PITCH ? ld_out_arg : rows;
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "the element type must be 1, 2, 4 or 8 bytes");
    static_assert(TILE % 32 == 0 && TILE <= 128, "TILE must be 32, 64 or 128: a warp spans whole tile rows");
    constexpr int TY = TILE_Y ? TILE_Y : TILE;  // input rows per tile = output columns per tile
    static_assert(TY % TILE == 0, "TILE_Y must be 0 (square) or a multiple of TILE");
    static_assert(GROUP >= 0, "GROUP (tile rows per group of the launch order; 0 = all: column by column) is >= 0");
    static_assert(TILES >= 1 && TILES <= 4, "TILES (tiles per block, one below the other) must be 1..4");
    static_assert(MIN_BLOCKS >= 1, "MIN_BLOCKS (blocks per SM the registers must allow) is at least 1");
    static_assert(ASYNC == 0 || ASYNC == 1, "ASYNC is 0 (loads through registers) or 1 (cp.async into the tile)");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    static_assert(ASYNC == 0, "ASYNC = 1 needs cp.async: sm_80 or newer");
#endif
    static_assert(BLOCK_ROWS >= 1 && TILE % BLOCK_ROWS == 0, "BLOCK_ROWS must divide TILE (each thread moves TILE/BLOCK_ROWS elements)");
    static_assert(TILE * BLOCK_ROWS <= 1024, "a block has at most 1024 threads: TILE * BLOCK_ROWS <= 1024");
    using L = smemtile::SmemTile<TY, TILE, PAD, SWZ_B, SWZ_M, SWZ_S>;
    static_assert(L::kElems * sizeof(T) <= smemtile::kStaticSmemBytes, "the tile is static shared memory: at most 48 KiB");
    __shared__ __align__(16) T tile[L::kElems];

    const int tx = threadIdx.x, ty = threadIdx.y;
    int bx = blockIdx.x, by = blockIdx.y;
    if constexpr (GROUP == 0) {  // column by column: consecutive blocks walk down a column of tiles
        const long long p = (long long)blockIdx.y * gridDim.x + blockIdx.x;
        by = int(p % gridDim.y);
        bx = int(p / gridDim.y);
    } else if constexpr (GROUP > 1) {  // grouped launch order (header comment); 64-bit: the grid may hold 2^46 blocks
        const long long p = (long long)blockIdx.y * gridDim.x + blockIdx.x, per = (long long)GROUP * gridDim.x;
        const long long in_group = p % per;
        const int first = int(p / per) * GROUP, rows_in_group = min(int(gridDim.y) - first, GROUP);
        by = first + int(in_group % rows_in_group);
        bx = int(in_group / rows_in_group);
    }
    const int x0 = bx * TILE, yb = by * (TY * TILES);  // the block's tiles start at input rows yb + t * TY

    constexpr int V = VEC ? VEC : smemtile::transpose_auto_vec(int(sizeof(T)), TILE, TY, TILE * BLOCK_ROWS / 32);
    bool vec_ok = false;  // this block's whole tiles take the vector path
    if constexpr (V > 1) {
        // (offsets inside a tile are 32-bit: TY rows of the input and TILE rows of the output stay below 2^31)
        vec_ok = (ld_out % V == 0) && (ld_in % V == 0) && (x0 + TILE <= cols) &&
                 (long long)TY * ld_in < (1LL << 31) && (long long)TILE * ld_out < (1LL << 31) &&
                 ((reinterpret_cast<unsigned long long>(in) | reinterpret_cast<unsigned long long>(out)) % (V * sizeof(T)) == 0);
    }
    if constexpr (V > 1) {
        static_assert(V == 2 || V == 4 || V == 8, "VEC must be 0 (16 bytes), 1, 2, 4 or 8 elements per access");
        static_assert(V * sizeof(T) <= 16, "a vector access moves at most 16 bytes");
        static_assert(STREAM == 0 || STREAM == 1, "STREAM is 0 (plain global accesses) or 1 (evict-first .cs)");
        static_assert((TILE / V) % 8 == 0, "TILE/V must be a multiple of 8 (8 lanes along a tile row)");
        constexpr int WARPS = TILE * BLOCK_ROWS / 32;
        constexpr int CG = TILE / V / 8;     // 8-vector column groups per input row of the tile (phase 1)
        constexpr int CGO = TY / V / 8;      // 8-vector column groups per output row of the tile (phase 2)
        constexpr int WB = (TY / 4) * CG;    // warp blocks of 4 rows x 8 vectors (= (TILE / 4) * CGO)
        static_assert(TILE * BLOCK_ROWS % 32 == 0 && WB % WARPS == 0, "the warps must share the tile's warp blocks evenly");
        constexpr int NI = WB / WARPS;       // vectors per thread per tile
        constexpr int P = PACK;              // elements per phase-2 shared load = output rows per thread
        static_assert(P == 1 || P == 2 || P == 4 || P == 8, "PACK must be 1, 2, 4 or 8");
        static_assert(P * sizeof(T) <= 16, "a phase-2 shared load moves at most 16 bytes: PACK * sizeof(T) <= 16");
        static_assert(NI % P == 0, "PACK must divide the vectors each thread moves per tile");
        static_assert(P == 1 || (L::kStride % P == 0 && (SWZ_B == 0 || (1 << SWZ_M) >= P)),
                      "PACK > 1 reads PACK consecutive elements of a tile row: the layout must keep them contiguous "
                      "and aligned (row stride a multiple of PACK, swizzle granule 2^M >= PACK)");
        struct alignas(V * sizeof(T)) Vec { T e[V]; };
        struct alignas(P * sizeof(T)) Pk { T e[P]; };
        constexpr int W = smemtile::transpose_smem_run(V, L::kStride, SWZ_B, SWZ_M);
        const int lin = ty * TILE + tx;
        const int lane = lin & 31, warp = lin >> 5;
        // phase 1 of tile t: NI vectors per thread, all loads issued before any is used
        auto load = [&](Vec (&v)[NI], int y0) {
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                const int b = warp + i * WARPS;
                const int row = (b / CG) * 4 + lane / 8, vcol = (b % CG) * 8 + lane % 8;
                v[i] = smemtile::ld_global<sizeof(Vec), STREAM>(reinterpret_cast<const Vec*>(in + ((long long)y0 * ld_in + x0) + (row * ld_in + vcol * V)));
            }
        };
        static_assert(!ASYNC || (W == V && STREAM == 0),
                      "ASYNC = 1 copies whole vectors into the tile: the layout must keep V elements contiguous and "
                      "aligned (no pad 1), and STREAM must be 0");
        // ASYNC: phase 1 of tile y0 as cp.async, global straight into the tile (the same addresses as put's)
        auto copy_in = [&](int y0) {
            if constexpr (ASYNC) {
#pragma unroll
                for (int i = 0; i < NI; ++i) {
                    const int b = warp + i * WARPS;
                    const int row = (b / CG) * 4 + lane / 8, vcol = (b % CG) * 8 + lane % 8;
                    smemtile::cp_async_bits<sizeof(Vec)>(&tile[L::offset(row, vcol * V)],
                                                         in + ((long long)y0 * ld_in + x0) + (row * ld_in + vcol * V));
                }
                smemtile::cp_async_wait_all();
            }
        };
        // phase 1 from registers: W-element runs of each vector into the tile
        auto put = [&](const Vec (&v)[NI]) {
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                const int b = warp + i * WARPS;
                const int row = (b / CG) * 4 + lane / 8, col = ((b % CG) * 8 + lane % 8) * V;
#pragma unroll
                for (int e = 0; e < V; e += W) {
                    // v[i] is aligned to V elements and e is a multiple of W: an aligned run of W elements
                    smemtile::st_shared_bits<W * sizeof(T)>(&tile[L::offset(row, col + e)], &v[i].e[e]);
                }
            }
        };
        // phase 2: PACK-element runs down a column of the tile out to the output rows
        auto unload = [&](int y0) {
            if constexpr (P == 1) {
#pragma unroll
                for (int i = 0; i < NI; ++i) {  // output row orow = tile column, V outputs from V tile rows
                    const int b = warp + i * WARPS;
                    const int orow = (b / CGO) * 4 + lane / 8, ocol = ((b % CGO) * 8 + lane % 8) * V;
                    Vec o;
#pragma unroll
                    for (int e = 0; e < V; ++e) o.e[e] = tile[L::offset(ocol + e, orow)];
                    smemtile::st_global<sizeof(Vec), STREAM>(reinterpret_cast<Vec*>(out + ((long long)x0 * ld_out + y0) + (orow * ld_out + ocol)), o);
                }
            } else {
#pragma unroll
                for (int i = 0; i < NI / P; ++i) {  // P output rows orow0..orow0+P-1 from one load per tile row
                    const int b = warp + i * WARPS;
                    const int orow0 = (b / CGO) * (4 * P) + (lane / 8) * P, ocol = ((b % CGO) * 8 + lane % 8) * V;
                    Pk w[V];  // w[e].e[p] = tile (ocol + e, orow0 + p): a P x V block, transposed in registers
#pragma unroll
                    for (int e = 0; e < V; ++e) smemtile::ld_shared_bits<P * sizeof(T)>(&w[e], &tile[L::offset(ocol + e, orow0)]);
#pragma unroll
                    for (int p = 0; p < P; ++p) {
                        Vec o;
#pragma unroll
                        for (int e = 0; e < V; ++e) o.e[e] = w[e].e[p];
                        smemtile::st_global<sizeof(Vec), STREAM>(reinterpret_cast<Vec*>(out + ((long long)x0 * ld_out + y0) + ((orow0 + p) * ld_out + ocol)), o);
                    }
                }
            }
        };
        auto stage = [&](const Vec (&v)[NI], int y0) {
            put(v);
            __syncthreads();
            unload(y0);
        };
        if (ASYNC && vec_ok && yb + TY <= rows) {
            // one tile at a time: its cp.async lands in the tile, the barrier, phase 2
#pragma unroll 1
            for (int t = 0; t < TILES; ++t) {
                const int y0 = yb + t * TY;
                if (t > 0) {
                    if (y0 + TY > rows) break;  // the rest are edge tiles: scalar path below
                    __syncthreads();  // every thread has read tile t - 1 out of shared memory
                }
                copy_in(y0);
                __syncthreads();
                unload(y0);
            }
            if (TILES == 1 || yb + TILES * TY <= rows) return;
        } else if (vec_ok && yb + TY <= rows) {
            // Tiles one below the other; tile t + 1's loads are issued before tile t goes through shared memory,
            // so they are in flight while tile t is stored (TILES = 1: one tile, the plain kernel).
            Vec v[NI];
            load(v, yb);
#pragma unroll
            for (int t = 0; t < TILES; ++t) {
                const int y0 = yb + t * TY;
                if (t > 0) {
                    if (y0 + TY > rows) break;  // the rest are edge tiles: scalar path below
                    __syncthreads();  // every thread has read tile t - 1 out of shared memory
                }
                if (t + 1 < TILES && y0 + 2 * TY <= rows) {
                    Vec n[NI];
                    load(n, y0 + TY);
                    stage(v, y0);
#pragma unroll
                    for (int i = 0; i < NI; ++i) v[i] = n[i];
                } else {
                    stage(v, y0);
                }
            }
            if (TILES == 1 || yb + TILES * TY <= rows) return;  // else the scalar loop syncs before its tile
        }
    }

    // Scalar path: edge tiles (and every tile when V = 1 or the shape is not V-aligned), each masked.
#pragma unroll 1
    for (int t = 0; t < TILES; ++t) {
        const int y0 = yb + t * TY;
        if (y0 >= rows) break;
        if (vec_ok && y0 + TY <= rows) continue;  // done by the vector path above
        if (t > 0) __syncthreads();
#pragma unroll
        for (int j = 0; j < TY; j += BLOCK_ROWS) {
            const int y = y0 + ty + j, x = x0 + tx;
            if (y < rows && x < cols) tile[L::offset(ty + j, tx)] = in[(long long)y * ld_in + x];
        }
        __syncthreads();
#pragma unroll
        for (int c0 = 0; c0 < TY; c0 += TILE) {  // the TY output columns in chunks of TILE (one chunk when square)
#pragma unroll
            for (int j = 0; j < TILE; j += BLOCK_ROWS) {
                const int y = x0 + ty + j, x = y0 + c0 + tx;  // output row = input column
                if (y < cols && x < rows) out[(long long)y * ld_out + x] = tile[L::offset(c0 + tx, ty + j)];
            }
        }
    }
}
