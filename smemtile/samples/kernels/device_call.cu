// Device functions called without inlining (PTX call / ret, arguments and the result passed through .param):
// the tile is written through put() and read down a column through get(). Their pointer argument is chosen
// at run time, so the compiler cannot fold it into the functions: the address reaches them through .param.
// get()'s column read is 32-way, on get()'s own source line. Fix: tile[32][33].
#define TILE 32
#define ROWS 8

__device__ __noinline__ void put(float* t, int row, int col, float v) { t[row * TILE + col] = v; }

__device__ __noinline__ float get(const float* t, int row, int col) { return t[row * TILE + col]; }

__global__ void transpose_call(float* out, float* first, const float* in, int n) {
  __shared__ float tile[TILE][TILE];
  __shared__ float spare[TILE][TILE];
  float* t = n > 0 ? &tile[0][0] : &spare[0][0];  // always tile, known only at run time
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) put(t, threadIdx.y + j, threadIdx.x, in[(y + j) * n + x]);
  __syncthreads();
  if (threadIdx.y == 0) first[(blockIdx.y * gridDim.x + blockIdx.x) * TILE + threadIdx.x] = tile[0][threadIdx.x];
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) out[(y + j) * n + x] = get(t, threadIdx.x, threadIdx.y + j);
}
