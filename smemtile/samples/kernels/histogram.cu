// 256-bin histogram with shared atomics: each block counts into its own bins, then adds them to the global ones.
#define BINS 256

__global__ void histogram(const unsigned* data, unsigned* hist, int n) {
  __shared__ unsigned bins[BINS];
  bins[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&bins[data[i] % BINS], 1u);
  __syncthreads();
  atomicAdd(&hist[threadIdx.x], bins[threadIdx.x]);
}
