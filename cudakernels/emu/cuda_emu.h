// cuda_emu.h runs the CUDA-core kernels of csrc/ on the host, so that the
// tests can check them on a machine without a GPU (emu_test.go). It is a
// model of CUDA's execution, not of its speed: a launch runs its blocks one
// after another, each block's threads as host threads at once, with
// __syncthreads, __syncwarp and __shfl_xor_sync as barriers over the block
// or the warp. Shared memory is the one flash::smem buffer that the test
// program defines (blocks never overlap). Include it first (g++ -include),
// with FLASH_EMU defined: the two PTX instructions common.cuh issues
// through asm have host stand-ins there.
//
// What it cannot catch: the GPU's memory model (stale reads through a
// missing fence), misaligned vector accesses, register or shared-memory
// limits, and anything the tensor-core kernels do (wgmma, mma.sync, bulk
// copies are inline PTX: those files do not compile here).
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__

struct emu_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

namespace emu {

inline thread_local emu_dim3 tid, bid;
inline emu_dim3 bdim, gdim;
inline unsigned dyn_smem = 0;

// The barriers of the running launch: one over the block, one per warp,
// the words __shfl_xor_sync exchanges and the slots __syncthreads_or
// gathers in.
struct Barriers {
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<uint64_t> words;
  std::atomic<int> ors[3];
};
inline Barriers* running = nullptr;
inline thread_local unsigned orCalls = 0;

inline void syncthreads() { running->block->arrive_and_wait(); }

// syncthreads_or is a block barrier that returns whether pred was nonzero
// in any thread. Calls rotate over three slots: thread 0 clears the next
// one before this call's barrier, when every thread has read it (two calls
// ago) and none can write it yet (next call, after this barrier).
inline int syncthreads_or(int pred) {
  const unsigned slot = orCalls++ % 3;
  if (tid.x == 0) running->ors[(slot + 1) % 3].store(0);
  if (pred) running->ors[slot].store(1);
  syncthreads();
  return running->ors[slot].load();
}
inline void syncwarp() { running->warps[tid.x / 32]->arrive_and_wait(); }

// shfl_xor returns x of lane (this lane ^ off) of the warp; every lane of
// the warp must call it, as the kernels' full-mask shuffles require.
template <typename T> T shfl_xor(T x, int off) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shfl_xor: at most 8 bytes");
  const unsigned lane = tid.x % 32, warp = tid.x / 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  running->words[tid.x] = bits;
  syncwarp();
  bits = running->words[warp * 32 + (lane ^ static_cast<unsigned>(off))];
  syncwarp();
  T y;
  std::memcpy(&y, &bits, sizeof(T));
  return y;
}

// launch runs kernel on grid blocks of threads threads with smem_bytes of
// dynamic shared memory (what require_launch reads). The threads are
// created once and take the blocks in turn, a block barrier between two.
template <typename F> void launch(unsigned grid, unsigned threads, unsigned smem_bytes, F kernel) {
  gdim = {grid, 1, 1};
  bdim = {threads, 1, 1};
  dyn_smem = smem_bytes;
  Barriers b;
  b.block = std::make_unique<std::barrier<>>(threads);
  for (unsigned w = 0; w * 32 < threads; ++w)
    b.warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
  b.words.assign(threads, 0);
  for (auto& o : b.ors) o.store(0);
  running = &b;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      tid = {t, 0, 0};
      orCalls = 0;
      for (unsigned blk = 0; blk < grid; ++blk) {
        bid = {blk, 0, 0};
        kernel();
        syncthreads();  // the next block's shared memory is this one's
      }
    });
  for (auto& t : pool) t.join();
  running = nullptr;
}

}  // namespace emu

#define threadIdx (::emu::tid)
#define blockIdx (::emu::bid)
#define blockDim (::emu::bdim)
#define gridDim (::emu::gdim)
inline void __syncthreads() { emu::syncthreads(); }
inline int __syncthreads_or(int pred) { return emu::syncthreads_or(pred); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
template <typename T> T __shfl_xor_sync(unsigned, T x, int off) { return emu::shfl_xor(x, off); }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline double __longlong_as_double(long long i) {
  double f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
template <typename T> T __ldg(const T* p) { return *p; }
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>(static_cast<unsigned long long>(a) * b >> 32); }
[[noreturn]] inline void __trap() {
  std::fprintf(stderr, "emu: __trap (a launch shape the kernel does not accept)\n");
  std::abort();
}
