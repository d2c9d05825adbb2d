// smemtile kernel family: stencil2d (star stencil of radius R = 1..4 with a halo tile in shared memory).
//
//     out[y][x] = c[0] * in[y][x] + sum_{r=1..R} c[r] * (in[y][x-r] + in[y][x+r] + in[y-r][x] + in[y+r][x])
//
// in, out: ny x nx fp32, row-major with row pitches ld_in, ld_out >= nx (elements); values outside the grid are
// 0 (zero boundary). c: R+1 floats in global memory.
//
// A block of BX x BY threads computes an output tile of BX*VEC columns x BY*RY rows: thread (tx, ty) owns VEC
// consecutive columns (one float4 with VEC = 4) of RY consecutive rows (register blocking along y).
//
// Phase 1 stages the input tile with its halo in shared memory, TH x TW elements with
//     TH = BY*RY + 2R rows,   TW = BX*VEC + 2*HX columns,   HX = R rounded up to a multiple of VEC
// (the x halo is whole vectors, so every global load of the fill is one aligned VEC-wide access: HX = 4 for any
// R <= 4 with VEC = 4). The tile is NV = TW / VEC vectors per row; vector e = tid + i * BX*BY (row-major, so a
// warp moves consecutive vectors) goes from in[y0 - R + e / NV][x0 - HX + (e % NV) * VEC ..] to
// tile(e / NV, (e % NV) * VEC ..). All FILL = ceil(TH * NV / (BX*BY)) loads of a thread are issued before its
// first store (FILL vectors in flight per thread). Lanes past the tile (e >= TH * NV, last iteration only) load
// nothing and store their own previous vector (e - BX*BY) again, so every warp issues every store with all lanes
// on: a predicated-off store still counts as an executed instruction in Nsight Compute (measured on the H200),
// and the model counts only instructions with an active lane (FILL >= 2 always: the halo tile has more vectors
// than the block has threads, (BY*RY + 2R) * (BX + 2*HX/VEC) > BY * BX). Vectors
// that leave the grid, or every vector when ld_in or ld_out % VEC != 0 or a pointer is not VEC*4-byte aligned, are read
// element by element with zeros outside: the shared-memory instructions are the same on every path.
//
// Phase 2, per thread: the column window rows ty*RY + k, k < RY + 2R, at tile columns HX + tx*VEC .. (one
// vector each: RY + 2R loads feed the R up and R down neighbours of all RY outputs), then per output row o the
// ceil(R / W) runs of W elements on each side of the centre vector (one float4 per side for any R <= 4 with the
// dense tile; the elements past R are loaded and not used), and the RY output vectors are written with one
// VEC-wide store each. Per output vector: (RY + 2R)/RY + 2*ceil(R/W) shared loads instead of the 4R + 1 of one
// thread per output.
//
// Every shared access moves runs of W elements: W = VEC when the layout keeps a vector contiguous and aligned
// (row stride a multiple of VEC, swizzle granule >= VEC), else the widest that it does (pad 1: W = 1, four
// 4-byte accesses per vector). A warp's vector accesses cover 8 consecutive vectors of one tile row per quarter
// warp, so with the dense tile (pad 0) every one of them is conflict-free.
//
// Shared memory (static, bytes) = TH * (TW + PAD) * 4.
// Launch: grid = (ceil(nx / (BX*VEC)), ceil(ny / (BY*RY))), block = (BX, BY).
#include "smem_layout.cuh"

namespace smemtile {
// N consecutive floats moved between registers r[0..N) and an N*4-byte aligned address by one instruction (r is
// indexed with compile-time constants only, so it stays in registers). The shared-memory forms are volatile
// inline PTX: ptxas otherwise narrows a vector load whose elements are partly unused (R < 4) and merges
// neighbouring narrow accesses whose alignment it can prove (row parity known from RY), so the instructions
// would depend on the compiler; volatile ones are issued exactly as written, as the bank analysis describes.
template <int N>
__device__ __forceinline__ void load_run(float* r, const float* p) {  // global memory
    static_assert(N == 1 || N == 2 || N == 4, "a run is 1, 2 or 4 floats");
    if constexpr (N == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        r[0] = t.x, r[1] = t.y, r[2] = t.z, r[3] = t.w;
    } else if constexpr (N == 2) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        r[0] = t.x, r[1] = t.y;
    } else {
        r[0] = *p;
    }
}
template <int N>
__device__ __forceinline__ void store_run(float* p, const float* r) {  // global memory
    static_assert(N == 1 || N == 2 || N == 4, "a run is 1, 2 or 4 floats");
    if constexpr (N == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else if constexpr (N == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
    } else {
        *p = r[0];
    }
}
template <int N>
__device__ __forceinline__ void ld_shared_run(float* r, const float* p) {
    static_assert(N == 1 || N == 2 || N == 4, "a run is 1, 2 or 4 floats");
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    if constexpr (N == 4) {
        asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]) : "r"(a) : "memory");
    } else if constexpr (N == 2) {
        asm volatile("ld.volatile.shared.v2.f32 {%0, %1}, [%2];" : "=f"(r[0]), "=f"(r[1]) : "r"(a) : "memory");
    } else {
        asm volatile("ld.volatile.shared.f32 %0, [%1];" : "=f"(r[0]) : "r"(a) : "memory");
    }
}
template <int N>
__device__ __forceinline__ void st_shared_run(float* p, const float* r) {
    static_assert(N == 1 || N == 2 || N == 4, "a run is 1, 2 or 4 floats");
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    if constexpr (N == 4) {
        asm volatile("st.volatile.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(r[0]), "f"(r[1]), "f"(r[2]), "f"(r[3]) : "memory");
    } else if constexpr (N == 2) {
        asm volatile("st.volatile.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(r[0]), "f"(r[1]) : "memory");
    } else {
        asm volatile("st.volatile.shared.f32 [%0], %1;" ::"r"(a), "f"(r[0]) : "memory");
    }
}

// The widest run of at most v consecutive elements that a (stride, swizzle) layout keeps contiguous and aligned.
__host__ __device__ constexpr int stencil_smem_run(int v, int stride, int swz_b, int swz_m) {
    int w = v;
    while (w > 1 && (stride % w != 0 || (swz_b != 0 && (1 << swz_m) < w))) w /= 2;
    return w;
}
}  // namespace smemtile

template <int BX = 32, int BY = 8, int R = 1, int PAD = 0, int SWZ_B = 0, int SWZ_M = 0, int SWZ_S = 0, int VEC = 4,
          int RY = 4, int PITCH = 0>
__global__ void __launch_bounds__(BX * BY)
stencil2d(const float* __restrict__ in, float* __restrict__ out, int ny, int nx, const float* __restrict__ coeffs,
          int ld_in_arg, int ld_out_arg) {
    // PITCH 1: rows ld_in / ld_out elements apart (the user's layout); PITCH 0: dense (ld = nx; the launch helper
    // refuses other pitches for such a kernel), the same machine code as a kernel without pitches.
    static_assert(PITCH == 0 || PITCH == 1, "PITCH is 0 (dense rows) or 1 (row pitches ld_in, ld_out)");
    const int ld_in = PITCH ? ld_in_arg : nx, ld_out = PITCH ? ld_out_arg : nx;
    static_assert(R >= 1 && R <= 4, "the stencil radius R must be 1..4");
    static_assert(BX >= 1 && BY >= 1 && BX * BY <= 1024, "a block has 1 to 1024 threads: BX * BY <= 1024");
    static_assert((BX * BY) % 32 == 0, "the block must be whole warps: BX * BY % 32 == 0");
    static_assert(32 % BX == 0 || BX % 32 == 0, "BX must divide 32 or be a multiple of 32 so warps cover whole rows");
    static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC (columns per thread) must be 1, 2 or 4");
    static_assert(RY >= 1 && RY <= 16, "RY (rows per thread) must be 1..16");
    constexpr int HX = (R + VEC - 1) / VEC * VEC;                  // x halo: R rounded up to whole vectors
    constexpr int TW = BX * VEC + 2 * HX, TH = BY * RY + 2 * R;  // halo tile
    constexpr int NV = TW / VEC, THREADS = BX * BY;
    constexpr int FILL = (TH * NV + THREADS - 1) / THREADS;      // fill vectors per thread
    static_assert(FILL >= 2, "the halo tile has more vectors than the block has threads");
    using L = smemtile::SmemTile<TH, TW, PAD, SWZ_B, SWZ_M, SWZ_S>;
    static_assert(L::kElems * 4 <= smemtile::kStaticSmemBytes, "the halo tile is static shared memory: at most 48 KiB");
    constexpr int W = smemtile::stencil_smem_run(VEC, L::kStride, SWZ_B, SWZ_M);
    __shared__ __align__(16) float tile[L::kElems];

    const int tid = threadIdx.y * BX + threadIdx.x;
    const int x0 = blockIdx.x * (BX * VEC), y0 = blockIdx.y * (BY * RY);
    const bool vec_ok = VEC > 1 && ld_in % VEC == 0 && ld_out % VEC == 0 &&
                        ((reinterpret_cast<unsigned long long>(in) | reinterpret_cast<unsigned long long>(out)) %
                             (VEC * 4) == 0);

    // Phase 1: every load of the fill first, then the stores.
    float v[FILL][VEC];
#pragma unroll
    for (int i = 0; i < FILL; ++i) {
        const int e = tid + i * THREADS;
        const int gy = y0 - R + e / NV, gx = x0 - HX + (e % NV) * VEC;
        const bool row_in = (FILL * THREADS == TH * NV || e < TH * NV) && gy >= 0 && gy < ny;
        const float* src = in + (long long)gy * ld_in + gx;
        if (row_in && vec_ok && gx >= 0 && gx + VEC <= nx) {
            smemtile::load_run<VEC>(v[i], src);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = (row_in && gx + j >= 0 && gx + j < nx) ? src[j] : 0.f;
        }
    }
#pragma unroll
    for (int i = 0; i < FILL; ++i) {
        const int e = tid + i * THREADS;
        const bool in_tile = FILL * THREADS == TH * NV || e < TH * NV;
        {  // past the tile: store vector e - THREADS (this thread's own, iteration i - 1) again
            const int ee = in_tile ? e : e - THREADS;
            const int r = ee / NV, c = (ee % NV) * VEC;
            float w[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) w[j] = (in_tile || i == 0) ? v[i][j] : v[i > 0 ? i - 1 : 0][j];
#pragma unroll
            for (int j = 0; j < VEC; j += W) smemtile::st_shared_run<W>(&tile[L::offset(r, c + j)], &w[j]);
        }
    }
    __syncthreads();

    // Phase 2: the column window (vertical neighbours), then each row's side vectors (horizontal neighbours).
    const int tx = tid % BX, ty = tid / BX;
    const int cx = tx * VEC, ry = ty * RY;  // output tile coordinates of this thread's first element
    float c[R + 1];
#pragma unroll
    for (int r = 0; r <= R; ++r) c[r] = coeffs[r];
    float acc[RY][VEC], ctr[RY][VEC];
#pragma unroll
    for (int o = 0; o < RY; ++o)
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[o][j] = 0.f;
#pragma unroll
    for (int k = 0; k < RY + 2 * R; ++k) {  // tile row ry + k is output row ry + k - R
        float w[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j += W) smemtile::ld_shared_run<W>(&w[j], &tile[L::offset(ry + k, HX + cx + j)]);
#pragma unroll
        for (int o = 0; o < RY; ++o) {
            const int d = k - R - o;  // w is output row o's neighbour at dy = d (a compile-time constant)
            if (d < -R || d > R) continue;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                if (d == 0) ctr[o][j] = w[j];
                acc[o][j] = fmaf(c[d < 0 ? -d : d], w[j], acc[o][j]);
            }
        }
    }
#pragma unroll
    for (int o = 0; o < RY; ++o) {
        float h[VEC + 2 * HX];  // tile row ry + R + o, columns cx .. cx + VEC + 2*HX: h[HX + j] is the centre
#pragma unroll
        for (int m = 0; m < (R + W - 1) / W; ++m) {  // runs of W from the centre vector outward, left and right
            smemtile::ld_shared_run<W>(&h[HX - (m + 1) * W], &tile[L::offset(ry + R + o, HX + cx - (m + 1) * W)]);
            smemtile::ld_shared_run<W>(&h[HX + VEC + m * W], &tile[L::offset(ry + R + o, HX + cx + VEC + m * W)]);
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) h[HX + j] = ctr[o][j];
#pragma unroll
        for (int j = 0; j < VEC; ++j)
#pragma unroll
            for (int d = 1; d <= R; ++d) acc[o][j] = fmaf(c[d], h[HX + j - d] + h[HX + j + d], acc[o][j]);
        const int y = y0 + ry + o, x = x0 + cx;
        if (y >= ny) continue;
        float* dst = out + (long long)y * ld_out + x;
        if (vec_ok && x + VEC <= nx) {
            smemtile::store_run<VEC>(dst, acc[o]);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                if (x + j < nx) dst[j] = acc[o][j];
        }
    }
}
