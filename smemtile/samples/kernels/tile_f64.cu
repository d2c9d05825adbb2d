// A 32x32 tile of doubles (8-byte accesses, served per half-warp) transposed through shared memory:
// the column read is 16-way (32 wavefronts against an ideal 2); one double of padding fixes it.
#define TILE 32

__global__ void transpose64(double* out, const double* in, int n) {
  __shared__ double tile[TILE][TILE];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
