// smemtile kernel family: transpose (the classic shared-memory bank-conflict demonstration).
//
//     out[c][r] = in[r][c]      in: rows x cols, out: cols x rows, both row-major and dense
//
// T is the element type moved as raw bits: float for fp32, unsigned short for fp16/bf16 (no arithmetic, so no
// <cuda_fp16.h>, which NVRTC does not bundle).
//
// A block of TILE x BLOCK_ROWS threads moves one TILE x TILE tile; each thread handles TILE / BLOCK_ROWS
// elements, all issued before the barrier so several global loads are in flight:
//     phase 1: tile[ty + j][tx] = in[y0 + ty + j][x0 + tx]      a warp writes one tile row: conflict-free
//     phase 2: out[x0 + ty + j][y0 + tx] = tile[tx][ty + j]     a warp reads one tile column: with PAD = 0 the
//              32 lanes hit rows 0..31 of one column, stride TILE elements: a 32-way conflict for fp32 with
//              TILE = 32. PAD = 1 (stride TILE + 1) or Swizzle<5,0,5> (col ^= row) makes both phases conflict-free.
// Global accesses are coalesced in both phases (consecutive tx -> consecutive addresses). Edges are masked.
//
// Shared memory (static, bytes) = TILE * (TILE + PAD) * sizeof(T).
// Launch: grid = (ceil(cols / TILE), ceil(rows / TILE)), block = (TILE, BLOCK_ROWS).
#include "smem_layout.cuh"

template <typename T = float, int TILE = 64, int BLOCK_ROWS = 4, int PAD = 1, int SWZ_B = 0, int SWZ_M = 0,
          int SWZ_S = 0>
__global__ void __launch_bounds__(TILE * BLOCK_ROWS)
transpose(const T* __restrict__ in, T* __restrict__ out, int rows, int cols) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "the element type must be 1, 2, 4 or 8 bytes");
    static_assert(TILE % 32 == 0 && TILE <= 64, "TILE must be 32 or 64: a warp spans whole tile rows");
    static_assert(BLOCK_ROWS >= 1 && TILE % BLOCK_ROWS == 0, "BLOCK_ROWS must divide TILE (each thread moves TILE/BLOCK_ROWS elements)");
    static_assert(TILE * BLOCK_ROWS <= 1024, "a block has at most 1024 threads: TILE * BLOCK_ROWS <= 1024");
    using L = smemtile::SmemTile<TILE, TILE, PAD, SWZ_B, SWZ_M, SWZ_S>;
    static_assert(L::kElems * sizeof(T) <= 48 * 1024, "the tile is static shared memory: at most 48 KiB");
    __shared__ T tile[L::kElems];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * TILE, y0 = blockIdx.y * TILE;

#pragma unroll
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int y = y0 + ty + j, x = x0 + tx;
        if (y < rows && x < cols) tile[L::offset(ty + j, tx)] = in[(long long)y * cols + x];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int y = x0 + ty + j, x = y0 + tx;  // output row = input column
        if (y < cols && x < rows) out[(long long)y * rows + x] = tile[L::offset(tx, ty + j)];
    }
}
