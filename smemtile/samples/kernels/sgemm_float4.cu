// SGEMM with a 64x64 block tile, BK = 8, 4x4 outputs per thread (256 threads): A is stored transposed
// (As[k][m]) so that each thread reads its 4 rows of A and 4 columns of B as float4 vectors.
#define BM 64
#define BN 64
#define BK 8

__global__ void sgemm4(const float* A, const float* B, float* C, int n) {
  __shared__ __align__(16) float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  int tid = threadIdx.x;
  int tx = tid % 16, ty = tid / 16;
  const float* a = A + blockIdx.y * BM * n;
  const float* b = B + blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < n; k0 += BK) {
    // A tile 64x8: thread loads 2 elements, stores them transposed
    for (int i = tid; i < BM * BK; i += 256) {
      int m = i / BK, k = i % BK;
      As[k][m] = a[m * n + k0 + k];
    }
    for (int i = tid; i < BK * BN; i += 256) {
      int k = i / BN, c = i % BN;
      Bs[k][c] = b[(k0 + k) * n + c];
    }
    __syncthreads();
    for (int k = 0; k < BK; ++k) {
      float4 av = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      float4 bv = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += ar[i] * br[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      C[(blockIdx.y * BM + ty * 4 + i) * n + blockIdx.x * BN + tx * 4 + j] = acc[i][j];
}
