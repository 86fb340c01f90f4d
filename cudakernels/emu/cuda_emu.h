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
// The mma.sync kernels run too: their PTX building blocks (mma.cuh: the
// mma itself, ldmatrix, cp.async, cvt.rna.tf32; tanh.approx) have host
// stand-ins here, the warp-wide ones through the same per-warp exchange
// as the shuffles. An emulated mma adds its products in double and the
// accumulator in float, which is not the tensor core's order or rounding:
// a check of indexing, layouts and masks, with errors of the right size,
// not of the hardware's bits. A cp.async lands at once, which is one of
// the orders the hardware allows.
//
// What it cannot catch: the GPU's memory model (stale reads through a
// missing fence), misaligned vector accesses, register or shared-memory
// limits, and the Hopper kernels (wgmma and bulk copies are inline PTX
// those files keep).
#pragma once
#include <algorithm>
#include <atomic>
#include <array>
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
// A block's static __shared__ arrays are function statics: blocks run one
// after another, so one instance serves each. The dynamic buffer is the
// test program's flash::smem.
#define __shared__ static
namespace flash {
extern unsigned char smem[];
}

struct emu_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
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
  std::vector<std::array<uint32_t, 10>> frags;  // the mma and ldmatrix exchange
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

// shfl returns x of lane src of this lane's segment of width lanes.
template <typename T> T shfl(T x, int src, int width) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shfl: at most 8 bytes");
  const unsigned lane = tid.x % 32, warp = tid.x / 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  running->words[tid.x] = bits;
  syncwarp();
  bits = running->words[warp * 32 + (lane & ~static_cast<unsigned>(width - 1)) + static_cast<unsigned>(src % width)];
  syncwarp();
  T y;
  std::memcpy(&y, &bits, sizeof(T));
  return y;
}

// ballot returns the warp's predicates as a mask, bit l for lane l.
inline unsigned ballot(int pred) {
  const unsigned warp0 = tid.x / 32 * 32, lanes = std::min(32u, bdim.x - warp0);
  running->words[tid.x] = pred != 0;
  syncwarp();
  unsigned mask = 0;
  for (unsigned l = 0; l < lanes; ++l) mask |= static_cast<unsigned>(running->words[warp0 + l]) << l;
  syncwarp();
  return mask;
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
  b.frags.assign(threads, {});
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
template <typename T> T __shfl_sync(unsigned, T x, int src, int width = 32) { return emu::shfl(x, src, width); }
inline unsigned __ballot_sync(unsigned, int pred) { return emu::ballot(pred); }
inline int __all_sync(unsigned, int pred) {
  const unsigned lanes = std::min(32u, emu::bdim.x - emu::tid.x / 32 * 32);
  return emu::ballot(pred) == (lanes == 32 ? ~0u : (1u << lanes) - 1);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
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
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// A shared address is an offset into the block's dynamic buffer (kernels
// that take one, decode.cuh's copies, add it back to flash::smem).
inline size_t __cvta_generic_to_shared(const void* p) {
  return static_cast<size_t>(static_cast<const unsigned char*>(p) - flash::smem);
}

// The 16-bit types of cuda_bf16.h and cuda_fp16.h, as their bits (a pair
// holds its first value in the low half), with their round-to-nearest-even
// conversions: fp16 through _Float16, bf16 by hand.
struct __nv_bfloat16 {
  uint16_t x;
};
struct __nv_bfloat162 {
  uint16_t x, y;
};
struct __half {
  uint16_t x;
};
struct __half2 {
  uint16_t x, y;
};

namespace emu {

inline uint16_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_value(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
inline uint16_t fp16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
inline float fp16_value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, sizeof h);
  return static_cast<float>(h);
}

// tf32_rna is cvt.rna.tf32.f32: 10 explicit mantissa bits, to nearest,
// ties away from zero, in an fp32 bit pattern.
inline uint32_t tf32_rna(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? 0x7fffffffu : u;  // NaN, ±Inf
  return (u + 0x1000u) & 0xffffe000u;
}

// The warp's exchange for mma and ldmatrix: each lane posts its words,
// the warp meets, each lane reads the others', the warp meets again before
// any lane may post anew.
inline const std::array<uint32_t, 10>& posted(unsigned lane) { return running->frags[tid.x / 32 * 32 + lane]; }

// mma_sync emulates one mma.sync.m16n8kK with fp32 accumulators: A(r, k)
// and B(k, n) read an operand element from the posting lanes' fragments
// (mma.cuh has the layouts), each lane's four outputs add their K
// products in double to the accumulator.
template <int K, typename A, typename B>
void mma_sync(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, A elemA, B elemB) {
  auto& mine = running->frags[tid.x];
  mine = {a[0], a[1], a[2], a[3], b0, b1};
  syncwarp();
  const unsigned lane = tid.x % 32, g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    double sum = 0;
    for (unsigned k = 0; k < K; ++k) sum += static_cast<double>(elemA(row, k)) * elemB(k, col);
    c[e] = static_cast<float>(c[e] + sum);
  }
  syncwarp();
}

// mma_m16n8k16 takes bf16 (bf16) or fp16 pairs: A (16×16) a0 = (g, 2t..),
// a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..); B (16×8) b0 =
// (k 2t.., n g), b1 = (k 2t+8.., n g).
inline void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  const auto value = [bf16](uint32_t word, unsigned k) {
    const uint16_t h = static_cast<uint16_t>(k % 2 ? word >> 16 : word);
    return bf16 ? bf16_value(h) : fp16_value(h);
  };
  mma_sync<16>(
      c, a, b0, b1,
      [&](unsigned r, unsigned k) { return value(posted(r % 8 * 4 + k % 8 / 2)[(r >= 8) + 2 * (k >= 8)], k); },
      [&](unsigned k, unsigned n) { return value(posted(n * 4 + k % 8 / 2)[4 + (k >= 8)], k); });
}

// mma_m16n8k8_tf32 takes tf32 in fp32 bit patterns, whose low 13 bits the
// tensor core ignores: A (16×8) a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4),
// a3 = (g+8, t+4); B (8×8) b0 = (k t, n g), b1 = (k t+4, n g).
inline void mma_m16n8k8_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const auto value = [](uint32_t word) { return __uint_as_float(word & 0xffffe000u); };
  mma_sync<8>(
      c, a, b0, b1, [&](unsigned r, unsigned k) { return value(posted(r % 8 * 4 + k % 4)[(r >= 8) + 2 * (k >= 4)]); },
      [&](unsigned k, unsigned n) { return value(posted(n * 4 + k % 4)[4 + (k >= 4)]); });
}

// ldmatrix_x4 is ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes
// 8i … 8i+7 give the rows of matrix i; lane l receives in r[i] the pair
// (row l/4, columns 2(l%4), 2(l%4)+1) of it, or with trans (rows 2(l%4),
// 2(l%4)+1, column l/4).
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p, bool trans) {
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  running->words[tid.x] = addr;
  syncwarp();
  const unsigned lane = tid.x % 32, warp0 = tid.x / 32 * 32;
  const auto row = [&](unsigned i, unsigned rr) {
    return reinterpret_cast<const uint16_t*>(running->words[warp0 + 8 * i + rr]);
  };
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (trans) {
      lo = row(i, 2 * (lane % 4))[lane / 4], hi = row(i, 2 * (lane % 4) + 1)[lane / 4];
    } else {
      lo = row(i, lane / 4)[2 * (lane % 4)], hi = row(i, lane / 4)[2 * (lane % 4) + 1];
    }
    r[i] = lo | static_cast<uint32_t>(hi) << 16;
  }
  syncwarp();
}

// copy_or_zero is a cp.async of size bytes reading n of them (n = 0 or
// size), the rest zero: it lands at once.
inline void copy_or_zero(void* dst, const void* src, int n, int size) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n));
  if (n < size) std::memset(static_cast<char*>(dst) + n, 0, static_cast<size_t>(size - n));
}

}  // namespace emu

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {emu::bf16_bits(lo), emu::bf16_bits(hi)}; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {emu::fp16_bits(lo), emu::fp16_bits(hi)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {emu::bf16_bits(x)}; }
inline __half __float2half_rn(float x) { return {emu::fp16_bits(x)}; }
inline float __bfloat162float(__nv_bfloat16 x) { return emu::bf16_value(x.x); }
inline float __half2float(__half x) { return emu::fp16_value(x.x); }
