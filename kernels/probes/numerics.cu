// Probes for the numerics layer: one kernel per PTX instruction, each applied elementwise.
//
// Every instruction is written as inline PTX so that neither the front end nor fast-math can
// change it (no contraction of mul+add, no approximation): the bits that come back are the
// instruction's own. Operands and results travel as raw bit patterns (uint32 / uint16).
// Launched from simulator/device/numerics_sweep.py through CuPy RawModule (NVRTC, sm_90a).

typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;

#define GRID_STRIDE_LOOP(i, n) \
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// ---- float32 arithmetic: d = op(a, b) ---------------------------------------------------
#define BINARY_F32(NAME, INSTR)                                                          \
  extern "C" __global__ void NAME(const u32* a, const u32* b, u32* d, i64 n) {           \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      float r;                                                                           \
      asm volatile(INSTR " %0, %1, %2;" : "=f"(r) : "f"(__uint_as_float(a[i])),           \
                   "f"(__uint_as_float(b[i])));                                          \
      d[i] = __float_as_uint(r);                                                         \
    }                                                                                    \
  }

BINARY_F32(probe_fadd, "add.rn.f32")
BINARY_F32(probe_fadd_ftz, "add.rn.ftz.f32")
BINARY_F32(probe_fsub, "sub.rn.f32")
BINARY_F32(probe_fsub_ftz, "sub.rn.ftz.f32")
BINARY_F32(probe_fmul, "mul.rn.f32")
BINARY_F32(probe_fmul_ftz, "mul.rn.ftz.f32")
BINARY_F32(probe_fmax, "max.f32")
BINARY_F32(probe_fmax_ftz, "max.ftz.f32")
BINARY_F32(probe_fmin, "min.f32")
BINARY_F32(probe_fmin_ftz, "min.ftz.f32")

#define TERNARY_F32(NAME, INSTR)                                                         \
  extern "C" __global__ void NAME(const u32* a, const u32* b, const u32* c, u32* d, i64 n) { \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      float r;                                                                           \
      asm volatile(INSTR " %0, %1, %2, %3;" : "=f"(r) : "f"(__uint_as_float(a[i])),       \
                   "f"(__uint_as_float(b[i])), "f"(__uint_as_float(c[i])));              \
      d[i] = __float_as_uint(r);                                                         \
    }                                                                                    \
  }

TERNARY_F32(probe_ffma, "fma.rn.f32")
TERNARY_F32(probe_ffma_ftz, "fma.rn.ftz.f32")

// ---- float32 -> narrow, over a contiguous range of bit patterns: x = base + i -----------
#define CVT_F32_TO_16(NAME, INSTR)                                                       \
  extern "C" __global__ void NAME(u32 base, u16* d, i64 n) {                             \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      u16 r;                                                                             \
      asm volatile(INSTR " %0, %1;" : "=h"(r) : "f"(__uint_as_float(base + (u32)i)));     \
      d[i] = r;                                                                          \
    }                                                                                    \
  }

CVT_F32_TO_16(cvt_bf16, "cvt.rn.bf16.f32")
CVT_F32_TO_16(cvt_bf16_satfinite, "cvt.rn.satfinite.bf16.f32")
CVT_F32_TO_16(cvt_f16, "cvt.rn.f16.f32")
CVT_F32_TO_16(cvt_f16_satfinite, "cvt.rn.satfinite.f16.f32")

// fp8 from f32 exists only as the x2 form; both halves get the same x, the host checks both.
#define CVT_F32_TO_F8X2_SAME(NAME, INSTR)                                                \
  extern "C" __global__ void NAME(u32 base, u16* d, i64 n) {                             \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      u16 r;                                                                             \
      float x = __uint_as_float(base + (u32)i);                                          \
      asm volatile(INSTR " %0, %1, %2;" : "=h"(r) : "f"(x), "f"(x));                     \
      d[i] = r;                                                                          \
    }                                                                                    \
  }

CVT_F32_TO_F8X2_SAME(cvt_e4m3, "cvt.rn.satfinite.e4m3x2.f32")
CVT_F32_TO_F8X2_SAME(cvt_e5m2, "cvt.rn.satfinite.e5m2x2.f32")

// ---- packing order of the x2 forms: d = cvt(a, b) with distinct a and b ------------------
#define CVT_X2_32(NAME, INSTR)                                                           \
  extern "C" __global__ void NAME(const u32* a, const u32* b, u32* d, i64 n) {           \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      u32 r;                                                                             \
      asm volatile(INSTR " %0, %1, %2;" : "=r"(r) : "f"(__uint_as_float(a[i])),           \
                   "f"(__uint_as_float(b[i])));                                          \
      d[i] = r;                                                                          \
    }                                                                                    \
  }
#define CVT_X2_16(NAME, INSTR)                                                           \
  extern "C" __global__ void NAME(const u32* a, const u32* b, u32* d, i64 n) {           \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      u16 r;                                                                             \
      asm volatile(INSTR " %0, %1, %2;" : "=h"(r) : "f"(__uint_as_float(a[i])),           \
                   "f"(__uint_as_float(b[i])));                                          \
      d[i] = r;                                                                          \
    }                                                                                    \
  }

CVT_X2_32(pack_bf16x2, "cvt.rn.bf16x2.f32")
CVT_X2_32(pack_f16x2, "cvt.rn.f16x2.f32")
CVT_X2_16(pack_e4m3x2, "cvt.rn.satfinite.e4m3x2.f32")
CVT_X2_16(pack_e5m2x2, "cvt.rn.satfinite.e5m2x2.f32")

// ---- narrow -> float32, over every 16-bit pattern ----------------------------------------
extern "C" __global__ void widen_bf16(u32* d, i64 n) {
  GRID_STRIDE_LOOP(i, n) {
    float r;
    asm volatile("cvt.f32.bf16 %0, %1;" : "=f"(r) : "h"((u16)i));
    d[i] = __float_as_uint(r);
  }
}

extern "C" __global__ void widen_f16(u32* d, i64 n) {
  GRID_STRIDE_LOOP(i, n) {
    float r;
    asm volatile("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"((u16)i));
    d[i] = __float_as_uint(r);
  }
}

// fp8x2 -> f16x2 -> two f32; input i holds two fp8 codes (hi byte, lo byte).
#define WIDEN_F8(NAME, INSTR)                                                            \
  extern "C" __global__ void NAME(u32* f16x2, u32* hi, u32* lo, i64 n) {                 \
    GRID_STRIDE_LOOP(i, n) {                                                             \
      u32 h2;                                                                            \
      asm volatile(INSTR " %0, %1;" : "=r"(h2) : "h"((u16)i));                           \
      float fh, fl;                                                                      \
      asm volatile("cvt.f32.f16 %0, %1;" : "=f"(fh) : "h"((u16)(h2 >> 16)));             \
      asm volatile("cvt.f32.f16 %0, %1;" : "=f"(fl) : "h"((u16)(h2 & 0xffff)));          \
      f16x2[i] = h2;                                                                     \
      hi[i] = __float_as_uint(fh);                                                       \
      lo[i] = __float_as_uint(fl);                                                       \
    }                                                                                    \
  }

WIDEN_F8(widen_e4m3, "cvt.rn.f16x2.e4m3x2")
WIDEN_F8(widen_e5m2, "cvt.rn.f16x2.e5m2x2")
