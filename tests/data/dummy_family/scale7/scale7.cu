// smemtile test family scale7: out[i] = alpha * in[i], staged through a shared tile of TILE floats per block.
#include "smem_layout.cuh"

template <int TILE>
__global__ void __launch_bounds__(TILE) scale7(const float* __restrict__ in, float* __restrict__ out, int n,
                                                float alpha) {
    __shared__ float s[TILE];
    const int tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * TILE + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (i < n) out[i] = alpha * s[tid];
}
