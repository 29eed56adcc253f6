// FlashAttention-3 backward, device twin of the NumPy emulator (simulator/flash/backward.py).
//
// The sequence of float operations is the emulator's (docs/backward.md); every float32
// operation is one inline-PTX instruction (mul/fma/add/sub .ftz, ex2/tanh .approx, cvt.rn,
// shfl.sync, mma.sync) so that the compiler can neither contract nor reorder it. Layout and
// the choices left open: docs/backward_twin.md.
//
// Kernels (launched by simulator/device/backward.py, in this order):
//   bwd_preprocess     dPsum = rowsum(dO * O) as flash_bwd_preprocess_kernel.h sums it (each of
//                      kBlockKGmem / 8 lanes an FMUL then an FFMA chain over its 8-element
//                      chunks, then a shfl_xor butterfly), LSE_log2 = LSE * log2(e)
//   bwd_mainloop       one CTA per (batch, head) for ONE n_block (the launch argument); the host
//                      launches the n_blocks one after the other in FA3's deterministic dQ order
//                      (ascending, descending when causal), so the float32 adds into dQaccum
//                      arrive in that order. Over the CTA's m_blocks, ascending:
//                        S = Q K^T, dP = dO V^T           (C = -0: wgmma's scale-d = 0)
//                        [softcap] S = tanh(S * softcap_val), dtanh = 1 - S*S (one FFMA)
//                        mask, P = ex2(S * scale_log2 - LSE_log2), dS = P * (dP - dPsum) [* dtanh]
//                        P, dS rounded to the input type (shared memory)
//                        dV += P^T dO, dK += dS^T Q        (float32 accumulators in global memory)
//                        dQaccum += dS K                   (partial from C = -0, then FADD: no
//                                                           .ftz below head dim 256, as FA3's
//                                                           TMA bulk reduce)
//                      then dK *= softmax_scale.
//   bwd_postprocess_dq dQ = dQaccum * softmax_scale, rounded
//   bwd_postprocess_kv dK, dV rounded; with GQA the query heads' float32 values of a kv head
//                      summed in ascending head order from +0 (subnormals kept, as FA3's TMA bulk
//                      reduce), then * 1.0, then rounded
//
// GEMMs: mma.sync.m16n8k16 (row.col, f32 accumulate), chained over K in ascending k16 steps,
// each step's result the C of the next. For bf16 / f16 this is the arithmetic of the
// emulator's wgmma m64nNk16 (simulator/mma/instructions.py: one fused dot-add model, the same
// parameters, for both instruction families): only k16 and the chaining order matter, not the
// M / N tiling. Operands are read element by element from row-major shared-memory tiles.
//
// Step trace (docs/backward_twin.md "Step traces"): with trace_buf non-null, the CTA of
// (batch * heads + head) == trace_bh in the launch of n_block == trace_n writes, per visited
// m_block m (slot m - trace_m_min), float32 [M, N] arrays S (Q K^T), dP, dtanh (1 without
// softcap), the scores after softcap and mask, P, dS (before rounding), then [M, kd] the dQ
// partial dS K before its add; after the loop (slot trace_steps) dK and dV [N, kd] before
// dK *= softmax_scale. Stores only: the arithmetic is the untraced kernel's.
//
// Compile-time: BW_DTYPE 0 = bf16, 1 = f16. Everything else is a runtime argument.

#ifndef BW_DTYPE
#error "BW_DTYPE must be defined (0 bf16, 1 f16)"
#endif

typedef unsigned int u32;
typedef unsigned short u16;

constexpr int kThreads = 128;  // 4 warps per CTA (every kernel)

// ---- float32 arithmetic, one PTX instruction each -------------------------------------------
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
__device__ __forceinline__ float fadd_keep(float a, float b) {  // subnormals kept (no .ftz)
  float d;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float fsub(float a, float b) {
  float d;
  asm("sub.rn.ftz.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float fneg(float a) {  // exact sign flip (the FFMA flushes after)
  float d;
  asm("neg.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float ex2(float a) {
  float d;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float tanh_(float a) {
  float d;
  asm("tanh.approx.f32 %0, %1;" : "=f"(d) : "f"(a));
  return d;
}
__device__ __forceinline__ float shfl_bfly(float x, int lane_mask) {
  u32 d;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=r"(d) : "r"(__float_as_uint(x)), "r"(lane_mask));
  return __uint_as_float(d);
}

// ---- conversions between float32 and the input type (cvt.rn, exact widening) ---------------
__device__ __forceinline__ u16 to_half(float x) {
  u16 d;
#if BW_DTYPE == 0
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(d) : "f"(x));
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(d) : "f"(x));
#endif
  return d;
}
__device__ __forceinline__ float from_half(u16 x) {
#if BW_DTYPE == 0
  return __uint_as_float((u32)x << 16);
#else
  float d;
  asm("cvt.f32.f16 %0, %1;" : "=f"(d) : "h"(x));
  return d;
#endif
}

// ---- mma.sync m16n8k16, f32 accumulate -----------------------------------------------------------
#if BW_DTYPE == 0
#define BW_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#else
#define BW_MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#endif
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(BW_MMA " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ u32 pack(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }

// An operand tile in shared memory: element (r, c) at p[r * sr + c * sc].
struct Tile {
  const u16* p;
  int sr, sc;
  __device__ __forceinline__ u16 at(int r, int c) const { return p[r * sr + c * sc]; }
};

// D[16 x 8] at (i0, j0) of A[., K] B[K, .]: C in c (accumulator layout of m16n8k16: register r
// at row g + 8 (r >> 1), column 2 q + (r & 1)), K / 16 chained steps in ascending k.
__device__ __forceinline__ void mma_tile(float (&c)[4], const Tile& A, const Tile& B, int i0,
                                         int j0, int K) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  for (int k0 = 0; k0 < K; k0 += 16) {
    u32 a[4], b[2];
    // A element e: row g + 8 ((e >> 1) & 1), column 2 q + (e & 1) + 8 (e >> 2)
    a[0] = pack(A.at(i0 + g, k0 + 2 * q), A.at(i0 + g, k0 + 2 * q + 1));
    a[1] = pack(A.at(i0 + g + 8, k0 + 2 * q), A.at(i0 + g + 8, k0 + 2 * q + 1));
    a[2] = pack(A.at(i0 + g, k0 + 2 * q + 8), A.at(i0 + g, k0 + 2 * q + 9));
    a[3] = pack(A.at(i0 + g + 8, k0 + 2 * q + 8), A.at(i0 + g + 8, k0 + 2 * q + 9));
    // B element e: k = 2 q + (e & 1) + 8 (e >> 1), column g
    b[0] = pack(B.at(k0 + 2 * q, j0 + g), B.at(k0 + 2 * q + 1, j0 + g));
    b[1] = pack(B.at(k0 + 2 * q + 8, j0 + g), B.at(k0 + 2 * q + 9, j0 + g));
    mma16816(c, a, b);
  }
}
__device__ __forceinline__ int acc_row(int r) { return ((threadIdx.x & 31) >> 2) + 8 * (r >> 1); }
__device__ __forceinline__ int acc_col(int r) { return 2 * (threadIdx.x & 3) + (r & 1); }

constexpr u32 kNegZeroBits = 0x80000000u;
constexpr u32 kNegInfBits = 0xff800000u;
constexpr u32 kPosInfBits = 0x7f800000u;
constexpr u32 kLog2eBits = 0x3fb8aa3bu;  // float(M_LOG2E)

// Copy rows [row0, row0 + rows) of head `head` of a [., seqlen, heads, kd] u16 tensor into a
// row-major [rows][kd] tile; rows at or past `valid` are zero (FA3's TMA fills them so).
__device__ __forceinline__ void load_rows(u16* dst, const u16* src, int rows, int row0, int valid,
                                          int heads, int head, int kd) {
  for (int idx = threadIdx.x; idx < rows * kd; idx += kThreads) {
    const int r = idx / kd, c = idx % kd;
    dst[idx] = row0 + r < valid ? src[((long long)(row0 + r) * heads + head) * kd + c] : (u16)0;
  }
}

// ---- preprocess -------------------------------------------------------------------------------------
// out, dout: [B, Sq, H, kd] u16; lse: [B, H, Sq] f32; dpsum, lse_log2: [B, H, rows] f32 with
// rows = m_blocks * kBlockM (rows past Sq: 0 and +inf). A group of kBlockKGmem / 8 lanes per row.
extern "C" __global__ void __launch_bounds__(kThreads)
bwd_preprocess(const u16* __restrict__ out, const u16* __restrict__ dout,
               const float* __restrict__ lse, float* __restrict__ dpsum,
               float* __restrict__ lse_log2, int batch, int seqlen_q, int heads, int kd, int rows) {
  const int width = kd % 128 == 0 ? 128 : (kd % 64 == 0 ? 64 : 32);
  const int lanes = width / 8, chunks = kd / width;
  const int lane = threadIdx.x & 31;
  const int warp = (blockIdx.x * kThreads + threadIdx.x) >> 5;
  const long long row_id = (long long)warp * (32 / lanes) + lane / lanes;  // (b, h, row)
  const int t = lane % lanes;
  const long long total = (long long)batch * heads * rows;
  const bool live = row_id < total;
  const int row = live ? (int)(row_id % rows) : 0;
  const int bh = live ? (int)(row_id / rows) : 0;
  const int b = bh / heads, h = bh % heads;
  float acc = 0.0f;
  const bool in_q = live && row < seqlen_q;
  if (in_q) {
    const long long base = (((long long)b * seqlen_q + row) * heads + h) * kd;
    for (int c = 0; c < chunks; ++c) {
      for (int e = 0; e < 8; ++e) {
        const int col = c * width + t * 8 + e;
        const float g = from_half(dout[base + col]), o = from_half(out[base + col]);
        acc = (c == 0 && e == 0) ? fmul(g, o) : ffma(g, o, acc);
      }
    }
  }
  for (int off = lanes / 2; off >= 1; off /= 2) acc = fadd(acc, shfl_bfly(acc, off));
  if (live && t == 0) {
    float l2 = __uint_as_float(kPosInfBits), ds = 0.0f;
    if (in_q) {
      const float l = lse[((long long)b * heads + h) * seqlen_q + row];
      l2 = __float_as_uint(l) == kNegInfBits ? 0.0f : fmul(l, __uint_as_float(kLog2eBits));
      ds = acc;
    }
    dpsum[row_id] = ds;
    lse_log2[row_id] = l2;
  }
}

// ---- mainloop ------------------------------------------------------------------------------------
__device__ __forceinline__ int idiv(int a, int b) { return a / b; }  // C's truncating division

// q, dout: [B, Sq, H, kd]; k, v: [B, Sk, Hkv, kd] (u16); dpsum, lse_log2: [B, H, rows];
// dq_accum: [B, H, rows, kd] f32; dk_acc, dv_acc: [B, H, n_blocks * kBlockN, kd] f32 (zeroed).
// n_block: the key block of this launch; is_causal / is_local: the kernel's flags; kwin_*: the
// kernel's window (-1 replaced), for the m_block range; win_*: the mask's window (-1 unbounded).
extern "C" __global__ void __launch_bounds__(kThreads)
bwd_mainloop(const u16* __restrict__ q, const u16* __restrict__ k, const u16* __restrict__ v,
             const u16* __restrict__ dout, const float* __restrict__ dpsum,
             const float* __restrict__ lse_log2, float* __restrict__ dq_accum,
             float* __restrict__ dk_acc, float* __restrict__ dv_acc, int seqlen_q, int seqlen_k,
             int heads, int heads_kv, int kd, int kblock_m, int kblock_n, int m_blocks,
             int n_blocks, int n_block, int is_causal, int is_local, int kwin_left,
             int kwin_right, int win_left, int win_right, int softcap, u32 scale_log2_bits,
             u32 softcap_val_bits, u32 softmax_scale_bits, float* __restrict__ trace_buf,
             int trace_bh, int trace_n, int trace_m_min, int trace_steps) {
  const struct {
    int seqlen_q, seqlen_k, heads, heads_kv, kblock_m, kblock_n, m_blocks, n_blocks, n_block;
    int is_causal, is_local, kwin_left, kwin_right, win_left, win_right, softcap;
    u32 scale_log2_bits, softcap_val_bits, softmax_scale_bits;
  } a = {seqlen_q, seqlen_k, heads, heads_kv, kblock_m, kblock_n, m_blocks, n_blocks, n_block,
         is_causal, is_local, kwin_left, kwin_right, win_left, win_right, softcap,
         scale_log2_bits, softcap_val_bits, softmax_scale_bits};
  extern __shared__ __align__(16) unsigned char smem[];
  const int M = a.kblock_m, N = a.kblock_n;
  const int bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads;
  const int hk = h / (a.heads / a.heads_kv);
  const int n = a.n_block;
  const int rows = a.m_blocks * M, keys = a.n_blocks * N;
  u16* sQ = reinterpret_cast<u16*>(smem);
  u16* sdO = sQ + M * kd;
  u16* sK = sdO + M * kd;
  u16* sV = sK + N * kd;
  u16* sP = sV + N * kd;
  u16* sdS = sP + M * N;
  const int warp = threadIdx.x >> 5;
  const float scale_log2 = __uint_as_float(a.scale_log2_bits);
  const float softcap_val = __uint_as_float(a.softcap_val_bits);
  const float neg_zero = __uint_as_float(kNegZeroBits), neg_inf = __uint_as_float(kNegInfBits);

  // get_m_block_min_max (hopper/block.h), C's truncating division
  int m_max = (a.seqlen_q + M - 1) / M;
  if (a.is_local) {
    const int lim = idiv((n + 1) * N + a.seqlen_q - a.seqlen_k + a.kwin_left + M - 1, M);
    m_max = m_max < lim ? m_max : lim;
  }
  int m_min = 0;
  if (a.is_causal || a.is_local) {
    const int right = a.is_causal ? 0 : a.kwin_right;
    const int lo = idiv(n * N + a.seqlen_q - a.seqlen_k - right, M);
    m_min = lo > 0 ? lo : 0;
  }

  load_rows(sK, k + (long long)b * a.seqlen_k * a.heads_kv * kd, N, n * N, a.seqlen_k,
            a.heads_kv, hk, kd);
  load_rows(sV, v + (long long)b * a.seqlen_k * a.heads_kv * kd, N, n * N, a.seqlen_k,
            a.heads_kv, hk, kd);
  float* dk_cta = dk_acc + ((long long)bh * keys + (long long)n * N) * kd;
  float* dv_cta = dv_acc + ((long long)bh * keys + (long long)n * N) * kd;
  const Tile tQ{sQ, kd, 1}, tdO{sdO, kd, 1}, tK{sK, kd, 1};
  const Tile tKt{sK, 1, kd}, tVt{sV, 1, kd};        // K^T, V^T as [kd, N] B operands
  const Tile tPt{sP, 1, N}, tdSt{sdS, 1, N}, tdS{sdS, N, 1};
  const int offset = a.seqlen_k - a.seqlen_q;
  const bool traced = trace_buf != nullptr && bh == trace_bh && n == trace_n;
  const long long step_size = 6LL * M * N + (long long)M * kd;  // floats per traced m_block

  for (int m = m_min; m < m_max; ++m) {
    __syncthreads();  // the previous m_block's readers are done with the tiles
    load_rows(sQ, q + (long long)b * a.seqlen_q * a.heads * kd, M, m * M, a.seqlen_q, a.heads,
              h, kd);
    load_rows(sdO, dout + (long long)b * a.seqlen_q * a.heads * kd, M, m * M, a.seqlen_q,
              a.heads, h, kd);
    __syncthreads();
    const float* lse_m = lse_log2 + (long long)bh * rows + m * M;
    const float* dps_m = dpsum + (long long)bh * rows + m * M;
    float* tr_m = traced ? trace_buf + (long long)(m - trace_m_min) * step_size : nullptr;
    // S, dP, P, dS per 16 x 8 tile of [M, N]
    for (int tile = warp; tile < (M / 16) * (N / 8); tile += kThreads / 32) {
      const int i0 = (tile / (N / 8)) * 16, j0 = (tile % (N / 8)) * 8;
      float s[4] = {neg_zero, neg_zero, neg_zero, neg_zero};
      float dp[4] = {neg_zero, neg_zero, neg_zero, neg_zero};
      mma_tile(s, tQ, tKt, i0, j0, kd);
      mma_tile(dp, tdO, tVt, i0, j0, kd);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + acc_row(r), j = j0 + acc_col(r);
        float x = s[r], dtanh = 1.0f;
        if (a.softcap) {
          x = tanh_(fmul(x, softcap_val));
          dtanh = ffma(fneg(x), x, 1.0f);
        }
        const int row = m * M + i, col = n * N + j;
        bool ok = col < a.seqlen_k;
        if (a.win_right >= 0) ok = ok && col <= row + offset + a.win_right;
        if (a.win_left >= 0) ok = ok && col >= row + offset - a.win_left;
        if (!ok) x = neg_inf;
        const float p = ex2(ffma(x, scale_log2, fneg(lse_m[i])));
        float ds = fmul(p, fsub(dp[r], dps_m[i]));
        if (a.softcap) ds = fmul(ds, dtanh);
        sP[i * N + j] = to_half(p);
        sdS[i * N + j] = to_half(ds);
        if (tr_m) {
          const float step[6] = {s[r], dp[r], dtanh, x, p, ds};
          for (int t = 0; t < 6; ++t) tr_m[(long long)t * M * N + i * N + j] = step[t];
        }
      }
    }
    __syncthreads();
    // dV += P^T dO and dK += dS^T Q: [N, kd], K = M
    for (int tile = warp; tile < (N / 16) * (kd / 8); tile += kThreads / 32) {
      const int i0 = (tile / (kd / 8)) * 16, j0 = (tile % (kd / 8)) * 8;
      float cv[4], ck[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const long long at = (long long)(i0 + acc_row(r)) * kd + j0 + acc_col(r);
        cv[r] = dv_cta[at];
        ck[r] = dk_cta[at];
      }
      mma_tile(cv, tPt, tdO, i0, j0, M);
      mma_tile(ck, tdSt, tQ, i0, j0, M);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const long long at = (long long)(i0 + acc_row(r)) * kd + j0 + acc_col(r);
        dv_cta[at] = cv[r];
        dk_cta[at] = ck[r];
      }
    }
    // dQaccum += dS K: [M, kd], K = N; this launch's CTA is the only writer of its rows
    float* dq_m = dq_accum + ((long long)bh * rows + (long long)m * M) * kd;
    for (int tile = warp; tile < (M / 16) * (kd / 8); tile += kThreads / 32) {
      const int i0 = (tile / (kd / 8)) * 16, j0 = (tile % (kd / 8)) * 8;
      float c[4] = {neg_zero, neg_zero, neg_zero, neg_zero};
      mma_tile(c, tdS, tK, i0, j0, N);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const long long at = (long long)(i0 + acc_row(r)) * kd + j0 + acc_col(r);
        if (tr_m) tr_m[6LL * M * N + at] = c[r];
        // FA3: the TMA bulk reduce below head dim 256 (subnormals kept), atomicAdd at 256 (.ftz)
        dq_m[at] = kd < 256 ? fadd_keep(dq_m[at], c[r]) : fadd(dq_m[at], c[r]);
      }
    }
  }
  __syncthreads();  // dK written by every warp: scale it (FA3's epilogue, dK *= softmax_scale)
  const float scale = __uint_as_float(a.softmax_scale_bits);
  if (traced) {
    float* fin = trace_buf + (long long)trace_steps * step_size;
    for (int idx = threadIdx.x; idx < N * kd; idx += kThreads) {
      fin[idx] = dk_cta[idx];
      fin[(long long)N * kd + idx] = dv_cta[idx];
    }
  }
  for (int idx = threadIdx.x; idx < N * kd; idx += kThreads) dk_cta[idx] = fmul(dk_cta[idx], scale);
}

// ---- postprocess --------------------------------------------------------------------------------
// dq: [B, Sq, H, kd] u16 from dq_accum [B, H, rows, kd]
extern "C" __global__ void __launch_bounds__(kThreads)
bwd_postprocess_dq(const float* __restrict__ dq_accum, u16* __restrict__ dq, int batch,
                   int seqlen_q, int heads, int kd, int rows, u32 softmax_scale_bits) {
  const long long total = (long long)batch * seqlen_q * heads * kd;
  const float scale = __uint_as_float(softmax_scale_bits);
  for (long long idx = (long long)blockIdx.x * kThreads + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * kThreads) {
    const int c = (int)(idx % kd);
    long long rest = idx / kd;
    const int h = (int)(rest % heads);
    rest /= heads;
    const int s = (int)(rest % seqlen_q);
    const int b = (int)(rest / seqlen_q);
    const float x = dq_accum[(((long long)b * heads + h) * rows + s) * kd + c];
    dq[idx] = to_half(fmul(x, scale));
  }
}

// dk, dv: [B, Sk, Hkv, kd] u16 from acc [B, H, keys, kd] (group of heads / heads_kv heads)
extern "C" __global__ void __launch_bounds__(kThreads)
bwd_postprocess_kv(const float* __restrict__ acc, u16* __restrict__ out, int batch, int seqlen_k,
                   int heads, int heads_kv, int kd, int keys) {
  const long long total = (long long)batch * seqlen_k * heads_kv * kd;
  const int g = heads / heads_kv;
  for (long long idx = (long long)blockIdx.x * kThreads + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * kThreads) {
    const int c = (int)(idx % kd);
    long long rest = idx / kd;
    const int hk = (int)(rest % heads_kv);
    rest /= heads_kv;
    const int s = (int)(rest % seqlen_k);
    const int b = (int)(rest / seqlen_k);
    float x;
    if (g == 1) {
      x = acc[(((long long)b * heads + hk) * keys + s) * kd + c];
    } else {
      x = 0.0f;
      for (int j = 0; j < g; ++j)
        x = fadd_keep(x, acc[(((long long)b * heads + hk * g + j) * keys + s) * kd + c]);
      x = fmul(x, 1.0f);
    }
    out[idx] = to_half(x);
  }
}
