// FlashAttention-3 forward, device twin of the NumPy emulator (simulator/flash/).
//
// The exact sequence of float operations is the contract in docs/forward.md; every float32
// operation below is written as inline PTX (mul/fma/add/sub/max .ftz, ex2/rcp/lg2/tanh .approx,
// cvt.rn, shfl.sync) so that the compiler can neither contract nor reorder it. Layout of the
// kernel and every choice the contract leaves open: docs/kernel.md.
//
// One CTA per (m_block, head, batch) = (blockIdx.x, blockIdx.y, blockIdx.z); FA_KBLOCK_M / 64
// consumer warpgroups of 128 threads, warpgroup w owning rows 64 w .. 64 w + 63 of the tile.
// Data movement is plain: every thread copies 16-byte pieces from global memory into shared
// memory, then fence.proxy.async + __syncthreads; no producer warpgroup, no TMA, one stage.
//
//   S = Q K^T : wgmma m64n{kBlockN}k16 (k32 for e4m3), A = Q and B = K from shared memory
//   O += P V  : wgmma m64n{d}k16 (k32), A = P in registers (converted from the S accumulator),
//               B = V^T (K-major) from shared memory
//
// Shared-memory images are no-swizzle K-major "core matrices" of 8 rows x 16 bytes (PTX ISA,
// "Shared Memory Matrix Layout"): an operand with R rows (M or N) and C bytes per row (along K)
// is stored as [R / 8][C / 16][8][16] bytes, so K-adjacent core matrices are 128 bytes apart
// (descriptor leading byte offset) and M/N-adjacent ones C / 16 * 128 bytes apart (stride byte
// offset); one k-step (32 bytes of K) advances the start address by 256 bytes.
//
// Compile-time configuration (-D, set by simulator/device/forward.py):
//   FA_DTYPE       0 = bf16, 1 = f16, 2 = e4m3 (inputs; output is bf16 for e4m3)
//   FA_HEAD_DIM    64, 96, 128, 192, 256 (FA3's kernel head dims; the launcher zero-pads)
//   FA_KBLOCK_M    64, 128, 192
//   FA_KBLOCK_N    multiple of 16 (32 for e4m3), at most 256
//   FA_SOFTCAP     0 / 1
//   FA_SCHEDULE    0 = "plain", 1 = "intra_wg_overlap"
//   FA_MAX_OFFSET  0, or 8 (e4m3)
//   FA_TRACE       0 (default) / 1: step dump of listed CTAs (docs/kernel.md "Step traces");
//                  with 0 every hook below expands to nothing and the kernel is the plain one
// Runtime: shapes, window (left, right; -1 = unbounded), seqlens_k [B] int32, float32 bits of
// scale_log2 and softcap_val, descale arrays [B, Hkv] float32 (read for e4m3 only).

#ifndef FA_DTYPE
#error "FA_DTYPE must be defined (0 bf16, 1 f16, 2 e4m3)"
#endif
#ifndef FA_HEAD_DIM
#error "FA_HEAD_DIM must be defined"
#endif
#ifndef FA_KBLOCK_M
#error "FA_KBLOCK_M must be defined"
#endif
#ifndef FA_KBLOCK_N
#error "FA_KBLOCK_N must be defined"
#endif
#ifndef FA_SOFTCAP
#define FA_SOFTCAP 0
#endif
#ifndef FA_SCHEDULE
#define FA_SCHEDULE 1
#endif
#ifndef FA_MAX_OFFSET
#define FA_MAX_OFFSET 0
#endif
#ifndef FA_TRACE
#define FA_TRACE 0
#endif

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;

constexpr int kDtype = FA_DTYPE;
constexpr int kHeadDim = FA_HEAD_DIM;
constexpr int kBlockM = FA_KBLOCK_M;
constexpr int kBlockN = FA_KBLOCK_N;
constexpr bool kSoftcap = FA_SOFTCAP != 0;
constexpr bool kOverlap = FA_SCHEDULE != 0;
constexpr int kMaxOffset = FA_MAX_OFFSET;
constexpr bool kFp8 = kDtype == 2;
constexpr int kElemBytes = kFp8 ? 1 : 2;
constexpr int kKStep = 32 / kElemBytes;                 // elements of K per wgmma (32 bytes)
constexpr int kWarpgroups = kBlockM / 64;
constexpr int kThreads = 128 * kWarpgroups;
// FA3's RescaleOBeforeGemm for the overlapped mainloop: head_dim > 128 and not FP8
constexpr bool kRescaleBeforeGemm = kHeadDim > 128 && !kFp8;
constexpr int kDCores = kHeadDim * kElemBytes / 16;     // 16-byte pieces of a Q/K row
constexpr int kNCores = kBlockN * kElemBytes / 16;      // 16-byte pieces of a V^T row
constexpr int kSRegs = kBlockN / 2;                     // S accumulator registers per thread
constexpr int kORegs = kHeadDim / 2;                    // O accumulator registers per thread
constexpr int kNCol = kBlockN / 4;                      // ni extent of the row/col view
constexpr int kQKSteps = kHeadDim / kKStep;
constexpr int kPVSteps = kBlockN / kKStep;
constexpr int kSmemQ = kBlockM * kHeadDim * kElemBytes;
constexpr int kSmemK = kBlockN * kHeadDim * kElemBytes;

static_assert(kDtype >= 0 && kDtype <= 2, "FA_DTYPE: 0 bf16, 1 f16, 2 e4m3");
static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 ||
              kHeadDim == 256, "FA_HEAD_DIM: a kernel head dim of FA3 (inputs are zero-padded)");
static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192, "FA_KBLOCK_M");
static_assert(kBlockN % kKStep == 0 && kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256,
              "FA_KBLOCK_N: multiple of 16 (32 for e4m3) up to 256");
static_assert(kHeadDim % kKStep == 0, "head_dim must be a multiple of the k-step");
static_assert(kMaxOffset == 0 || kMaxOffset == 8, "FA_MAX_OFFSET: 0 or 8");

#if FA_DTYPE == 0
#define FA_AB "bf16"
#define FA_K "16"
#define FA_TRANS_SS ", 0, 0"
#define FA_TRANS_RS ", 0"
#elif FA_DTYPE == 1
#define FA_AB "f16"
#define FA_K "16"
#define FA_TRANS_SS ", 0, 0"
#define FA_TRANS_RS ", 0"
#else
#define FA_AB "e4m3"
#define FA_K "32"
#define FA_TRANS_SS ""
#define FA_TRANS_RS ""
#endif

// ---- float32 arithmetic, one PTX instruction each (docs/forward.md: all .ftz) -------------
__device__ __forceinline__ float fmul(float a, float b) {
  float d;
  asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float ffma(float a, float b, float c) {
  float d;
  asm("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}
__device__ __forceinline__ float fadd(float a, float b) {
  float d;
  asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float fsub(float a, float b) {
  float d;
  asm("sub.rn.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float fmax_(float a, float b) {
  float d;
  asm("max.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float fneg(float a) {  // sign flip of a value that is never subnormal
  float d;
  asm("neg.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float ex2(float a) {
  float d;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float rcp(float a) {
  float d;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float lg2(float a) {
  float d;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float tanh_(float a) {
  float d;
  asm("tanh.approx.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float bits_f32(u32 x) { return __uint_as_float(x); }

// ---- conversions: cvt.rn of two float32 into one packed register (lo -> low half) ----------
__device__ __forceinline__ u32 cvt_bf16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ u32 cvt_f16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ u32 cvt_e4m3x2(float lo, float hi) {  // 16 bits, lo in the low byte
  u16 d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return (u32)d;
}
// P (the V dtype), two elements
__device__ __forceinline__ u32 cvt_p2(float lo, float hi) {
  if constexpr (kDtype == 0) return cvt_bf16x2(lo, hi);
  else if constexpr (kDtype == 1) return cvt_f16x2(lo, hi);
  else return cvt_e4m3x2(lo, hi);
}
// O (the output dtype: bf16 for e4m3 inputs), two elements
__device__ __forceinline__ u32 cvt_o2(float lo, float hi) {
  if constexpr (kDtype == 1) return cvt_f16x2(lo, hi);
  else return cvt_bf16x2(lo, hi);
}

// ---- warp shuffles -----------------------------------------------------------------------------
__device__ __forceinline__ float shfl_bfly(float x, int lane_mask) {
  u32 d;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(d) : "r"(__float_as_uint(x)), "r"(lane_mask));
  return __uint_as_float(d);
}
__device__ __forceinline__ u32 shfl_idx(u32 x, int src_lane) {
  u32 d;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(d) : "r"(x), "r"(src_lane));
  return d;
}
// Allreduce<4> of hopper/utils.h: offsets 2 then 1, x = op(x, shfl_xor(x, off))
__device__ __forceinline__ float quad_allreduce_max(float x) {
  x = fmax_(x, shfl_bfly(x, 2));
  x = fmax_(x, shfl_bfly(x, 1));
  return x;
}
__device__ __forceinline__ float quad_allreduce_sum(float x) {
  x = fadd(x, shfl_bfly(x, 2));
  x = fadd(x, shfl_bfly(x, 1));
  return x;
}

// ---- wgmma ----------------------------------------------------------------------------------------
// Matrix descriptor (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4,
// 16-29 leading byte offset >> 4 (between K-adjacent core matrices), 32-45 stride byte
// offset >> 4 (between M/N-adjacent core matrices), base offset 0, swizzle mode 0 (none).
__device__ __forceinline__ u64 make_desc(const void* smem_ptr, u32 lbo, u32 sbo) {
  const u32 addr = (u32)__cvta_generic_to_shared(smem_ptr);
  u64 desc = (u64)((addr & 0x3FFFFu) >> 4);
  desc |= (u64)((lbo >> 4) & 0x3FFFu) << 16;
  desc |= (u64)((sbo >> 4) & 0x3FFFu) << 32;
  return desc;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// keep the compiler from moving uses of accumulator registers across wgmma.wait_group
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// Accumulator register lists "%0, ..., %(R-1)" and operands "+f"(d[0]) ... for R registers.
#define FA_DREGS_4 "%0, %1, %2, %3"
#define FA_DOPS_4(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define FA_DREGS_8 FA_DREGS_4 ", %4, %5, %6, %7"
#define FA_DREGS_12 FA_DREGS_8 ", %8, %9, %10, %11"
#define FA_DREGS_16 FA_DREGS_12 ", %12, %13, %14, %15"
#define FA_DREGS_20 FA_DREGS_16 ", %16, %17, %18, %19"
#define FA_DREGS_24 FA_DREGS_20 ", %20, %21, %22, %23"
#define FA_DREGS_28 FA_DREGS_24 ", %24, %25, %26, %27"
#define FA_DREGS_32 FA_DREGS_28 ", %28, %29, %30, %31"
#define FA_DREGS_36 FA_DREGS_32 ", %32, %33, %34, %35"
#define FA_DREGS_40 FA_DREGS_36 ", %36, %37, %38, %39"
#define FA_DREGS_44 FA_DREGS_40 ", %40, %41, %42, %43"
#define FA_DREGS_48 FA_DREGS_44 ", %44, %45, %46, %47"
#define FA_DREGS_52 FA_DREGS_48 ", %48, %49, %50, %51"
#define FA_DREGS_56 FA_DREGS_52 ", %52, %53, %54, %55"
#define FA_DREGS_60 FA_DREGS_56 ", %56, %57, %58, %59"
#define FA_DREGS_64 FA_DREGS_60 ", %60, %61, %62, %63"
#define FA_DREGS_68 FA_DREGS_64 ", %64, %65, %66, %67"
#define FA_DREGS_72 FA_DREGS_68 ", %68, %69, %70, %71"
#define FA_DREGS_76 FA_DREGS_72 ", %72, %73, %74, %75"
#define FA_DREGS_80 FA_DREGS_76 ", %76, %77, %78, %79"
#define FA_DREGS_84 FA_DREGS_80 ", %80, %81, %82, %83"
#define FA_DREGS_88 FA_DREGS_84 ", %84, %85, %86, %87"
#define FA_DREGS_92 FA_DREGS_88 ", %88, %89, %90, %91"
#define FA_DREGS_96 FA_DREGS_92 ", %92, %93, %94, %95"
#define FA_DREGS_100 FA_DREGS_96 ", %96, %97, %98, %99"
#define FA_DREGS_104 FA_DREGS_100 ", %100, %101, %102, %103"
#define FA_DREGS_108 FA_DREGS_104 ", %104, %105, %106, %107"
#define FA_DREGS_112 FA_DREGS_108 ", %108, %109, %110, %111"
#define FA_DREGS_116 FA_DREGS_112 ", %112, %113, %114, %115"
#define FA_DREGS_120 FA_DREGS_116 ", %116, %117, %118, %119"
#define FA_DREGS_124 FA_DREGS_120 ", %120, %121, %122, %123"
#define FA_DREGS_128 FA_DREGS_124 ", %124, %125, %126, %127"
#define FA_DOPS_8(d) FA_DOPS_4(d), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FA_DOPS_12(d) FA_DOPS_8(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
#define FA_DOPS_16(d) FA_DOPS_12(d), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FA_DOPS_20(d) FA_DOPS_16(d), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19])
#define FA_DOPS_24(d) FA_DOPS_20(d), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FA_DOPS_28(d) FA_DOPS_24(d), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
#define FA_DOPS_32(d) FA_DOPS_28(d), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FA_DOPS_36(d) FA_DOPS_32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
#define FA_DOPS_40(d) FA_DOPS_36(d), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FA_DOPS_44(d) FA_DOPS_40(d), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43])
#define FA_DOPS_48(d) FA_DOPS_44(d), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FA_DOPS_52(d) FA_DOPS_48(d), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
#define FA_DOPS_56(d) FA_DOPS_52(d), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FA_DOPS_60(d) FA_DOPS_56(d), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59])
#define FA_DOPS_64(d) FA_DOPS_60(d), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FA_DOPS_68(d) FA_DOPS_64(d), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
#define FA_DOPS_72(d) FA_DOPS_68(d), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define FA_DOPS_76(d) FA_DOPS_72(d), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75])
#define FA_DOPS_80(d) FA_DOPS_76(d), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FA_DOPS_84(d) FA_DOPS_80(d), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83])
#define FA_DOPS_88(d) FA_DOPS_84(d), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FA_DOPS_92(d) FA_DOPS_88(d), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91])
#define FA_DOPS_96(d) FA_DOPS_92(d), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FA_DOPS_100(d) FA_DOPS_96(d), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99])
#define FA_DOPS_104(d) FA_DOPS_100(d), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define FA_DOPS_108(d) FA_DOPS_104(d), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107])
#define FA_DOPS_112(d) FA_DOPS_108(d), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define FA_DOPS_116(d) FA_DOPS_112(d), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115])
#define FA_DOPS_120(d) FA_DOPS_116(d), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define FA_DOPS_124(d) FA_DOPS_120(d), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123])
#define FA_DOPS_128(d) FA_DOPS_124(d), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// Wgmma<N>::ss(d, desc_a, desc_b, scale_d): m64nNk16 / k32, A and B from shared memory.
// Wgmma<N>::rs(d, a0..a3, desc_b): A from registers, scale-d = 1.
// N/2 = R accumulator registers; I0.. are the operand numbers that follow them.
template <int N>
struct Wgmma;
#define FA_WGMMA_SHAPE(N, R, I0, I1, I2, I3, I4, I5)                                          \
  template <>                                                                                 \
  struct Wgmma<N> {                                                                           \
    __device__ static __forceinline__ void ss(float (&d)[R], u64 da, u64 db, u32 scale_d) {   \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I2 ", 0;\n"                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k" FA_K ".f32." FA_AB "." FA_AB   \
                   " {" FA_DREGS_##R "}, %" #I0 ", %" #I1 ", p, 1, 1" FA_TRANS_SS ";\n}\n"    \
                   : FA_DOPS_##R(d)                                                           \
                   : "l"(da), "l"(db), "r"(scale_d));                                         \
    }                                                                                         \
    __device__ static __forceinline__ void rs(float (&d)[R], u32 a0, u32 a1, u32 a2, u32 a3,  \
                                              u64 db) {                                       \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I5 ", 0;\n"                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k" FA_K ".f32." FA_AB "." FA_AB   \
                   " {" FA_DREGS_##R "}, {%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}, %" #I4     \
                   ", p, 1, 1" FA_TRANS_RS ";\n}\n"                                          \
                   : FA_DOPS_##R(d)                                                           \
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1u));                  \
    }                                                                                         \
  };
FA_WGMMA_SHAPE(16, 8, 8, 9, 10, 11, 12, 13)
FA_WGMMA_SHAPE(32, 16, 16, 17, 18, 19, 20, 21)
FA_WGMMA_SHAPE(48, 24, 24, 25, 26, 27, 28, 29)
FA_WGMMA_SHAPE(64, 32, 32, 33, 34, 35, 36, 37)
FA_WGMMA_SHAPE(80, 40, 40, 41, 42, 43, 44, 45)
FA_WGMMA_SHAPE(96, 48, 48, 49, 50, 51, 52, 53)
FA_WGMMA_SHAPE(112, 56, 56, 57, 58, 59, 60, 61)
FA_WGMMA_SHAPE(128, 64, 64, 65, 66, 67, 68, 69)
FA_WGMMA_SHAPE(144, 72, 72, 73, 74, 75, 76, 77)
FA_WGMMA_SHAPE(160, 80, 80, 81, 82, 83, 84, 85)
FA_WGMMA_SHAPE(176, 88, 88, 89, 90, 91, 92, 93)
FA_WGMMA_SHAPE(192, 96, 96, 97, 98, 99, 100, 101)
FA_WGMMA_SHAPE(208, 104, 104, 105, 106, 107, 108, 109)
FA_WGMMA_SHAPE(224, 112, 112, 113, 114, 115, 116, 117)
FA_WGMMA_SHAPE(240, 120, 120, 121, 122, 123, 124, 125)
FA_WGMMA_SHAPE(256, 128, 128, 129, 130, 131, 132, 133)

// ---- the kernel ------------------------------------------------------------------------------------
constexpr u32 kLn2Bits = 0x3f317218u;     // float32 nearest ln 2 (__logf = lg2 * ln 2)
constexpr u32 kNegInfBits = 0xff800000u;
constexpr u32 kSumScaleFp8Bits = 0x3b800000u;  // 2^-8 = 1 / (1 << Max_offset)

// 16 bytes moved as one vector load/store (no CUDA headers: NVRTC compiles this file bare)
struct __align__(16) Bytes16 {
  u32 x, y, z, w;
};
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// register r of an m64nNk16 accumulator: row 16 warp + g + 8 ((r >> 1) & 1), column
// 8 (r >> 2) + 2 q + (r & 1); row/col view entry (mi, ni) is register (ni & 1) + 2 mi + 4 (ni >> 1)
__device__ __forceinline__ constexpr int reg_of(int mi, int ni) { return (ni & 1) + 2 * mi + 4 * (ni >> 1); }

// Copy rows [row0, row0 + ROWS) of a [.., seq, heads, d] tensor (row stride in bytes) into a
// K-major core-matrix image [ROWS / 8][kDCores][8][16 bytes]; rows at or after `valid` are zero.
template <int ROWS>
__device__ __forceinline__ void load_rows(u8* smem, const u8* base, long long row_stride_bytes,
                                          int row0, int valid) {
  for (int idx = threadIdx.x; idx < ROWS * kDCores; idx += kThreads) {
    const int r = idx / kDCores, c = idx % kDCores;
    Bytes16 val = {0u, 0u, 0u, 0u};
    if (row0 + r < valid)
      val = *reinterpret_cast<const Bytes16*>(base + (long long)(row0 + r) * row_stride_bytes + c * 16);
    *reinterpret_cast<Bytes16*>(smem + ((r >> 3) * kDCores + c) * 128 + (r & 7) * 16) = val;
  }
}

// V block -> V^T image, K-major for the PV product (N = head dim, K = keys):
// byte (dn, key) at [dn / 8][key bytes / 16][dn % 8][key bytes % 16].
__device__ __forceinline__ void load_vt(u8* smem, const u8* base, long long row_stride_bytes,
                                        int row0, int valid) {
  for (int idx = threadIdx.x; idx < kBlockN * kDCores; idx += kThreads) {
    const int key = idx / kDCores, c = idx % kDCores;
    Bytes16 val = {0u, 0u, 0u, 0u};
    if (row0 + key < valid)
      val = *reinterpret_cast<const Bytes16*>(base + (long long)(row0 + key) * row_stride_bytes + c * 16);
    const u8* bytes = reinterpret_cast<const u8*>(&val);
    const int kb = key * kElemBytes;
#pragma unroll
    for (int e = 0; e < 16 / kElemBytes; ++e) {
      const int dn = c * (16 / kElemBytes) + e;
      u8* dst = smem + ((dn >> 3) * kNCores + (kb >> 4)) * 128 + (dn & 7) * 16 + (kb & 15);
      if constexpr (kElemBytes == 2) {
        *reinterpret_cast<u16*>(dst) = *reinterpret_cast<const u16*>(bytes + 2 * e);
      } else {
        *dst = bytes[e];
      }
    }
  }
}

__device__ __forceinline__ void rescale_o(float (&o)[kORegs], const float (&scale)[2]) {
#pragma unroll
  for (int r = 0; r < kORegs; ++r) o[r] = fmul(o[r], scale[(r >> 1) & 1]);
}

// O += P V_n: chained over kBlockN in ascending k-steps, A = P from registers, C = O.
__device__ __forceinline__ void gemm_pv(float (&o)[kORegs], const u32 (&pa)[kPVSteps][4],
                                        const u8* sV) {
  fence_regs(o);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kPVSteps; ++ks) {
    const u64 db = make_desc(sV + ks * 256, 128, kNCores * 128);
    Wgmma<kHeadDim>::rs(o, pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], db);
  }
  wgmma_commit();
  wgmma_wait0();
  fence_regs(o);
}

// ---- step traces (FA_TRACE=1; docs/kernel.md "Step traces") ---------------------------------
// Each traced CTA owns `trace_slots` records of kTraceRecord u32: a header {kTraceMagic | step,
// n_block (-1: none), slot, 0} and then kTraceCols words per thread (thread-major, so
// [W, 128, kTraceCols]); the float32 state is stored as raw bits. The slot of an event is its
// position in the emulator's event sequence (simulator/flash/forward.py), which is the contract:
// per K/V block qk_gemm, [softcap], mask, max_get_scale, online_softmax, then rescale_o / pv_gemm
// in the emulator's order (the overlapped schedule's P V of the previous block, issued by the
// kernel at the top of the next iteration, lands in the slot after that block's online_softmax),
// then finalize and epilogue. Step ids are the indices of simulator.trace.STEPS.
#if FA_TRACE
constexpr int kTraceColsRaw = kSRegs + 2 > kORegs ? kSRegs + 2 : kORegs;
constexpr int kTraceCols = kTraceColsRaw > 8 ? kTraceColsRaw : 8;
constexpr int kTraceRecord = 4 + kThreads * kTraceCols;
constexpr u32 kTraceMagic = 0xFA300000u;
constexpr int kSc = kSoftcap ? 1 : 0;
constexpr int kIterEvents = 6 + kSc;  // qk, [softcap], mask, max_get_scale, online_softmax, 2 on O
enum TraceStep { kQk = 0, kSoftcapStep, kMask, kMaxGetScale, kOnlineSoftmax, kRescaleO, kPvGemm,
                 kFinalize, kEpilogue };

// first slot of K/V iteration `it` (the overlapped schedule has no O events in iteration 0)
__device__ __forceinline__ int trace_base(int it) {
  return kOverlap ? (it == 0 ? 0 : it * kIterEvents - 2) : it * kIterEvents;
}

struct Tracer {
  u32* rec0;  // first record of this CTA, nullptr when the CTA is not traced
  int slots;
  // this thread's words of record `slot` (the header is written by thread 0), or nullptr
  __device__ __forceinline__ u32* at(int slot, int step, int n) const {
    if (rec0 == nullptr || slot < 0 || slot >= slots) return nullptr;
    u32* rec = rec0 + (long long)slot * kTraceRecord;
    if (threadIdx.x == 0) {
      rec[0] = kTraceMagic | (u32)step;
      rec[1] = (u32)n;
      rec[2] = (u32)slot;
      rec[3] = 0u;
    }
    return rec + 4 + threadIdx.x * kTraceCols;
  }
};
template <int R>
__device__ __forceinline__ void trace_put(u32* p, int col0, const float (&x)[R]) {
  if (p == nullptr) return;
#pragma unroll
  for (int r = 0; r < R; ++r) p[col0 + r] = __float_as_uint(x[r]);
}
// fragment acc_s (s) or acc_o (o) after a step
#define FA_TRACE_FRAG(slot, step, n, x) trace_put(tr.at((slot), (step), (n)), 0, (x))
// max_get_scale: row_max, row_sum (still the previous block's: the rescale is fused into
// online_softmax), scores_scale; before the first online_softmax row_sum is not yet set in
// the kernel (the emulator's Softmax starts it at 0): recorded as 0
#define FA_TRACE_MGS(slot, n)                                                        \
  do {                                                                               \
    u32* p_ = tr.at((slot), kMaxGetScale, (n));                                      \
    const float rs_[2] = {is_first ? 0.0f : row_sum[0], is_first ? 0.0f : row_sum[1]}; \
    trace_put(p_, 0, row_max);                                                       \
    trace_put(p_, 2, rs_);                                                           \
    trace_put(p_, 4, scores_scale);                                                  \
  } while (0)
// online_softmax: acc_s (P in float32, before the conversion) and the thread-local row_sum
#define FA_TRACE_OS(slot, n)                                 \
  do {                                                       \
    u32* p_ = tr.at((slot), kOnlineSoftmax, (n));            \
    trace_put(p_, 0, s);                                     \
    trace_put(p_, kSRegs, row_sum);                          \
  } while (0)
// finalize: row_sum (quad-reduced), scores_scale, lse, row_max
#define FA_TRACE_FIN(slot)                                   \
  do {                                                       \
    u32* p_ = tr.at((slot), kFinalize, -1);                  \
    trace_put(p_, 0, tr_sum);                                \
    trace_put(p_, 2, scores_scale);                          \
    trace_put(p_, 4, lse_row);                               \
    trace_put(p_, 6, row_max);                               \
  } while (0)
#define FA_TRACE_ONLY(...) __VA_ARGS__
#else
#define FA_TRACE_FRAG(slot, step, n, x) ((void)0)
#define FA_TRACE_MGS(slot, n) ((void)0)
#define FA_TRACE_OS(slot, n) ((void)0)
#define FA_TRACE_FIN(slot) ((void)0)
#define FA_TRACE_ONLY(...)
#endif

extern "C" __global__ void __launch_bounds__(kThreads, 1)
fa3_forward(const u8* __restrict__ q, const u8* __restrict__ k, const u8* __restrict__ v,
            u16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ seqlens_k,
            const float* __restrict__ q_descale, const float* __restrict__ k_descale,
            const float* __restrict__ v_descale, int seqlen_q, int seqlen_k_max, int heads,
            int heads_kv, int window_left, int window_right, u32 scale_log2_bits,
            u32 softcap_val_bits
#if FA_TRACE
            , u32* __restrict__ trace_buf, const int* __restrict__ trace_ctas, int trace_count,
            int trace_slots
#endif
            ) {
  extern __shared__ __align__(1024) u8 smem[];
  u8* sQ = smem;
  u8* sK = smem + kSmemQ;
  u8* sV = smem + kSmemQ + kSmemK;

  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hkv = h / (heads / heads_kv);
  const int seqlen_k = seqlens_k[b];
  const int offset = seqlen_k - seqlen_q;  // bottom-right alignment
#if FA_TRACE
  Tracer tr{nullptr, trace_slots};  // traced iff (b, h, m_block) is listed in trace_ctas [count, 3]
  for (int t = 0; t < trace_count; ++t)
    if (trace_ctas[3 * t] == b && trace_ctas[3 * t + 1] == h && trace_ctas[3 * t + 2] == m_block)
      tr.rec0 = trace_buf + (long long)t * trace_slots * kTraceRecord;
#endif

  // ---- block range (docs/forward.md "Block range and order") ----
  int hi = seqlen_k;
  if (window_right >= 0) hi = imin(seqlen_k, (m_block + 1) * kBlockM + offset + window_right);
  const int n_block_max = hi <= 0 ? 0 : (hi + kBlockN - 1) / kBlockN;
  int n_block_min = 0;
  if (window_left >= 0) {
    const int lo = m_block * kBlockM + offset - window_left;
    n_block_min = lo <= 0 ? 0 : lo / kBlockN;
  }

  // ---- which blocks mask (and so run with Check_inf): hopper/block.h, docs/forward.md ----
  const bool is_causal = window_left < 0 && window_right == 0;
  const bool is_local = (window_left >= 0 || window_right >= 0) && !is_causal;
  const int wl = is_local && window_left < 0 ? seqlen_k_max - 1 : window_left;
  const int wr = is_local && window_right < 0 ? seqlen_q - 1 : window_right;
  int n_mask_min = n_block_max;  // get_n_block_min_causal_local_mask
  if (is_causal || is_local)
    n_mask_min = imax(n_block_min, (m_block * kBlockM + offset + (is_local ? wr : 0)) / kBlockN);
  int n_before_local = n_block_min;  // get_n_block_min_before_local_mask
  if (is_local)
    n_before_local = imax(n_block_min, ((m_block + 1) * kBlockM + offset - wl + kBlockN - 1) / kBlockN);

  const long long q_row_bytes = (long long)heads * kHeadDim * kElemBytes;
  const long long kv_row_bytes = (long long)heads_kv * kHeadDim * kElemBytes;
  u16* out_bh = out + ((long long)b * seqlen_q * heads + h) * kHeadDim;  // row stride heads * d
  float* lse_bh = lse + ((long long)b * heads + h) * seqlen_q;

  if (n_block_max <= n_block_min) {  // nothing to attend: O = 0, LSE = -inf
    for (int idx = threadIdx.x; idx < kBlockM * (kHeadDim / 2); idx += kThreads) {
      const int r = idx / (kHeadDim / 2), c = idx % (kHeadDim / 2);
      const int grow = m_block * kBlockM + r;
      if (grow < seqlen_q)
        *reinterpret_cast<u32*>(out_bh + (long long)grow * heads * kHeadDim + 2 * c) = 0u;
    }
    for (int r = threadIdx.x; r < kBlockM; r += kThreads) {
      const int grow = m_block * kBlockM + r;
      if (grow < seqlen_q) lse_bh[grow] = bits_f32(kNegInfBits);
    }
    return;
  }

  const int tid = threadIdx.x;
  const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3;
  int grow[2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) grow[mi] = m_block * kBlockM + 64 * wg + 16 * warp + g + 8 * mi;

  // ---- per-CTA constants: FP8 descales folded in (docs/forward.md) ----
  float scale_log2 = bits_f32(scale_log2_bits);
  float softcap_val = bits_f32(softcap_val_bits);
  float final_scale = 1.0f;
  if constexpr (kFp8) {
    const int dix = b * heads_kv + hkv;
    const float qk = fmul(q_descale[dix], k_descale[dix]);
    if constexpr (kSoftcap) softcap_val = fmul(softcap_val, qk);
    else scale_log2 = fmul(scale_log2, qk);
    final_scale = v_descale[dix];
  }
  (void)softcap_val;

  // ---- Q tile -> shared memory (rows >= seqlen_q are zero) ----
  load_rows<kBlockM>(sQ, q + ((long long)b * seqlen_q * heads + h) * kHeadDim * kElemBytes,
                     q_row_bytes, m_block * kBlockM, seqlen_q);
  const u8* k_bh = k + ((long long)b * seqlen_k_max * heads_kv + hkv) * kHeadDim * kElemBytes;
  const u8* v_bh = v + ((long long)b * seqlen_k_max * heads_kv + hkv) * kHeadDim * kElemBytes;
  const u8* sQ_wg = sQ + wg * 8 * kDCores * 128;

  float o[kORegs];
#pragma unroll
  for (int r = 0; r < kORegs; ++r) o[r] = 0.0f;
  float row_max[2], row_sum[2], scores_scale[2] = {1.0f, 1.0f};
  u32 pa[kPVSteps][4];

  for (int n = n_block_max - 1, it = 0; n >= n_block_min; --n, ++it) {
    const bool is_first = it == 0;
    const bool check_inf = is_first || n >= n_mask_min || n < n_before_local;
    FA_TRACE_ONLY(const int ev = trace_base(it);)

    // intra_wg_overlap: the previous block's P V, issued one iteration late (traced in the
    // emulator's slots, after this block's online_softmax)
    if constexpr (kOverlap) {
      if (!is_first) {
        if constexpr (kRescaleBeforeGemm) {
          rescale_o(o, scores_scale);  // previous block's scale
          FA_TRACE_FRAG(ev + 4 + kSc, kRescaleO, n, o);
        }
        gemm_pv(o, pa, sV);
        FA_TRACE_FRAG(ev + (kRescaleBeforeGemm ? 5 : 4) + kSc, kPvGemm, n + 1, o);
      }
    }

    // ---- K_n, V_n -> shared memory (keys >= seqlens_k[b] are zero) ----
    __syncthreads();
    load_rows<kBlockN>(sK, k_bh, kv_row_bytes, n * kBlockN, seqlen_k);
    load_vt(sV, v_bh, kv_row_bytes, n * kBlockN, seqlen_k);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    // ---- 1. S = Q K_n^T, ascending k-steps, the first with scale-d = 0 ----
    float s[kSRegs];
#pragma unroll
    for (int r = 0; r < kSRegs; ++r) s[r] = 0.0f;
    fence_regs(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kQKSteps; ++ks) {
      const u64 da = make_desc(sQ_wg + ks * 256, 128, kDCores * 128);
      const u64 db = make_desc(sK + ks * 256, 128, kDCores * 128);
      Wgmma<kBlockN>::ss(s, da, db, ks > 0 ? 1u : 0u);
    }
    wgmma_commit();
    wgmma_wait0();
    fence_regs(s);
    FA_TRACE_FRAG(ev, kQk, n, s);

    // ---- 2. softcap ----
    if constexpr (kSoftcap) {
#pragma unroll
      for (int r = 0; r < kSRegs; ++r) s[r] = tanh_(fmul(s[r], softcap_val));
      FA_TRACE_FRAG(ev + 1, kSoftcapStep, n, s);
    }

    // ---- 3. mask ----
#pragma unroll
    for (int r = 0; r < kSRegs; ++r) {
      const int i = grow[(r >> 1) & 1];
      const int j = n * kBlockN + 8 * (r >> 2) + 2 * qd + (r & 1);
      bool ok = j < seqlen_k;
      if (window_right >= 0) ok = ok && j <= i + offset + window_right;
      if (window_left >= 0) ok = ok && j >= i + offset - window_left;
      if (!ok) s[r] = bits_f32(kNegInfBits);
    }
    FA_TRACE_FRAG(ev + 1 + kSc, kMask, n, s);

    // ---- 4. max_get_scale (Check_inf on masking blocks only; row_sum *= scale is fused
    //         into step 5's first add, as the compiler does with softmax.h) ----
    if (is_first) {
#pragma unroll
      for (int ni = 0; ni < kNCol; ++ni)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
          row_max[mi] = ni == 0 ? s[reg_of(mi, 0)] : fmax_(row_max[mi], s[reg_of(mi, ni)]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        row_max[mi] = quad_allreduce_max(row_max[mi]);
        scores_scale[mi] = 1.0f;
      }
    } else {
      float prev[2] = {row_max[0], row_max[1]};
#pragma unroll
      for (int ni = 0; ni < kNCol; ++ni)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) row_max[mi] = fmax_(row_max[mi], s[reg_of(mi, ni)]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        row_max[mi] = quad_allreduce_max(row_max[mi]);
        const float cur = check_inf && row_max[mi] == bits_f32(kNegInfBits) ? 0.0f : row_max[mi];
        scores_scale[mi] = ex2(fmul(fsub(prev[mi], cur), scale_log2));
      }
    }
    FA_TRACE_MGS(ev + 2 + kSc, n);

    // ---- 5. online_softmax: scale_apply_exp2, then thread-local reduce_sum ----
    float neg_max_scaled[2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      float ms;
      if constexpr (kMaxOffset != 0) ms = ffma(row_max[mi], scale_log2, -(float)kMaxOffset);
      else ms = fmul(row_max[mi], scale_log2);
      if (check_inf && row_max[mi] == bits_f32(kNegInfBits)) ms = 0.0f;
      neg_max_scaled[mi] = fneg(ms);
    }
#pragma unroll
    for (int r = 0; r < kSRegs; ++r) s[r] = ex2(ffma(s[r], scale_log2, neg_max_scaled[(r >> 1) & 1]));
#pragma unroll
    for (int ni = 0; ni < kNCol; ++ni)
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        row_sum[mi] = ni > 0 ? fadd(row_sum[mi], s[reg_of(mi, ni)])
                    : is_first ? s[reg_of(mi, 0)]
                               : ffma(scores_scale[mi], row_sum[mi], s[reg_of(mi, 0)]);
    FA_TRACE_OS(ev + 3 + kSc, n);

    // ---- 6. P = cvt(p) into the A-operand registers of the PV wgmma ----
    if constexpr (!kFp8) {
      // k16 A fragment: a0 = (row g, cols 2q..), a1 = (row g+8, cols 2q..), a2 / a3 the same at
      // cols 8 + 2q..: exactly the accumulator registers 8 ks + 0..7, no data movement.
#pragma unroll
      for (int ks = 0; ks < kPVSteps; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[ks][i] = cvt_p2(s[8 * ks + 2 * i], s[8 * ks + 2 * i + 1]);
    } else {
      // k32 A fragment: thread q needs cols 4q..4q+3 (and 16 + 4q..) of rows g, g+8, held by
      // lanes 2 (q & 1) and 2 (q & 1) + 1 of its quad in n8 block q >> 1 (and 2 + (q >> 1)).
      const int src1 = (lane & ~3) | ((qd & 1) << 1), src2 = src1 | 1;
      const int sh = (qd >> 1) * 16;
#pragma unroll
      for (int ks = 0; ks < kPVSteps; ++ks) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {      // n8 blocks 4ks + 2 half + {0, 1}
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            const int j0 = 4 * ks + 2 * half;
            const u32 w = cvt_p2(s[4 * j0 + 2 * mi], s[4 * j0 + 2 * mi + 1]) |
                          (cvt_p2(s[4 * (j0 + 1) + 2 * mi], s[4 * (j0 + 1) + 2 * mi + 1]) << 16);
            const u32 x = shfl_idx(w, src1), y = shfl_idx(w, src2);
            pa[ks][2 * half + mi] = ((x >> sh) & 0xffffu) | (((y >> sh) & 0xffffu) << 16);
          }
        }
      }
    }

    // ---- 7. rescale_o and P V ----
    if constexpr (!kOverlap) {
      rescale_o(o, scores_scale);
      FA_TRACE_FRAG(ev + 4 + kSc, kRescaleO, n, o);
      gemm_pv(o, pa, sV);
      FA_TRACE_FRAG(ev + 5 + kSc, kPvGemm, n, o);
    } else if constexpr (!kRescaleBeforeGemm) {
      if (!is_first) {
        rescale_o(o, scores_scale);
        FA_TRACE_FRAG(ev + 5 + kSc, kRescaleO, n, o);
      }
    }
  }
  FA_TRACE_ONLY(int ev_end = trace_base(n_block_max - n_block_min);)
  if constexpr (kOverlap) {  // the last block's P V
    if constexpr (kRescaleBeforeGemm) {
      rescale_o(o, scores_scale);  // with a single block a multiply of +0 by 1, not traced
      FA_TRACE_ONLY(if (n_block_max - n_block_min > 1) FA_TRACE_FRAG(ev_end++, kRescaleO, n_block_min, o);)
    }
    gemm_pv(o, pa, sV);
    FA_TRACE_FRAG(ev_end++, kPvGemm, n_block_min, o);
  }

  // ---- finalize(final_scale) ----
  const float ln2 = bits_f32(kLn2Bits);
  const float ln2_scale = fmul(scale_log2, ln2);
  float lse_row[2];
  FA_TRACE_ONLY(float tr_sum[2];)
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    float sum = quad_allreduce_sum(row_sum[mi]);
    FA_TRACE_ONLY(tr_sum[mi] = sum;)
    const float inv = (sum == 0.0f || sum != sum) ? 0.0f : rcp(sum);
    scores_scale[mi] = fmul(inv, final_scale);
    if constexpr (kMaxOffset != 0) sum = fmul(sum, bits_f32(kSumScaleFp8Bits));
    lse_row[mi] = (sum == 0.0f || sum != sum) ? bits_f32(kNegInfBits)
                                              : ffma(row_max[mi], ln2_scale, fmul(lg2(sum), ln2));
  }
  FA_TRACE_FIN(ev_end);
  rescale_o(o, scores_scale);
  FA_TRACE_FRAG(ev_end + 1, kEpilogue, -1, o);

  // ---- epilogue: cvt.rn to the output dtype, rows < seqlen_q ----
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    if (grow[mi] < seqlen_q) {
      u16* orow = out_bh + (long long)grow[mi] * heads * kHeadDim;
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j)
        *reinterpret_cast<u32*>(orow + 8 * j + 2 * qd) = cvt_o2(o[4 * j + 2 * mi], o[4 * j + 2 * mi + 1]);
      if (qd == 0) lse_bh[grow[mi]] = lse_row[mi];
    }
  }
}
