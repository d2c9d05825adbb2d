// Dynamic shared memory (extern __shared__) holding a pitch x 32 tile whose pitch is a kernel argument:
// a column read with pitch 32 is 32-way, with pitch 33 conflict-free. Launch with --smem = 32 * pitch * 4.
extern __shared__ float buf[];

__global__ void column_sum(const float* in, float* out, int pitch) {
  int t = threadIdx.x;
  for (int r = 0; r < 32; ++r) buf[r * pitch + t] = in[(blockIdx.x * 32 + r) * 32 + t];
  __syncthreads();
  float s = 0.0f;
  for (int c = 0; c < 32; ++c) s += buf[t * pitch + c];
  out[blockIdx.x * 32 + t] = s;
}
