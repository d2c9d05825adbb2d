// One warp computes a 16x8 tile of C = A * B with tensor cores: A (16x16 fp16) and B (16x8 fp16) staged in
// shared memory with 128-byte rows (64 halves), read by ldmatrix.x4 / ldmatrix.x2.trans and fed to mma.sync.
// Rows 128 bytes apart all start in bank 0: each 8x8 matrix takes 8 wavefronts (8-way); a swizzle fixes it.
#define LD 64

__global__ void hmma(const unsigned short* A, const unsigned short* B, float* C) {
  __shared__ __align__(128) unsigned short As[16][LD];
  __shared__ __align__(128) unsigned short Bs[16][LD];
  int lane = threadIdx.x;
  for (int i = lane; i < 16 * 16; i += 32) {
    As[i / 16][i % 16] = A[i];
    Bs[i / 16][i % 16] = B[i];
  }
  __syncwarp();
  unsigned a0, a1, a2, a3, b0, b1;
  unsigned a_addr = (unsigned)__cvta_generic_to_shared(&As[lane % 16][(lane / 16) * 8]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(a_addr));
  unsigned b_addr = (unsigned)__cvta_generic_to_shared(&Bs[lane % 16][0]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(b0), "=r"(b1) : "r"(b_addr));
  float c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  int row = lane / 4, col = (lane % 4) * 2;
  C[row * 8 + col] = c0;
  C[row * 8 + col + 1] = c1;
  C[(row + 8) * 8 + col] = c2;
  C[(row + 8) * 8 + col + 1] = c3;
}
