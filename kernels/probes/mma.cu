// Probes for tensor-core arithmetic: one MMA instruction per tile, D = A * B + C.
//
// Global layouts (per tile t): A[t][M][K] and B[t][K][N] as raw narrow bits (u16 for
// bf16/f16, u8 for e4m3/e5m2), row-major; C[t][M][N] and D[t][M][N] as float32 bits.
// mma.sync: one warp per tile (m16n8k16, m16n8k32). wgmma: one warpgroup per tile
// (m64n8k16, m64n8k32) with A from registers and B from shared memory through a matrix
// descriptor (PTX ISA, "Matrix Descriptor Format"; no swizzle, K-major core matrices of
// 8 rows x 16 bytes, adjacent along K at LBO bytes and along N at SBO bytes).
// Fragment ownership follows the PTX ISA sections "Matrix Fragments for mma.m16n8k16" /
// "mma.m16n8k32" and "wgmma Register Fragments"; a layout error shows up as a mismatch in the
// exact-integer check that simulator/device/mma_probe.py runs first.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

__device__ __forceinline__ u32 pack16(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }
__device__ __forceinline__ u32 pack8(const u8* p) {
  return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// ---- A fragments: 16 rows (row0 .. row0+15) of a row-major tile with K columns ----------
__device__ __forceinline__ void load_a16(const u16* A, int K, int row0, int lane, u32 a[4]) {
  int g = lane >> 2, t = lane & 3;
  const u16* r0 = A + (row0 + g) * K;
  const u16* r8 = A + (row0 + g + 8) * K;
  a[0] = pack16(r0[2 * t], r0[2 * t + 1]);
  a[1] = pack16(r8[2 * t], r8[2 * t + 1]);
  a[2] = pack16(r0[2 * t + 8], r0[2 * t + 9]);
  a[3] = pack16(r8[2 * t + 8], r8[2 * t + 9]);
}

__device__ __forceinline__ void load_a8(const u8* A, int K, int row0, int lane, u32 a[4]) {
  int g = lane >> 2, t = lane & 3;
  const u8* r0 = A + (row0 + g) * K;
  const u8* r8 = A + (row0 + g + 8) * K;
  a[0] = pack8(r0 + 4 * t);
  a[1] = pack8(r8 + 4 * t);
  a[2] = pack8(r0 + 4 * t + 16);
  a[3] = pack8(r8 + 4 * t + 16);
}

// ---- C/D fragments of an m16n8 block at rows row0.., N = 8 ------------------------------
__device__ __forceinline__ void load_c(const u32* C, int row0, int lane, float c[4]) {
  int g = lane >> 2, t = lane & 3;
  c[0] = __uint_as_float(C[(row0 + g) * 8 + 2 * t]);
  c[1] = __uint_as_float(C[(row0 + g) * 8 + 2 * t + 1]);
  c[2] = __uint_as_float(C[(row0 + g + 8) * 8 + 2 * t]);
  c[3] = __uint_as_float(C[(row0 + g + 8) * 8 + 2 * t + 1]);
}

__device__ __forceinline__ void store_d(u32* D, int row0, int lane, const float d[4]) {
  int g = lane >> 2, t = lane & 3;
  D[(row0 + g) * 8 + 2 * t] = __float_as_uint(d[0]);
  D[(row0 + g) * 8 + 2 * t + 1] = __float_as_uint(d[1]);
  D[(row0 + g + 8) * 8 + 2 * t] = __float_as_uint(d[2]);
  D[(row0 + g + 8) * 8 + 2 * t + 1] = __float_as_uint(d[3]);
}

// ---- mma.sync ------------------------------------------------------------------------------
#define MMA_SYNC_K16(NAME, TYPE)                                                             \
  extern "C" __global__ void NAME(const u16* A, const u16* B, const u32* C, u32* D, int tiles) { \
    int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;                            \
    if (tile >= tiles) return;                                                               \
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;                                \
    const u16* a_t = A + tile * 16 * 16;                                                     \
    const u16* b_t = B + tile * 16 * 8;                                                      \
    u32 a[4], b[2];                                                                          \
    float c[4], d[4];                                                                        \
    load_a16(a_t, 16, 0, lane, a);                                                           \
    b[0] = pack16(b_t[(2 * t) * 8 + g], b_t[(2 * t + 1) * 8 + g]);                           \
    b[1] = pack16(b_t[(2 * t + 8) * 8 + g], b_t[(2 * t + 9) * 8 + g]);                       \
    load_c(C + tile * 128, 0, lane, c);                                                      \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "              \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                 \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),         \
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));                              \
    store_d(D + tile * 128, 0, lane, d);                                                     \
  }

MMA_SYNC_K16(mma_sync_m16n8k16_bf16, "bf16")
MMA_SYNC_K16(mma_sync_m16n8k16_f16, "f16")

#define MMA_SYNC_K32(NAME, TYPE)                                                             \
  extern "C" __global__ void NAME(const u8* A, const u8* B, const u32* C, u32* D, int tiles) { \
    int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;                            \
    if (tile >= tiles) return;                                                               \
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;                                \
    const u8* a_t = A + tile * 16 * 32;                                                      \
    const u8* b_t = B + tile * 32 * 8;                                                       \
    u32 a[4], b[2];                                                                          \
    float c[4], d[4];                                                                        \
    load_a8(a_t, 32, 0, lane, a);                                                            \
    u8 bb[8];                                                                                \
    for (int i = 0; i < 4; ++i) {                                                            \
      bb[i] = b_t[(4 * t + i) * 8 + g];                                                      \
      bb[4 + i] = b_t[(16 + 4 * t + i) * 8 + g];                                             \
    }                                                                                        \
    b[0] = pack8(bb);                                                                        \
    b[1] = pack8(bb + 4);                                                                    \
    load_c(C + tile * 128, 0, lane, c);                                                      \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TYPE "." TYPE ".f32 "              \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                 \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),         \
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));                              \
    store_d(D + tile * 128, 0, lane, d);                                                     \
  }

MMA_SYNC_K32(mma_sync_m16n8k32_e4m3, "e4m3")
MMA_SYNC_K32(mma_sync_m16n8k32_e5m2, "e5m2")

// ---- wgmma, A from registers, B (K x 8) from shared memory ----------------------------------
__device__ __forceinline__ unsigned long long make_desc(const void* smem, u32 lbo, u32 sbo) {
  u32 addr = (u32)__cvta_generic_to_shared(smem);
  unsigned long long desc = 0;
  desc |= (unsigned long long)((addr >> 4) & 0x3FFF);
  desc |= (unsigned long long)((lbo >> 4) & 0x3FFF) << 16;
  desc |= (unsigned long long)((sbo >> 4) & 0x3FFF) << 32;
  return desc;  // base offset 0, layout type 0 (no swizzle)
}

// Store B (row-major K x 8, ELEM bytes each) K-major into core matrices of 8 x 16 bytes:
// core (kg) holds k = kg*PER .. kg*PER+PER-1 for n = 0..7, row n at 16*n bytes.
template <typename T>
__device__ __forceinline__ void stage_b(const T* b_t, int K, T* sB) {
  const int per = 16 / sizeof(T);
  for (int i = threadIdx.x; i < K * 8; i += blockDim.x) {
    int k = i / 8, n = i % 8;
    sB[(k / per) * (128 / sizeof(T)) + n * per + (k % per)] = b_t[i];
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
}

#define WGMMA_K16(NAME, TYPE)                                                                \
  extern "C" __global__ void __launch_bounds__(128) NAME(const u16* A, const u16* B,        \
      const u32* C, u32* D, int tiles, u32 lbo, u32 sbo) {                                   \
    __shared__ __align__(256) u16 sB[16 * 8];                                               \
    int tile = blockIdx.x;                                                                   \
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                                    \
    stage_b<u16>(B + tile * 16 * 8, 16, sB);                                                 \
    u32 a[4];                                                                                \
    float d[4];                                                                              \
    load_a16(A + tile * 64 * 16, 16, 16 * warp, lane, a);                                    \
    load_c(C + tile * 64 * 8, 16 * warp, lane, d);                                           \
    unsigned long long desc = make_desc(sB, lbo, sbo);                                       \
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE " "              \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}"                          \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));                   \
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                           \
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");                           \
    store_d(D + tile * 64 * 8, 16 * warp, lane, d);                                          \
  }

WGMMA_K16(wgmma_m64n8k16_bf16, "bf16")
WGMMA_K16(wgmma_m64n8k16_f16, "f16")

#define WGMMA_K32(NAME, TYPE)                                                                \
  extern "C" __global__ void __launch_bounds__(128) NAME(const u8* A, const u8* B,          \
      const u32* C, u32* D, int tiles, u32 lbo, u32 sbo) {                                   \
    __shared__ __align__(256) u8 sB[32 * 8];                                                \
    int tile = blockIdx.x;                                                                   \
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                                    \
    stage_b<u8>(B + tile * 32 * 8, 32, sB);                                                  \
    u32 a[4];                                                                                \
    float d[4];                                                                              \
    load_a8(A + tile * 64 * 32, 32, 16 * warp, lane, a);                                     \
    load_c(C + tile * 64 * 8, 16 * warp, lane, d);                                           \
    unsigned long long desc = make_desc(sB, lbo, sbo);                                       \
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n8k32.f32." TYPE "." TYPE " "              \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}"                             \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));                   \
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                           \
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");                           \
    store_d(D + tile * 64 * 8, 16 * warp, lane, d);                                          \
  }

WGMMA_K32(wgmma_m64n8k32_e4m3, "e4m3")
WGMMA_K32(wgmma_m64n8k32_e5m2, "e5m2")
