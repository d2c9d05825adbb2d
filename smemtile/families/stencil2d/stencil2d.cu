// smemtile kernel family: stencil2d (star stencil of radius R = 1..4 with a halo tile in shared memory).
//
//     out[y][x] = c[0] * in[y][x] + sum_{r=1..R} c[r] * (in[y][x-r] + in[y][x+r] + in[y-r][x] + in[y+r][x])
//
// in, out: ny x nx fp32, row-major and dense; values outside the grid are 0 (zero boundary). c: R+1 floats in
// global memory.
//
// A block of BX x BY threads computes a BX x BY output tile. It first stages the input tile with its halo,
// (BY + 2R) x (BX + 2R) elements, in shared memory: element e = tid + i * BX*BY of that tile in row-major order
// (so a warp writes consecutive halo-tile elements), then each thread reads its 4R + 1 neighbours:
//     tile[ty + R + dy][tx + R + dx]     a warp reads 32 // BX rows of BX consecutive elements per instruction
// With BX = 32 those reads are conflict-free; with BX = 16 two tile rows share a warp and the row stride
// BX + 2R + PAD decides whether they collide, which is what the layout (PAD or swizzle) fixes.
//
// Shared memory (static, bytes) = (BY + 2R) * (BX + 2R + PAD) * 4.
// Launch: grid = (ceil(nx / BX), ceil(ny / BY)), block = (BX, BY).
#include "smem_layout.cuh"

template <int BX = 32, int BY = 8, int R = 1, int PAD = 0, int SWZ_B = 0, int SWZ_M = 0, int SWZ_S = 0>
__global__ void __launch_bounds__(BX * BY)
stencil2d(const float* __restrict__ in, float* __restrict__ out, int ny, int nx, const float* __restrict__ coeffs) {
    static_assert(R >= 1 && R <= 4, "the stencil radius R must be 1..4");
    static_assert(BX >= 1 && BY >= 1 && BX * BY <= 1024, "a block has 1 to 1024 threads: BX * BY <= 1024");
    static_assert((BX * BY) % 32 == 0, "the block must be whole warps: BX * BY % 32 == 0");
    static_assert(32 % BX == 0 || BX % 32 == 0, "BX must divide 32 or be a multiple of 32 so warps cover whole rows");
    constexpr int TW = BX + 2 * R, TH = BY + 2 * R;  // halo tile
    using L = smemtile::SmemTile<TH, TW, PAD, SWZ_B, SWZ_M, SWZ_S>;
    static_assert(L::kElems * 4 <= smemtile::kStaticSmemBytes, "the halo tile is static shared memory: at most 48 KiB");
    __shared__ float tile[L::kElems];

    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BX + tx;
    const int x0 = blockIdx.x * BX, y0 = blockIdx.y * BY;

    for (int e = tid; e < TH * TW; e += BX * BY) {
        const int r = e / TW, c = e % TW;
        const int gy = y0 + r - R, gx = x0 + c - R;
        tile[L::offset(r, c)] = (gy >= 0 && gy < ny && gx >= 0 && gx < nx) ? in[(long long)gy * nx + gx] : 0.f;
    }
    __syncthreads();

    const int y = y0 + ty, x = x0 + tx;
    if (y >= ny || x >= nx) return;
    float acc = coeffs[0] * tile[L::offset(ty + R, tx + R)];
#pragma unroll
    for (int r = 1; r <= R; ++r) {
        const float s = tile[L::offset(ty + R, tx + R - r)] + tile[L::offset(ty + R, tx + R + r)] +
                        tile[L::offset(ty + R - r, tx + R)] + tile[L::offset(ty + R + r, tx + R)];
        acc = fmaf(coeffs[r], s, acc);
    }
    out[(long long)y * nx + x] = acc;
}
