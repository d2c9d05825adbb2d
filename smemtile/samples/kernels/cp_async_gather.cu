// A lookup table and its indices copied into shared memory by cp.async (global -> shared, no registers), then
// read at the copied indices: the gather's shared addresses depend on data only cp.async moved, so the CPU
// emulator copies those bytes as the GPU does. The table by 4-byte copies, the indices by 16-byte ones.
#define TABLE 256

__global__ void cp_gather(float* out, const float* table, const int* idx, int n) {
  __shared__ __align__(16) float lut[TABLE];
  __shared__ __align__(16) int ix[256];
  int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  unsigned d = (unsigned)__cvta_generic_to_shared(&lut[t]);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(table + t));
  if (t < 64) {
    unsigned q = (unsigned)__cvta_generic_to_shared(&ix[4 * t]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(q), "l"(idx + base + 4 * t));
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  int i = base + t;
  if (i < n) out[i] = lut[ix[t] & (TABLE - 1)];
}
