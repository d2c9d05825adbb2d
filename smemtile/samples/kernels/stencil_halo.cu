// 1-D stencil of radius R: each block stages its 256 points plus an R-point halo on each side in shared
// memory (the halo loads run with only R lanes active), then every output sums 2R+1 neighbours.
#define BLOCK 256
#define R 4

__global__ void stencil(const float* in, float* out, int n) {
  __shared__ float s[BLOCK + 2 * R];
  int g = blockIdx.x * BLOCK + threadIdx.x;
  int t = threadIdx.x + R;
  s[t] = in[g];
  if (threadIdx.x < R) {
    s[t - R] = g >= R ? in[g - R] : 0.0f;
    s[t + BLOCK] = g + BLOCK < n ? in[g + BLOCK] : 0.0f;
  }
  __syncthreads();
  float acc = 0.0f;
  for (int o = -R; o <= R; ++o) acc += s[t + o];
  out[g] = acc;
}
