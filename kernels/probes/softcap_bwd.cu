// The float arithmetic of FA3's softcap backward step, written as hopper/utils.h
// (apply_softcap, calculate_dtanh) and hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp write it, so
// that the SASS nvcc makes of it with FA3's flags (-O3 --use_fast_math) can be read:
// simulator/measure/softcap_sass.py compiles it and records the instructions.
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm volatile("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

extern "C" __global__ void softcap_bwd_step(const float* s, const float* dp, float* ds_out,
                                            float* dtanh_out, float softcap_val,
                                            float scale_log2, float lse_log2, float dpsum) {
  int i = threadIdx.x;
  float t = fast_tanh(s[i] * softcap_val);            // apply_softcap
  float dtanh = 1.f - (t * t);                          // calculate_dtanh
  float p = exp2f(t * scale_log2 - lse_log2);           // P
  float ds = p * (dp[i] - dpsum);                       // dS
  ds *= dtanh;
  ds_out[i] = ds;
  dtanh_out[i] = dtanh;
}
