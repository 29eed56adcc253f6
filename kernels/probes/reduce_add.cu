// Probe: the float32 reduce-adds the FA3 backward accumulates with, on subnormals and signed
// zeros (run by simulator/measure/reduce_add_probe.py). Each kernel adds x[i] into a global
// float32 that holds init[i]:
//   red_add    red.global.add.f32 (what atomicAdd compiles to when its result is unused)
//   atom_add   atom.global.add.f32 (atomicAdd with its result used)
//   bulk_add   cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 (TMA bulk reduce,
//              cute's SM90_BULK_REDUCE_ADD: FA3's dQaccum and GQA dK / dV accumulation)
// One thread per value; bulk_add: one CTA of 256 values, staged in shared memory (n a multiple
// of 4: the bulk reduce moves a multiple of 16 bytes).

typedef unsigned int u32;

extern "C" __global__ void red_add(float* __restrict__ acc, const float* __restrict__ x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) asm volatile("red.global.add.f32 [%0], %1;" :: "l"(acc + i), "f"(x[i]) : "memory");
}

extern "C" __global__ void atom_add(float* __restrict__ acc, const float* __restrict__ x,
                                    float* __restrict__ old, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float o;
    asm volatile("atom.global.add.f32 %0, [%1], %2;" : "=f"(o) : "l"(acc + i), "f"(x[i]) : "memory");
    old[i] = o;
  }
}

// blockDim.x == 256; acc and x offset by blockIdx.x * 256 values (16-byte aligned)
extern "C" __global__ void bulk_add(float* __restrict__ acc, const float* __restrict__ x, int n) {
  __shared__ __align__(128) float buf[256];
  const int base = blockIdx.x * 256;
  const int i = base + threadIdx.x;
  buf[threadIdx.x] = i < n ? x[i] : 0.0f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const int count = (n - base) < 256 ? (n - base) : 256;
    const u32 smem = (u32)__cvta_generic_to_shared(buf);
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 :: "l"(acc + base), "r"(smem), "r"(count * 4) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
