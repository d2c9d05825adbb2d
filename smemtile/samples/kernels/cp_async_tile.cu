// A 32x32 tile filled by 4-byte cp.async copies (global -> shared, no registers), then read down a column.
// Each warp copies one 128-byte row from one global line: 1 wavefront; the column read is 32-way.
#define TILE 32

__global__ void tile_cp(float* out, const float* in, int n) {
  __shared__ __align__(128) float tile[TILE][TILE];
  int tx = threadIdx.x, ty = threadIdx.y;
  for (int j = 0; j < TILE; j += 8) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(&tile[ty + j][tx]);
    const float* src = in + (blockIdx.y * TILE + ty + j) * n + blockIdx.x * TILE + tx;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src));
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  for (int j = 0; j < TILE; j += 8)
    out[(blockIdx.x * TILE + ty + j) * n + blockIdx.y * TILE + tx] = tile[tx][ty + j];
}
