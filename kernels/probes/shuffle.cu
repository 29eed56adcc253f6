// Probes for simulator/hw: shfl.sync (every mode, any b / c / membermask) and the row reductions
// of hopper/softmax.h (thread_reduce_ then the Allreduce<4> butterfly) on accumulator fragments.
//
// Launched from simulator/device/hw_probe.py through NVRTC (sm_90a) three ways: with
// FlashAttention-3's --use_fast_math; without it (CuPy's RawModule still appends -ftz=true);
// and with -ftz=false through NVRTC directly, so the .ftz effect is measured too.
// Values travel as raw 32-bit patterns.

typedef unsigned int u32;

// ---- shfl.sync ----------------------------------------------------------------------------
// One block of 32 threads (one warp) per test case. Case k gives per-lane b, and c, membermask.
// Lanes not named in membermask do not execute the shuffle (PTX: a thread that executes
// shfl.sync must be named in membermask). In shfl_probe_<mode> they exit first; in
// shfl_probe_<mode>_diverged they branch around it and stay alive. A lane reading from a lane
// that did not execute gets an unpredictable value (PTX ISA); the device's answer is recorded.
// The value shuffled by lane L of case k is 0xA0000000 | (k << 8) | L, computed before the branch.
//   d_out[k][L] = d, p_out[k][L] = p (0/1); lanes that skip the shuffle write 0xDEADBEEF / 2.
#define SHFL_BODY(MODE)                                                                       \
    u32 d, p;                                                                                 \
    asm volatile("{\n\t.reg .pred q;\n\t"                                                     \
                 "shfl.sync." #MODE ".b32 %0|q, %2, %3, %4, %5;\n\t"                          \
                 "selp.u32 %1, 1, 0, q;\n\t}"                                                 \
                 : "=r"(d), "=r"(p) : "r"(a), "r"(b), "r"(c), "r"(mask));                     \
    d_out[k * 32 + lane] = d;                                                                 \
    p_out[k * 32 + lane] = p;

#define SHFL_PROBE(MODE)                                                                      \
  extern "C" __global__ void shfl_probe_##MODE(const u32* b_in, const u32* c_in,              \
                                               const u32* mask_in, u32* d_out, u32* p_out) { \
    const u32 k = blockIdx.x, lane = threadIdx.x;                                             \
    const u32 a = 0xA0000000u | (k << 8) | lane;                                              \
    const u32 b = b_in[k * 32 + lane], c = c_in[k], mask = mask_in[k];                        \
    if (!((mask >> lane) & 1u)) {                                                             \
      d_out[k * 32 + lane] = 0xDEADBEEFu;                                                     \
      p_out[k * 32 + lane] = 2u;                                                              \
      return;                                                                                 \
    }                                                                                         \
    SHFL_BODY(MODE)                                                                           \
  }                                                                                           \
  extern "C" __global__ void shfl_probe_##MODE##_diverged(                                    \
      const u32* b_in, const u32* c_in, const u32* mask_in, u32* d_out, u32* p_out) {         \
    const u32 k = blockIdx.x, lane = threadIdx.x;                                             \
    const u32 a = 0xA0000000u | (k << 8) | lane;                                              \
    const u32 b = b_in[k * 32 + lane], c = c_in[k], mask = mask_in[k];                        \
    if ((mask >> lane) & 1u) {                                                                \
      SHFL_BODY(MODE)                                                                         \
    } else {                                                                                  \
      d_out[k * 32 + lane] = 0xDEADBEEFu;                                                     \
      p_out[k * 32 + lane] = 2u;                                                              \
    }                                                                                         \
    __syncwarp();                                                                             \
  }

SHFL_PROBE(bfly)
SHFL_PROBE(idx)
SHFL_PROBE(up)
SHFL_PROBE(down)

// ---- row reductions of an m64nNk16 accumulator fragment ----------------------------------
// Each block is one warpgroup (128 threads) holding NREG = N/2 f32 accumulator registers.
// The row/column view of convert_layout_acc_rowcol for one tile has 2 rows and NREG/2 columns;
// entry (mi, ni) is register (ni & 1) + 2 * mi + 4 * (ni >> 1). The loops below walk it as
// hopper/softmax.h's thread_reduce_ does (ni outer, mi inner), then run the quad butterfly
// (offsets 2, 1) with the own value as the first operand, as Allreduce<4> does.
struct SumOp { __device__ __forceinline__ float operator()(float x, float y) const { return x + y; } };
struct MaxOp { __device__ __forceinline__ float operator()(float x, float y) const { return max(x, y); } };

template <int NREG, bool ZERO_INIT, class Op>
__device__ __forceinline__ void reduce_rows(const u32* frag, const u32* init, u32* out_thread,
                                            u32* out_quad) {
  const long long t = (long long)blockIdx.x * 128 + threadIdx.x;
  float acc[NREG];
#pragma unroll
  for (int r = 0; r < NREG; ++r) acc[r] = __uint_as_float(frag[t * NREG + r]);
  float s[2] = {__uint_as_float(init[t * 2]), __uint_as_float(init[t * 2 + 1])};
  Op op;
#pragma unroll
  for (int ni = 0; ni < NREG / 2; ++ni) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const float v = acc[(ni & 1) + 2 * mi + 4 * (ni >> 1)];
      s[mi] = (ZERO_INIT && ni == 0) ? v : op(s[mi], v);
    }
  }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) out_thread[t * 2 + mi] = __float_as_uint(s[mi]);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int offset = 2; offset >= 1; offset /= 2) s[mi] = op(s[mi], __shfl_xor_sync(0xffffffffu, s[mi], offset));
    out_quad[t * 2 + mi] = __float_as_uint(s[mi]);
  }
}

#define REDUCE_PROBE(NAME, NREG, ZI, OP)                                                       \
  extern "C" __global__ void __launch_bounds__(128)                                           \
  NAME(const u32* frag, const u32* init, u32* out_thread, u32* out_quad) {                    \
    reduce_rows<NREG, ZI, OP>(frag, init, out_thread, out_quad);                              \
  }

REDUCE_PROBE(reduce_sum_n128_zi, 64, true, SumOp)
REDUCE_PROBE(reduce_sum_n128_acc, 64, false, SumOp)
REDUCE_PROBE(reduce_max_n128_zi, 64, true, MaxOp)
REDUCE_PROBE(reduce_max_n128_acc, 64, false, MaxOp)
REDUCE_PROBE(reduce_sum_n40_zi, 20, true, SumOp)
REDUCE_PROBE(reduce_sum_n40_acc, 20, false, SumOp)
REDUCE_PROBE(reduce_max_n40_zi, 20, true, MaxOp)
REDUCE_PROBE(reduce_max_n40_acc, 20, false, MaxOp)
