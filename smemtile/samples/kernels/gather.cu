// A lookup table in shared memory read at data-dependent indices (a gather): which banks collide depends on
// the data, so only recorded (or emulated) addresses can tell.
#define TABLE 256

__global__ void gather(const float* table, const int* idx, float* out, int n) {
  __shared__ float lut[TABLE];
  lut[threadIdx.x] = table[threadIdx.x];
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = lut[idx[i] & (TABLE - 1)];
}
