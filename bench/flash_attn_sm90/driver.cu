// Standalone driver of the sm_90a FlashAttention forward kernel (smemtile/kernels/flash_attn.cu (PATH 1)): correctness against a CPU
// reference on small odd problems, then timing of issue 32's shapes.
//
//   nvcc -arch=sm_90a -std=c++17 -O3 -lcuda -o fa bench/flash_attn_sm90/driver.cu   (-lcuda optional: the driver
//   API is reached through cudaGetDriverEntryPointByVersion)
//   ./fa check           one CHECK line per case (max abs error, max |ref|, tolerance, pass/fail); exit 1 on a failure
//   ./fa bench           TIME lines (median, min, max of 10 runs, L2 flushed, TFLOP/s), every shape of the issue
//   ./fa bench --quick   the same for seq 8192 only
//   --overlap N          (check or bench) only the schedule OVERLAP N; check --quick: 36 cases (for compute-sanitizer)
//
// The tensor maps are encoded exactly as smemtile/kernels/flash_attn.cu (PATH 1)'s header says (encode_qkv_map below); the lead ports that
// to the flash_attn family's TensorMapArg.

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../smemtile/kernels/flash_attn.cu"  // the family's kernel file (PATH 1: flash_attn_wgmma)

namespace {

// ---- errors -------------------------------------------------------------------------------------------------------
void die(const char* what, const char* detail) {
    std::fprintf(stderr, "error: %s: %s\n", what, detail);
    std::exit(1);
}

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}

// Driver API entry points through the runtime (cudaGetDriverEntryPointByVersion): no link against libcuda, so the
// driver builds on a machine without a GPU driver too (-lcuda on the command line is harmless).
decltype(&cuTensorMapEncodeTiled) p_encode = nullptr;
decltype(&cuGetErrorString) p_error_string = nullptr;

void load_driver_api() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn)
        die("cudaGetDriverEntryPointByVersion", "cuTensorMapEncodeTiled not found (driver older than CUDA 12.0?)");
    p_encode = reinterpret_cast<decltype(&cuTensorMapEncodeTiled)>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuGetErrorString", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        p_error_string = reinterpret_cast<decltype(&cuGetErrorString)>(fn);
}

const char* drv_error(CUresult r) {
    const char* s = nullptr;
    if (p_error_string) p_error_string(r, &s);
    return s ? s : "unknown driver error";
}

// ---- 16-bit conversions (round to nearest even; the kernel's inputs are these bits) -----------------------------
uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {  // finite inputs of moderate size (|f| < 65504), as the tests use
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffffu;
    if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
    if (exp <= 0) {  // subnormal half
        if (exp < -10) return static_cast<uint16_t>(sign);
        mant |= 0x800000u;
        const int shift = 14 - exp;
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still correct
    return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const int exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = std::ldexp(static_cast<float>(mant), -24);
        if (sign) f = -f;
        return f;
    }
    if (exp == 31) {
        const uint32_t u = sign | 0x7f800000u | (mant << 13);
        std::memcpy(&f, &u, 4);
        return f;
    }
    const uint32_t u = sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (mant << 13);
    std::memcpy(&f, &u, 4);
    return f;
}

template <class T>
struct Ty;
template <>
struct Ty<smemtile::bf16> {
    static constexpr const char* name = "bf16";
    static constexpr CUtensorMapDataType tma = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    static uint16_t from(float f) { return f32_to_bf16(f); }
    static float to(uint16_t h) { return bf16_to_f32(h); }
    static constexpr double tol_o = 1e-2;  // see README: P and O rounded to bf16 (2^-9 relative each)
};
template <>
struct Ty<smemtile::f16> {
    static constexpr const char* name = "fp16";
    static constexpr CUtensorMapDataType tma = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    static uint16_t from(float f) { return f32_to_f16(f); }
    static float to(uint16_t h) { return f16_to_f32(h); }
    static constexpr double tol_o = 2e-3;  // 2^-12 relative rounding per step
};
constexpr double kTolLse = 1e-3;

// Deterministic pseudo-random values in [-1, 1): the same on host and device (the bench fills on the device and
// checks sampled rows on the host from the same function).
__host__ __device__ inline float hash_uniform(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + (static_cast<uint64_t>(seed) << 32) + seed;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return static_cast<float>(static_cast<uint32_t>(x >> 40)) * (1.0f / 8388608.0f) - 1.0f;  // 24 bits
}

__device__ inline uint16_t dev_to16(float f, bool bf16) {
    // round to nearest even through the hardware conversions (same results as the host functions)
    unsigned short r;
    if (bf16) {
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(f));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(f));
    }
    return r;
}

__global__ void fill_hash(uint16_t* p, long long n, uint32_t seed, int bf16) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        p[i] = dev_to16(hash_uniform(static_cast<uint64_t>(i), seed), bf16 != 0);
}

// ---- problem ------------------------------------------------------------------------------------------------------
struct Strides {
    long long sb, ss, sh;  // elements
};

struct Problem {
    int batch, heads, seq_q, seq_kv, hd, causal;
    Strides q, k, v, o;
    int overlap = 1;     // the kernel's OVERLAP schedule
    int persistent = 0;  // > 0: min(items, persistent) CTAs that loop over the work items; 0: one CTA per item
};

int g_sms = 132;  // multiprocessors of the device (main sets it)

// [b, s, h, d] with head stride sh (>= d): the dense layout when sh == d.
Strides bshd(int seq, int heads, long long sh) { return Strides{seq * heads * sh, heads * sh, sh}; }

// The tensor map of one of q, k, v: 4-D {HD, seq, heads, batch}, strides in bytes, box {64, rows, 1, 1}, 128B
// swizzle, zero fill out of bounds (smemtile/kernels/flash_attn.cu (PATH 1)'s header).
CUresult encode_qkv_map(CUtensorMap* map, CUtensorMapDataType dtype, const void* base, int hd, int seq, int heads,
                        int batch, const Strides& s, int box_rows) {
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(hd), static_cast<cuuint64_t>(seq),
                                static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
    const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.ss) * 2, static_cast<cuuint64_t>(s.sh) * 2,
                                   static_cast<cuuint64_t>(s.sb) * 2};
    const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    return p_encode(map, dtype, 4, const_cast<void*>(base), dims, strides, box, estr,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

smemtile::TensorMap to_param(const CUtensorMap& m) {
    static_assert(sizeof(CUtensorMap) == sizeof(smemtile::TensorMap), "CUtensorMap is 128 bytes");
    smemtile::TensorMap t;
    std::memcpy(&t, &m, sizeof(t));
    return t;
}

// The kernel's configuration per head dimension (BN, STAGES); ALT: the second configuration the checks run.
template <int HD, bool ALT>
struct Cfg;
template <>
struct Cfg<128, false> {
    static constexpr int BN = 128, STAGES = 2;
};
template <>
struct Cfg<64, false> {
    static constexpr int BN = 128, STAGES = 3;
};
template <>
struct Cfg<128, true> {
    static constexpr int BN = 64, STAGES = 4;
};
template <>
struct Cfg<64, true> {
    static constexpr int BN = 64, STAGES = 4;
};

// Launches the kernel; false (with the reason printed) when a tensor map cannot be encoded.
template <class T, int HD, int BN, int STAGES, int CAUSAL, int OVERLAP>
bool launch_cfg(const Problem& pb, const T* q, const T* k, const T* v, T* o, float* lse, cudaStream_t st) {
    auto kern = flash_attn_wgmma<T, HD, BN, STAGES, CAUSAL, OVERLAP>;
    constexpr int smem = smemtile::fa::smem_bytes<HD, BN, STAGES>();
    static bool attr = false;
    if (!attr) {
        cuda_ok(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
        attr = true;
    }
    // the maps of the last call are reused for the same tensors (the timed loop launches only the kernel)
    static CUtensorMap mq, mk, mv;
    static Problem last_pb{};
    static const void* last[3] = {nullptr, nullptr, nullptr};
    const bool same = last[0] == q && last[1] == k && last[2] == v && !std::memcmp(&last_pb, &pb, sizeof(pb));
    if (!same) {
        const CUresult rq =
            encode_qkv_map(&mq, Ty<T>::tma, q, HD, pb.seq_q, pb.heads, pb.batch, pb.q, smemtile::fa::kBM);
        const CUresult rk = encode_qkv_map(&mk, Ty<T>::tma, k, HD, pb.seq_kv, pb.heads, pb.batch, pb.k, BN);
        const CUresult rv = encode_qkv_map(&mv, Ty<T>::tma, v, HD, pb.seq_kv, pb.heads, pb.batch, pb.v, BN);
        if (rq != CUDA_SUCCESS || rk != CUDA_SUCCESS || rv != CUDA_SUCCESS) {
            std::printf("  cuTensorMapEncodeTiled failed (q %d, k %d, v %d): %s\n", rq, rk, rv,
                        drv_error(rq != CUDA_SUCCESS ? rq : rk != CUDA_SUCCESS ? rk : rv));
            last[0] = last[1] = last[2] = nullptr;
            return false;
        }
        last[0] = q, last[1] = k, last[2] = v;
        last_pb = pb;
    }
    const long long items =
        static_cast<long long>((pb.seq_q + smemtile::fa::kBM - 1) / smemtile::fa::kBM) * pb.batch * pb.heads;
    const dim3 grid(static_cast<unsigned>(pb.persistent > 0 ? std::min<long long>(items, pb.persistent) : items));
    // scale 0 means 1/sqrt(HD) in the kernel (the family passes the problem's scale, 0 by default): the persistent
    // launches pass 0, the others the value, so both conventions are checked
    const float scale = pb.persistent > 0 ? 0.0f : 1.0f / std::sqrt(static_cast<float>(HD));
    kern<<<grid, smemtile::fa::kThreads, smem, st>>>(q, k, v, o, lse, to_param(mq), to_param(mk), to_param(mv),
                                                      pb.batch, pb.heads, pb.seq_q, pb.seq_kv, pb.q.sb, pb.q.ss,
                                                      pb.q.sh, pb.k.sb, pb.k.ss, pb.k.sh, pb.v.sb, pb.v.ss, pb.v.sh,
                                                      pb.o.sb, pb.o.ss, pb.o.sh, scale);
    cuda_ok(cudaGetLastError(), "kernel launch");
    return true;
}

template <class T, int HD, int BN, int STAGES, int CAUSAL>
bool launch_sched(const Problem& pb, const T* q, const T* k, const T* v, T* o, float* lse, cudaStream_t st) {
    if (pb.overlap == 2) return launch_cfg<T, HD, BN, STAGES, CAUSAL, 2>(pb, q, k, v, o, lse, st);
    if (pb.overlap == 1) return launch_cfg<T, HD, BN, STAGES, CAUSAL, 1>(pb, q, k, v, o, lse, st);
    return launch_cfg<T, HD, BN, STAGES, CAUSAL, 0>(pb, q, k, v, o, lse, st);
}

template <class T, bool ALT>
bool launch(const Problem& pb, const T* q, const T* k, const T* v, T* o, float* lse, cudaStream_t st = 0) {
    if (pb.hd == 128) {
        using C = Cfg<128, ALT>;
        return pb.causal ? launch_sched<T, 128, C::BN, C::STAGES, 1>(pb, q, k, v, o, lse, st)
                         : launch_sched<T, 128, C::BN, C::STAGES, 0>(pb, q, k, v, o, lse, st);
    }
    using C = Cfg<64, ALT>;
    return pb.causal ? launch_sched<T, 64, C::BN, C::STAGES, 1>(pb, q, k, v, o, lse, st)
                     : launch_sched<T, 64, C::BN, C::STAGES, 0>(pb, q, k, v, o, lse, st);
}

// Waits for the device; a kernel still running after `seconds` is reported as a hang (an mbarrier that never
// completes) and the process exits, which tears the context down.
void wait_or_die(double seconds, const char* label) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        const cudaError_t e = cudaStreamQuery(0);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) die(label, cudaGetErrorString(e));
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
            std::printf("HANG %s: the kernel did not finish in %.0f s (an mbarrier wait that never completes)\n", label,
                        seconds);
            std::fflush(stdout);
            std::_Exit(1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

// ---- CPU reference (double accumulation over the kernel's 16-bit inputs) --------------------------------------------
// One query row: O[hd] and LSE. get_q(d), get_k(j, d), get_v(j, d) return floats.
template <class GQ, class GK, class GV>
void ref_row(int i, const Problem& pb, GQ get_q, GK get_k, GV get_v, std::vector<double>& out, double& lse) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(pb.hd));
    const int nk = pb.causal ? std::min(i + 1, pb.seq_kv) : pb.seq_kv;
    std::vector<double> s(nk);
    double mx = -INFINITY;
    for (int j = 0; j < nk; ++j) {
        double acc = 0;
        for (int d = 0; d < pb.hd; ++d) acc += static_cast<double>(get_q(d)) * get_k(j, d);
        s[j] = acc * scale;
        mx = std::max(mx, s[j]);
    }
    double l = 0;
    out.assign(pb.hd, 0.0);
    for (int j = 0; j < nk; ++j) {
        const double p = std::exp(s[j] - mx);
        l += p;
        for (int d = 0; d < pb.hd; ++d) out[d] += p * get_v(j, d);
    }
    for (int d = 0; d < pb.hd; ++d) out[d] /= l;
    lse = mx + std::log(l);
}

struct Err {
    double max_err = 0, max_ref = 0, max_lse_err = 0;
    long long bad = 0, bad_lse = 0;
    char first[256] = "";
    char first_lse[256] = "";
};

// ---- check --------------------------------------------------------------------------------------------------------
enum Layout { DENSE = 0, PACKED_QKV = 1, PADDED = 2 };
const char* layout_name(int l) { return l == DENSE ? "dense" : l == PACKED_QKV ? "packed-qkv" : "padded"; }

// ctas > 0: a persistent grid of that many CTAs (each then runs several work items); 0: one CTA per item.
template <class T, bool ALT>
bool check_case1(int ctas, int overlap, int batch, int heads, int sq, int skv, int hd, int causal, int layout,
                 uint32_t seed) {
    Problem pb{batch, heads, sq, skv, hd, causal, {}, {}, {}, {}};
    pb.overlap = overlap;
    pb.persistent = ctas;
    // inputs: one buffer per tensor (PACKED_QKV: one [b, s, 3, h, d] buffer, sq == skv)
    long long q_off = 0, k_off = 0, v_off = 0, in_elems_q, in_elems_kv;
    if (layout == PACKED_QKV) {
        const Strides s{static_cast<long long>(sq) * 3 * heads * hd, 3LL * heads * hd, hd};
        pb.q = pb.k = pb.v = s;
        k_off = static_cast<long long>(heads) * hd;
        v_off = 2LL * heads * hd;
        in_elems_q = batch * s.sb;
        in_elems_kv = 0;
        pb.o = bshd(sq, heads, hd + 2);  // even, not a multiple of 8: 4-byte stores
    } else if (layout == PADDED) {
        pb.q = bshd(sq, heads, hd + 8);
        pb.k = bshd(skv, heads, hd + 16);
        pb.v = bshd(skv, heads, hd + 8);
        in_elems_q = batch * pb.q.sb;
        in_elems_kv = batch * std::max(pb.k.sb, pb.v.sb);
        pb.o = bshd(sq, heads, hd + 1);  // odd: 2-byte stores
    } else {
        pb.q = bshd(sq, heads, hd);
        pb.k = pb.v = bshd(skv, heads, hd);
        pb.o = pb.q;
        in_elems_q = batch * pb.q.sb;
        in_elems_kv = batch * pb.k.sb;
    }
    std::vector<uint16_t> hq(in_elems_q), hk(in_elems_kv), hv(in_elems_kv);
    for (long long i = 0; i < in_elems_q; ++i) hq[i] = Ty<T>::from(hash_uniform(i, seed));
    for (long long i = 0; i < in_elems_kv; ++i) hk[i] = Ty<T>::from(hash_uniform(i, seed + 1));
    for (long long i = 0; i < in_elems_kv; ++i) hv[i] = Ty<T>::from(hash_uniform(i, seed + 2));
    const uint16_t* bq = hq.data();
    const uint16_t* bk = layout == PACKED_QKV ? hq.data() : hk.data();
    const uint16_t* bv = layout == PACKED_QKV ? hq.data() : hv.data();

    const long long o_elems = batch * pb.o.sb;
    const long long lse_elems = static_cast<long long>(batch) * heads * sq;
    const long long guard = 256;  // sentinel elements after O and LSE: nothing may write there
    const uint16_t kSentinel = 0x7fff;
    uint16_t *dq, *dk = nullptr, *dv = nullptr, *dout;
    float* dlse;
    cuda_ok(cudaMalloc(&dq, std::max<long long>(in_elems_q, 1) * 2), "cudaMalloc q");
    if (in_elems_kv) {
        cuda_ok(cudaMalloc(&dk, in_elems_kv * 2), "cudaMalloc k");
        cuda_ok(cudaMalloc(&dv, in_elems_kv * 2), "cudaMalloc v");
    }
    cuda_ok(cudaMalloc(&dout, (o_elems + guard) * 2), "cudaMalloc o");
    cuda_ok(cudaMalloc(&dlse, (lse_elems + guard) * 4), "cudaMalloc lse");
    cuda_ok(cudaMemcpy(dq, hq.data(), in_elems_q * 2, cudaMemcpyHostToDevice), "copy q");
    if (in_elems_kv) {
        cuda_ok(cudaMemcpy(dk, hk.data(), in_elems_kv * 2, cudaMemcpyHostToDevice), "copy k");
        cuda_ok(cudaMemcpy(dv, hv.data(), in_elems_kv * 2, cudaMemcpyHostToDevice), "copy v");
    }
    std::vector<uint16_t> ho(o_elems + guard, kSentinel);
    std::vector<float> hl(lse_elems + guard, -12345.0f);
    cuda_ok(cudaMemcpy(dout, ho.data(), ho.size() * 2, cudaMemcpyHostToDevice), "copy o");
    cuda_ok(cudaMemcpy(dlse, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice), "copy lse");

    const T* pq = reinterpret_cast<const T*>(dq);
    const T* pk = reinterpret_cast<const T*>(layout == PACKED_QKV ? dq + k_off : dk);
    const T* pv = reinterpret_cast<const T*>(layout == PACKED_QKV ? dq + v_off : dv);
    char label[160];
    std::snprintf(label, sizeof(label),
                  "overlap=%d grid=%s %s b=%d h=%d sq=%d skv=%d d=%d causal=%d layout=%s cfg=%s", overlap,
                  ctas ? "2-persistent" : "per-item", Ty<T>::name, batch, heads, sq, skv, hd, causal,
                  layout_name(layout), ALT ? "alt" : "default");
    if (!launch<T, ALT>(pb, pq, pk, pv, reinterpret_cast<T*>(dout), dlse)) {
        std::printf("CHECK %s: FAIL (no launch)\n", label);
        return false;
    }
    wait_or_die(20.0, label);
    cuda_ok(cudaMemcpy(ho.data(), dout, ho.size() * 2, cudaMemcpyDeviceToHost), "copy o back");
    cuda_ok(cudaMemcpy(hl.data(), dlse, hl.size() * 4, cudaMemcpyDeviceToHost), "copy lse back");

    Err e;
    std::vector<char> written(o_elems, 0);
    std::vector<double> ref;
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < sq; ++i) {
                auto gq = [&](int d) { return Ty<T>::to(bq[q_off + b * pb.q.sb + i * pb.q.ss + h * pb.q.sh + d]); };
                auto gk = [&](int j, int d) {
                    return Ty<T>::to(bk[k_off + b * pb.k.sb + j * pb.k.ss + h * pb.k.sh + d]);
                };
                auto gv = [&](int j, int d) {
                    return Ty<T>::to(bv[v_off + b * pb.v.sb + j * pb.v.ss + h * pb.v.sh + d]);
                };
                double lse_ref;
                ref_row(i, pb, gq, gk, gv, ref, lse_ref);
                for (int d = 0; d < hd; ++d) {
                    const long long idx = b * pb.o.sb + i * pb.o.ss + h * pb.o.sh + d;
                    written[idx] = 1;
                    const double got = Ty<T>::to(ho[idx]);
                    const double err = std::isnan(got) ? INFINITY : std::fabs(got - ref[d]);
                    e.max_ref = std::max(e.max_ref, std::fabs(ref[d]));
                    if (err > e.max_err) e.max_err = err;
                    if (!(err <= Ty<T>::tol_o)) {
                        if (e.bad++ == 0)
                            std::snprintf(e.first, sizeof(e.first),
                                          "first O mismatch b=%d h=%d row=%d col=%d got=%.6f ref=%.6f (row %% 64 = %d, "
                                          "warp row %d, col %% 8 = %d)",
                                          b, h, i, d, got, ref[d], i % 64, i % 16, d % 8);
                    }
                }
                const double lg = hl[(static_cast<long long>(b) * heads + h) * sq + i];
                const double le = std::isnan(lg) ? INFINITY : std::fabs(lg - lse_ref);
                e.max_lse_err = std::max(e.max_lse_err, le);
                if (!(le <= kTolLse) && e.bad_lse++ == 0)
                    std::snprintf(e.first_lse, sizeof(e.first_lse),
                                  "first LSE mismatch b=%d h=%d row=%d got=%.6f ref=%.6f", b, h, i, lg, lse_ref);
            }
    long long clobbered = 0, first_clobber = -1;
    for (long long i = 0; i < o_elems + guard; ++i)
        if ((i >= o_elems || !written[i]) && ho[i] != kSentinel) {
            if (first_clobber < 0) first_clobber = i;
            ++clobbered;
        }
    long long lse_clobbered = 0;
    for (long long i = lse_elems; i < lse_elems + guard; ++i) lse_clobbered += hl[i] != -12345.0f;
    const bool ok = e.bad == 0 && e.bad_lse == 0 && clobbered == 0 && lse_clobbered == 0;
    std::printf(
        "CHECK %s: O max_abs_err %.3e (max|ref| %.3f, tol %.1e, %lld bad) LSE max_abs_err %.3e (tol %.1e, %lld bad) "
        "stray writes %lld+%lld %s\n",
        label, e.max_err, e.max_ref, Ty<T>::tol_o, e.bad, e.max_lse_err, kTolLse, e.bad_lse, clobbered, lse_clobbered,
        ok ? "PASS" : "FAIL");
    if (e.bad) std::printf("  %s\n", e.first);
    if (e.bad_lse) std::printf("  %s\n", e.first_lse);
    if (clobbered) std::printf("  first stray O write at element %lld (of %lld + guard)\n", first_clobber, o_elems);
    cudaFree(dq);
    if (dk) cudaFree(dk);
    if (dv) cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
    return ok;
}

// Each case twice: one CTA per work item, then a persistent grid of 2 CTAs (ring and barrier phases carried
// across items and heads).
template <class T, bool ALT>
bool check_case(int overlap, int batch, int heads, int sq, int skv, int hd, int causal, int layout, uint32_t seed) {
    const bool a = check_case1<T, ALT>(0, overlap, batch, heads, sq, skv, hd, causal, layout, seed);
    const bool b = check_case1<T, ALT>(2, overlap, batch, heads, sq, skv, hd, causal, layout, seed);
    return a && b;
}

// quick: 3 cases per (schedule, head dim, causal), for compute-sanitizer; only_ov >= 0: that schedule alone.
int run_check(bool quick, int only_ov) {
    int fails = 0, n = 0;
    const int seqs[] = {1, 17, 100, 129, 300};
    const int pairs[][2] = {{17, 300}, {300, 17}, {129, 100}, {1, 129}, {200, 1}};
    for (int ov : {0, 1, 2}) {  // the simple schedule first: if it passes and a later one fails, that one is wrong
        if (only_ov >= 0 && ov != only_ov) continue;
        uint32_t seed = 1;
        for (int hd : {64, 128})
            for (int causal : {0, 1}) {
                if (quick) {
                    fails += !check_case<smemtile::bf16, false>(ov, 1, 3, 129, 129, hd, causal, DENSE, seed++);
                    fails += !check_case<smemtile::bf16, false>(ov, 3, 1, 300, 17, hd, causal, PADDED, seed++);
                    fails += !check_case<smemtile::f16, true>(ov, 1, 3, 257, 300, hd, causal, DENSE, seed++);
                    n += 3;
                    continue;
                }
                for (int si = 0; si < 5; ++si) {
                    const int s = seqs[si];
                    const int layout = si % 3;  // dense, packed QKV, padded in turn
                    const int batch = si % 2 ? 3 : 1, heads = si % 2 ? 1 : 3;
                    fails += !check_case<smemtile::bf16, false>(ov, batch, heads, s, s, hd, causal, layout, seed++);
                    ++n;
                }
                for (int pi = 0; pi < 5; ++pi) {
                    const int layout = pi % 2 ? PADDED : DENSE;
                    fails += !check_case<smemtile::bf16, false>(ov, 1, 3, pairs[pi][0], pairs[pi][1], hd, causal,
                                                                layout, seed++);
                    ++n;
                }
                // fp16 and the alternative tile (BN 64, 4 stages) on a few
                fails += !check_case<smemtile::f16, false>(ov, 3, 1, 129, 300, hd, causal, DENSE, seed++);
                fails += !check_case<smemtile::f16, false>(ov, 1, 3, 300, 300, hd, causal, PACKED_QKV, seed++);
                fails += !check_case<smemtile::bf16, true>(ov, 1, 3, 300, 129, hd, causal, PADDED, seed++);
                fails += !check_case<smemtile::f16, true>(ov, 3, 1, 257, 257, hd, causal, DENSE, seed++);
                n += 4;
            }
    }
    std::printf("CHECK SUMMARY %d of %d cases pass (each run with one CTA per work item and with a 2-CTA persistent "
                "grid)\n",
                n - fails, n);
    return fails ? 1 : 0;
}

// ---- bench --------------------------------------------------------------------------------------------------------
double causal_pairs(int sq, int skv, int causal) {
    if (!causal) return static_cast<double>(sq) * skv;
    double p = 0;
    for (int i = 0; i < sq; ++i) p += std::min(i + 1, skv);
    return p;
}

int run_bench(bool quick, int only_ov) {
    struct Shape {
        int batch, heads, seq;
    };
    static const Shape all[] = {{16, 16, 4096}, {4, 32, 8192}, {4, 32, 16384}};
    const Shape* first = quick ? all + 1 : all;
    const Shape* last = quick ? all + 2 : all + 3;
    const int hd = 128, runs = 10, warmup = 2;
    const size_t flush_bytes = 256ull << 20;
    void* flush;
    cuda_ok(cudaMalloc(&flush, flush_bytes), "cudaMalloc flush");
    cudaEvent_t e0, e1;
    cuda_ok(cudaEventCreate(&e0), "event");
    cuda_ok(cudaEventCreate(&e1), "event");
    int bad = 0;
    for (const Shape* it = first; it != last; ++it) {
        const Shape& sh = *it;
        const long long elems = static_cast<long long>(sh.batch) * sh.seq * sh.heads * hd;
        uint16_t *q, *k, *v, *o;
        float* lse;
        cuda_ok(cudaMalloc(&q, elems * 2), "cudaMalloc q");
        cuda_ok(cudaMalloc(&k, elems * 2), "cudaMalloc k");
        cuda_ok(cudaMalloc(&v, elems * 2), "cudaMalloc v");
        cuda_ok(cudaMalloc(&o, elems * 2), "cudaMalloc o");
        cuda_ok(cudaMalloc(&lse, static_cast<long long>(sh.batch) * sh.heads * sh.seq * 4), "cudaMalloc lse");
        fill_hash<<<1024, 256>>>(q, elems, 11, 1);
        fill_hash<<<1024, 256>>>(k, elems, 12, 1);
        fill_hash<<<1024, 256>>>(v, elems, 13, 1);
        cuda_ok(cudaDeviceSynchronize(), "fill");
        for (int causal : {0, 1})
        for (int ov : {0, 1, 2})
        for (int pers : {0, 1}) {
            if (only_ov >= 0 && ov != only_ov) continue;
            Problem pb{sh.batch, sh.heads, sh.seq, sh.seq, hd, causal, {}, {}, {}, {}};
            pb.overlap = ov;
            pb.persistent = pers ? g_sms : 0;  // persistent: one CTA per SM (one fits: 160 KB shared memory)
            const char* grid_name = pers ? "persistent" : "per-item";
            pb.q = pb.k = pb.v = pb.o = bshd(sh.seq, sh.heads, hd);
            using T = smemtile::bf16;
            auto go = [&]() {
                if (!launch<T, false>(pb, reinterpret_cast<const T*>(q), reinterpret_cast<const T*>(k),
                                      reinterpret_cast<const T*>(v), reinterpret_cast<T*>(o), lse))
                    die("bench", "tensor map encoding failed");
            };
            for (int w = 0; w < warmup; ++w) {
                go();
                wait_or_die(30.0, "bench warm-up");
            }
            // sampled rows against the CPU reference (values regenerated on the host from the same hash)
            {
                std::vector<uint16_t> row(hd);
                std::vector<double> ref;
                double max_err = 0, max_lse = 0;
                const int samples[][3] = {{0, 0, 0},
                                          {sh.batch - 1, sh.heads - 1, sh.seq - 1},
                                          {sh.batch / 2, sh.heads / 3, sh.seq / 2 + 77},
                                          {0, sh.heads - 1, 129},
                                          {sh.batch - 1, 0, sh.seq - 130}};
                for (const auto& smp : samples) {
                    const int b = smp[0], h = smp[1], i = smp[2];
                    auto at = [&](int j, int d) {
                        return static_cast<uint64_t>(((static_cast<long long>(b) * sh.seq + j) * sh.heads + h) * hd +
                                                     d);
                    };
                    auto gq = [&](int d) { return bf16_to_f32(f32_to_bf16(hash_uniform(at(i, d), 11))); };
                    auto gk = [&](int j, int d) { return bf16_to_f32(f32_to_bf16(hash_uniform(at(j, d), 12))); };
                    auto gv = [&](int j, int d) { return bf16_to_f32(f32_to_bf16(hash_uniform(at(j, d), 13))); };
                    double lse_ref;
                    ref_row(i, pb, gq, gk, gv, ref, lse_ref);
                    cuda_ok(cudaMemcpy(row.data(), o + at(i, 0), hd * 2, cudaMemcpyDeviceToHost), "copy row");
                    float lg;
                    cuda_ok(cudaMemcpy(&lg, lse + (static_cast<long long>(b) * sh.heads + h) * sh.seq + i, 4,
                                       cudaMemcpyDeviceToHost),
                            "copy lse");
                    for (int d = 0; d < hd; ++d) {
                        const double g = bf16_to_f32(row[d]);
                        max_err = std::max(max_err, std::isnan(g) ? INFINITY : std::fabs(g - ref[d]));
                    }
                    max_lse = std::max(max_lse, std::isnan(lg) ? INFINITY : std::fabs(lg - lse_ref));
                }
                const bool ok = max_err <= Ty<T>::tol_o && max_lse <= kTolLse;
                bad += !ok;
                std::printf("SAMPLE overlap=%d grid=%s b=%d h=%d seq=%d causal=%d: 5 rows, O max_abs_err %.3e LSE "
                            "max_abs_err %.3e %s\n",
                            ov, grid_name, sh.batch, sh.heads, sh.seq, causal, max_err, max_lse, ok ? "PASS" : "FAIL");
            }
            std::vector<float> ms;
            for (int r = 0; r < runs; ++r) {
                cuda_ok(cudaMemsetAsync(flush, r & 0xff, flush_bytes), "L2 flush");
                cuda_ok(cudaEventRecord(e0), "event");
                go();
                cuda_ok(cudaEventRecord(e1), "event");
                cuda_ok(cudaEventSynchronize(e1), "kernel");
                float t;
                cuda_ok(cudaEventElapsedTime(&t, e0, e1), "elapsed");
                ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end());
            const double med = (ms[runs / 2 - 1] + ms[runs / 2]) / 2;
            const double flops = 4.0 * sh.batch * sh.heads * hd * causal_pairs(sh.seq, sh.seq, causal);
            std::printf(
                "TIME overlap=%d grid=%s bf16 b=%d h=%d seq=%d d=%d causal=%d BN=%d STAGES=%d: median %.3f ms (min %.3f, "
                "max %.3f, %d runs, L2 flushed) -> %.1f TFLOP/s median (%.1f at min)\n",
                ov, grid_name, sh.batch, sh.heads, sh.seq, hd, causal, Cfg<128, false>::BN, Cfg<128, false>::STAGES,
                med, ms.front(), ms.back(), runs, flops / (med * 1e-3) / 1e12, flops / (ms.front() * 1e-3) / 1e12);
            std::fflush(stdout);
        }
        cudaFree(q);
        cudaFree(k);
        cudaFree(v);
        cudaFree(o);
        cudaFree(lse);
    }
    cudaFree(flush);
    return bad ? 1 : 0;
}

const char* kUsage = "usage: fa check|bench [--quick] [--overlap 0|1|2]";

int usage() {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage();
    const std::string mode = argv[1];
    if (mode != "check" && mode != "bench") return usage();
    bool quick = false;
    int only_ov = -1;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {
            quick = true;
        } else if (a == "--overlap" && i + 1 < argc && std::strlen(argv[i + 1]) == 1 && argv[i + 1][0] >= '0' &&
                   argv[i + 1][0] <= '2') {
            only_ov = argv[++i][0] - '0';
        } else {
            std::fprintf(stderr, "error: bad argument '%s' (%s)\n", a.c_str(), kUsage);
            return 2;
        }
    }
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        std::fprintf(stderr, "error: no CUDA device\n");
        return 3;
    }
    if (prop.major != 9) {
        std::fprintf(stderr, "error: %s is sm_%d%d; this kernel needs sm_90a (Hopper)\n", prop.name, prop.major,
                     prop.minor);
        return 3;
    }
    std::printf("DEVICE %s, %d SMs, sm_%d%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
    g_sms = prop.multiProcessorCount;
    load_driver_api();
    return mode == "check" ? run_check(quick, only_ov) : run_bench(quick, only_ov);
}
