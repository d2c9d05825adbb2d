// smemtile: shared-memory tile layouts shared by the kernel families.
//
// A tile of ROWS x COLS elements is stored with a padded row stride and an optional XOR swizzle in the
// CuTe convention, both over the *element* index:
//
//     offset(row, col) = swizzle(row * (COLS + PAD) + col)
//     swizzle(x)       = x ^ ((x >> S) & (((1 << B) - 1) << M))      // bits [M+S, M+S+B) into [M, M+B)
//
//        bit:  ... | M+S+B-1 .. M+S | ... | M+B-1 .. M | M-1 .. 0 |
//                    \____ yyy ____/        \__ zzz __/  granule
//              zzz ^= yyy: the 2^M-element granules inside each group of 2^(M+B) elements are permuted, so a
//              granule (e.g. a float4 when M >= 2) stays contiguous and aligned.
//
// This is the same mapping as smemtile.model.layout.Layout, so the bank analysis describes this code.
// Builds with NVRTC alone: no headers. Include-guarded: several kernel files (or generated .cu files, which
// inline this header) can be included in one translation unit.
#pragma once
#ifndef SMEMTILE_SMEM_LAYOUT_CUH
#define SMEMTILE_SMEM_LAYOUT_CUH

namespace smemtile {

// Element types of the 16-bit float kernels (the bits of IEEE binary16 and bfloat16). The kernels need no CUDA
// headers: a caller holding __half / __nv_bfloat16 pointers passes them reinterpret_cast to these (same size,
// alignment and layout).
struct alignas(2) f16 {
    unsigned short bits;
};
struct alignas(2) bf16 {
    unsigned short bits;
};

// CUtensorMap: 128 opaque bytes, 64-byte aligned; filled on the host by cuTensorMapEncodeTiled and passed by value
// as a __grid_constant__ kernel parameter (the TMA unit reads it from the parameter space). One type for every
// family's TMA kernels (the generated helpers declare their maps as smemtile::TensorMap).
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// The shared-state-space address of a generic pointer to shared memory (the operand of ldmatrix, cp.async, ...).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Statically declared __shared__ bytes ptxas accepts per kernel ("too much shared data" above); a kernel that
// needs more declares it extern (dynamic) and the host raises MaxDynamicSharedMemorySize first.
// The same number as smemtile.model.arch.Arch.static_smem_max (48 KiB on every architecture).
constexpr int kStaticSmemBytes = 48 * 1024;

template <int ROWS, int COLS, int PAD, int SWZ_B, int SWZ_M, int SWZ_S>
struct SmemTile {
    static_assert(ROWS > 0 && COLS > 0, "a shared-memory tile needs at least one row and one column");
    static_assert(PAD >= 0, "padding is a number of extra elements per row and cannot be negative");
    static_assert(SWZ_B >= 0 && SWZ_M >= 0 && SWZ_S >= 0, "swizzle parameters B, M, S cannot be negative");
    static_assert(SWZ_B == 0 || SWZ_S >= SWZ_B,
                  "swizzle: the source bits [M+S, M+S+B) must not overlap the target bits [M, M+B), so S >= B");
    static constexpr int kStride = COLS + PAD;     // elements between the starts of consecutive rows
    static constexpr int kElems = ROWS * kStride;  // elements allocated (padding included)
    static_assert(SWZ_B == 0 || kElems % (1 << (SWZ_M + SWZ_B)) == 0,
                  "swizzle: the tile must hold whole groups of 2^(M+B) elements so swizzled offsets stay inside it");

    __host__ __device__ static constexpr int swizzle(int x) {
        return SWZ_B == 0 ? x : x ^ ((x >> SWZ_S) & (((1 << SWZ_B) - 1) << SWZ_M));
    }
    __host__ __device__ static constexpr int offset(int row, int col) { return swizzle(row * kStride + col); }
};

}  // namespace smemtile

#endif  // SMEMTILE_SMEM_LAYOUT_CUH
