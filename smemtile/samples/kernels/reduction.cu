// Block sum with interleaved addressing (index = 2 * s * tid): the stride doubles each step, and so do the
// bank conflicts (2-way, 4-way, ...), the classic first reduction to improve.
#define N 256

__global__ void reduce(const float* in, float* out) {
  __shared__ float sdata[N];
  unsigned tid = threadIdx.x;
  sdata[tid] = in[blockIdx.x * N + tid];
  __syncthreads();
  for (unsigned s = 1; s < N; s *= 2) {
    unsigned index = 2 * s * tid;
    if (index < N) sdata[index] += sdata[index + s];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = sdata[0];
}
