// Probes for the MUFU (special function unit) approximations of sm_90, one kernel per form.
//
// PTX forms are written as inline PTX so the bits that come back are the instruction's own:
//   ex2.approx{.ftz}.f32, rcp.approx{.ftz}.f32, lg2.approx{.ftz}.f32, tanh.approx.f32.
// CUDA-level forms are plain CUDA source, so that NVRTC with --use_fast_math lowers them the way
// FlashAttention-3's build does: exp2f(x), __expf(x), __logf(x), 1.f / x.
// Each form has two kernels: <name>_range (x = base + i over a contiguous range of bit
// patterns, for the exhaustive sweep) and <name>_list (x = given bit patterns, for samples).
// Launched from simulator/device/mufu_calibrate.py through CuPy RawModule (NVRTC, sm_90a).

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define GRID_STRIDE_LOOP(i, n) \
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

#define PTX_UNARY(INSTR)                                                                 \
  __device__ __forceinline__ float op(float x) {                                         \
    float r;                                                                             \
    asm volatile(INSTR " %0, %1;" : "=f"(r) : "f"(x));                                   \
    return r;                                                                            \
  }

#define KERNELS(NAME)                                                                    \
  extern "C" __global__ void NAME##_range(u32 base, u32* d, i64 n) {                     \
    GRID_STRIDE_LOOP(i, n) { d[i] = __float_as_uint(NAME::op(__uint_as_float(base + (u32)i))); } \
  }                                                                                      \
  extern "C" __global__ void NAME##_list(const u32* x, u32* d, i64 n) {                  \
    GRID_STRIDE_LOOP(i, n) { d[i] = __float_as_uint(NAME::op(__uint_as_float(x[i]))); }  \
  }

// ---- PTX instructions -----------------------------------------------------------------------
namespace ex2 { PTX_UNARY("ex2.approx.f32") }
namespace ex2_ftz { PTX_UNARY("ex2.approx.ftz.f32") }
namespace rcp { PTX_UNARY("rcp.approx.f32") }
namespace rcp_ftz { PTX_UNARY("rcp.approx.ftz.f32") }
namespace lg2 { PTX_UNARY("lg2.approx.f32") }
namespace lg2_ftz { PTX_UNARY("lg2.approx.ftz.f32") }
namespace tanh_ { PTX_UNARY("tanh.approx.f32") }
KERNELS(ex2)
KERNELS(ex2_ftz)
KERNELS(rcp)
KERNELS(rcp_ftz)
KERNELS(lg2)
KERNELS(lg2_ftz)
KERNELS(tanh_)

// ---- CUDA-level forms under --use_fast_math ---------------------------------------------------
namespace exp2f_fast { __device__ __forceinline__ float op(float x) { return exp2f(x); } }
namespace expf_fast { __device__ __forceinline__ float op(float x) { return __expf(x); } }
namespace logf_fast { __device__ __forceinline__ float op(float x) { return __logf(x); } }
namespace recip_fast { __device__ __forceinline__ float op(float x) { return 1.f / x; } }
KERNELS(exp2f_fast)
KERNELS(expf_fast)
KERNELS(logf_fast)
KERNELS(recip_fast)

// ---- structure probes -----------------------------------------------------------------------
// For every x in [0, n) (n <= 2^31, so x >= 0) and every k in 1..23: does out[x] differ from
// out[x with its k low bits cleared]? counts[(biased exponent of x) * 24 + k] += 1 if so.
extern "C" __global__ void low_bit_dependence(const u32* out, i64 n, u32* counts) {
  __shared__ u32 local[256 * 24];
  for (int j = threadIdx.x; j < 256 * 24; j += blockDim.x) local[j] = 0;
  __syncthreads();
  GRID_STRIDE_LOOP(i, n) {
    u32 x = (u32)i;
    u32 e = (x >> 23) & 0xff;
    u32 v = out[x];
    for (int k = 1; k < 24; ++k) {
      u32 y = x & ~((1u << k) - 1u);
      if (out[y] != v) atomicAdd(&local[e * 24 + k], 1u);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < 256 * 24; j += blockDim.x)
    if (local[j]) atomicAdd(&counts[j], local[j]);
}
