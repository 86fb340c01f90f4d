// cuda_emu.h runs the CUDA-core kernels of csrc/ on the host, so that the
// tests can check them on a machine without a GPU (emu_test.go). It is a
// model of CUDA's execution, not of its speed: a launch runs its blocks one
// after another, each block's threads as fibers that take turns at the
// barriers (__syncthreads, __syncwarp, and the shuffles, which exchange
// through a per-warp buffer between two warp barriers). Shared memory is the one flash::smem buffer that the test
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
// The Hopper kernels run too: sm90_emu.h, included at the end, has
// wgmma, mbarriers, bulk copies and named barriers.
//
// What it cannot catch: the GPU's memory model (stale reads through a
// missing fence), misaligned vector accesses, register or shared-memory
// limits.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <sys/mman.h>
#include <ucontext.h>
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
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

namespace emu {

// Every thread of a block is a fiber (ucontext) on the one host thread
// that launches: it runs until it meets a barrier or returns, and the
// launch's scheduler runs the others meanwhile. A barrier costs a few
// context switches instead of waking host threads, and a barrier that
// some thread never reaches is reported, not a hang. tid is the running
// fiber's, bid the running block's.
inline emu_dim3 tid, bid;
inline emu_dim3 bdim, gdim;
inline unsigned dyn_smem = 0;

// Stacks of the fibers, kept between launches: kStack bytes each, above a
// page that faults (mmap's guard), so that an overflow stops the program;
// stack_of returns the top of thread t's.
inline constexpr size_t kStack = 256 << 10, kGuard = 4096;
inline std::vector<unsigned char*> stacks;
inline unsigned char* stack_of(unsigned t) {
  while (stacks.size() <= t) {
    void* m = mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, kGuard, PROT_NONE) != 0) {
      std::fprintf(stderr, "emu: no memory for a thread's stack\n");
      std::abort();
    }
    stacks.push_back(static_cast<unsigned char*>(m) + kGuard);
  }
  return stacks[t] + kStack;  // the top: stacks grow down
}

// Context is where a fiber or the scheduler stopped, and switch_to
// leaves one for another. On x86-64 a switch saves the callee-saved
// registers on the stack and swaps stack pointers (ucontext's swapcontext
// also sets the signal mask, a system call per switch, which made it
// three times slower); elsewhere it is ucontext.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
extern "C" void emu_switch(void** save, void* load);
asm(R"(
        .text
        .globl emu_switch
        .type emu_switch, @function
emu_switch:
        pushq %rbp
        pushq %rbx
        pushq %r12
        pushq %r13
        pushq %r14
        pushq %r15
        movq %rsp, (%rdi)
        movq %rsi, %rsp
        popq %r15
        popq %r14
        popq %r13
        popq %r12
        popq %rbx
        popq %rbp
        ret
        .size emu_switch, .-emu_switch
)");
inline void switch_to(Context& from, Context& to) { emu_switch(&from.sp, to.sp); }
// prepare makes ctx start entry on the stack below top (16-byte aligned):
// six zero registers for emu_switch to pop, entry to return into, and a
// zero return address under it, so that entry starts as a called function
// does.
inline void prepare(Context& ctx, unsigned char* top, Context&, void (*entry)()) {
  auto* sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(entry);
  for (int r = 0; r < 6; ++r) *--sp = nullptr;
  ctx.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
inline void switch_to(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void prepare(Context& ctx, unsigned char* top, Context& link, void (*entry)()) {
  getcontext(&ctx.uc);
  ctx.uc.uc_stack.ss_sp = top - kStack;
  ctx.uc.uc_stack.ss_size = kStack;
  ctx.uc.uc_link = &link.uc;
  makecontext(&ctx.uc, entry, 0);
}
#endif

// Fiber is one thread of the running block: its context, the barrier it
// waits at (and that barrier's generation then; for a named barrier its
// number), its __syncthreads_or calls. A spinning fiber (spin: an
// mbarrier wait that found its phase incomplete) is always runnable.
struct Fiber {
  enum Wait { none, block, warp, named, spin };
  Context ctx;
  Wait wait = none;
  unsigned gen = 0, orCalls = 0, bar = 0;
  bool done = false;
};

// Pending is a wgmma a thread issued and has not yet waited for
// (sm90_emu.h): it runs at the wgmma.wait_group that completes it.
struct Pending {
  float* d;
  int n, k, elem;             // N, K, operand type (sm90_emu.h's Elem)
  uint64_t a, b;              // descriptors (a unused when aFrag)
  const uint32_t* aFrag;      // A from registers (rs), else null
  bool scaleD, transA, transB;
  unsigned group;             // commit group it belongs to
};

// BulkReduce is a cp.reduce.async.bulk a thread issued and has not yet
// waited for (sm90_emu.h): it reads shared memory and adds into global
// memory at the cp.async.bulk.wait_group.read that completes its group.
struct BulkReduce {
  float* dst;
  uint32_t src, bytes;
  unsigned group;  // bulk group it belongs to
};

// Mbarrier is an mbarrier's state (sm90_emu.h): arrivals a phase expects
// and still awaits, the transaction bytes it awaits, phases completed.
struct Mbarrier {
  unsigned expected = 0, pending = 0, phase = 0;
  long long tx = 0;
};

// Launch is the state of the running launch: its fibers, the block
// barrier's and each warp's arrivals and generation (a barrier opens when
// every thread that has not returned arrived, as on the GPU), the named
// barriers' (bar.sync id, count: open at count arrivals), the words the
// shuffles exchange, the mma and ldmatrix fragments, the slots
// __syncthreads_or gathers in, the mbarriers by shared address, each
// thread's wgmma groups, and a count of changes that spinning threads
// wait for (progress: none in a whole pass is a deadlock).
struct Launch {
  std::vector<Fiber> fibers;
  Context scheduler;
  unsigned arrived = 0, gen = 0, exited = 0;
  std::vector<unsigned> warpArrived, warpGen, warpExited;
  unsigned namedArrived[16] = {}, namedGen[16] = {};
  std::vector<uint64_t> words;
  std::vector<std::array<uint32_t, 6>> frags;  // each lane's mma A (4) and B (2) registers
  int ors[3] = {0, 0, 0};
  std::vector<std::pair<uint32_t, Mbarrier>> mbarriers;
  std::vector<std::vector<Pending>> pending;
  std::vector<unsigned> committed;  // groups each thread committed
  std::vector<std::vector<BulkReduce>> bulk;  // each thread's bulk reductions not yet waited for
  std::vector<unsigned> bulkCommitted;        // bulk groups each thread committed
  uint64_t progress = 0;
  void (*body)(void*) = nullptr;
  void* kernel = nullptr;
};
inline Launch* running = nullptr;

// arrive blocks the running fiber at the block barrier (warp = false) or
// its warp's; the last arrival opens it and runs on.
inline void arrive(bool warp) {
  Launch& l = *running;
  Fiber& f = l.fibers[tid.x];
  const unsigned w = tid.x / 32, lanes = std::min(32u, bdim.x - 32 * w);
  unsigned& arrived = warp ? l.warpArrived[w] : l.arrived;
  unsigned& gen = warp ? l.warpGen[w] : l.gen;
  const unsigned expected = warp ? lanes - l.warpExited[w] : bdim.x - l.exited;
  ++l.progress;
  if (++arrived == expected) {
    arrived = 0, ++gen;
    return;
  }
  f.wait = warp ? Fiber::warp : Fiber::block, f.gen = gen;
  switch_to(f.ctx, l.scheduler);
}

// arrive_named is bar.sync id, count: the count-th arrival opens it.
inline void arrive_named(unsigned id, unsigned count) {
  Launch& l = *running;
  if (id >= 16 || count == 0 || count % 32 != 0 || count > bdim.x) {
    std::fprintf(stderr, "emu: bar.sync %u, %u: not a barrier a block of %u threads may use\n", id, count, bdim.x);
    std::abort();
  }
  ++l.progress;
  if (++l.namedArrived[id] == count) {
    l.namedArrived[id] = 0, ++l.namedGen[id];
    return;
  }
  Fiber& f = l.fibers[tid.x];
  f.wait = Fiber::named, f.bar = id, f.gen = l.namedGen[id];
  switch_to(f.ctx, l.scheduler);
}

// spin gives the other fibers a turn: the caller polls a condition that
// only they can change (an mbarrier's phase).
inline void spin() {
  Fiber& f = running->fibers[tid.x];
  f.wait = Fiber::spin;
  switch_to(f.ctx, running->scheduler);
}

inline void syncthreads() { arrive(false); }
inline void syncwarp() { arrive(true); }

// syncthreads_or is a block barrier that returns whether pred was nonzero
// in any thread. Calls rotate over three slots: thread 0 clears the next
// one before this call's barrier, when every thread has read it (two calls
// ago) and none can write it yet (next call, after this barrier).
inline int syncthreads_or(int pred) {
  const unsigned slot = running->fibers[tid.x].orCalls++ % 3;
  if (tid.x == 0) running->ors[(slot + 1) % 3] = 0;
  if (pred) running->ors[slot] = 1;
  syncthreads();
  return running->ors[slot];
}

// start is every fiber's entry: the kernel, then its exit, which may open
// a barrier the others wait at, then back to the scheduler for good.
inline void start() {
  Launch& l = *running;
  l.body(l.kernel);
  const unsigned w = tid.x / 32, lanes = std::min(32u, bdim.x - 32 * w);
  Fiber& f = l.fibers[tid.x];
  if (!l.pending[tid.x].empty()) {
    std::fprintf(stderr, "emu: thread %u returned with a wgmma it never waited for\n", tid.x);
    std::abort();
  }
  if (!l.bulk[tid.x].empty()) {
    std::fprintf(stderr, "emu: thread %u returned with a bulk reduction it never waited for\n", tid.x);
    std::abort();
  }
  f.done = true;
  ++l.exited, ++l.warpExited[w], ++l.progress;
  if (l.arrived > 0 && l.arrived == bdim.x - l.exited) l.arrived = 0, ++l.gen;
  if (l.warpArrived[w] > 0 && l.warpArrived[w] == lanes - l.warpExited[w]) l.warpArrived[w] = 0, ++l.warpGen[w];
  switch_to(f.ctx, l.scheduler);
}

// launch runs kernel on grid blocks of threads threads with smem_bytes of
// dynamic shared memory (what require_launch reads), one block after
// another. (With ucontext, g++ warns that getcontext, which returns
// twice, may clobber the loop counters; those contexts are only entered
// through makecontext and swapcontext, never returned to twice.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wclobbered"
template <typename F> void launch(unsigned grid, unsigned threads, unsigned smem_bytes, F kernel) {
  gdim = {grid, 1, 1};
  bdim = {threads, 1, 1};
  dyn_smem = smem_bytes;
  const unsigned warps = (threads + 31) / 32;
  Launch l;
  l.fibers.resize(threads);
  l.words.assign(threads, 0);
  l.frags.assign(threads, {});
  l.pending.assign(threads, {});
  l.bulk.assign(threads, {});
  l.bulkCommitted.assign(threads, 0);
  l.committed.assign(threads, 0);
  l.kernel = &kernel;
  l.body = [](void* k) { (*static_cast<F*>(k))(); };
  running = &l;
  for (unsigned blk = 0; blk < grid; ++blk) {
    bid = {blk, 0, 0};
    // Shared memory starts each block as all-ones bytes, a NaN in every
    // float format the kernels use: data a block reads before any of its
    // threads wrote it (a missing barrier, a tile copied short) turns
    // results NaN instead of reusing an earlier block's values.
    std::memset(flash::smem, 0xff, smem_bytes);
    l.arrived = l.exited = 0;
    l.warpArrived.assign(warps, 0), l.warpGen.assign(warps, 0), l.warpExited.assign(warps, 0);
    std::fill(std::begin(l.namedArrived), std::end(l.namedArrived), 0u);
    l.mbarriers.clear();
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = l.fibers[t];
      f.wait = Fiber::none, f.done = false, f.orCalls = 0;
      prepare(f.ctx, stack_of(t), l.scheduler, start);
    }
    // Each pass runs the threads in an order of its own, a permutation
    // drawn from a generator seeded by the block (the same on every run),
    // so that a thread reading what another writes without a barrier
    // between them reads it stale in some passes, whichever thread the
    // program order puts first: two fixed orders (ascending, descending)
    // missed a warpgroup reading its tile before its other warps wrote
    // their parts, since the thread that made the tile's data wait
    // worthwhile ran last in both.
    std::vector<unsigned> order(threads);
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(blk) << 1 | 1);
    const auto next = [&rng] {  // xorshift64*
      rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
      return rng * 0x2545f4914f6cdd1dull;
    };
    for (unsigned live = threads; live > 0;) {
      bool ran = false;
      const uint64_t before = l.progress;
      for (unsigned i = 0; i < threads; ++i) order[i] = i;
      for (unsigned i = threads - 1; i > 0; --i) std::swap(order[i], order[next() % (i + 1)]);
      for (unsigned i = 0; i < threads; ++i) {
        const unsigned t = order[i];
        Fiber& f = l.fibers[t];
        const bool open = f.wait == Fiber::none || f.wait == Fiber::spin ||
                          (f.wait == Fiber::block && l.gen != f.gen) ||
                          (f.wait == Fiber::warp && l.warpGen[t / 32] != f.gen) ||
                          (f.wait == Fiber::named && l.namedGen[f.bar] != f.gen);
        if (f.done || !open) continue;
        f.wait = Fiber::none;
        tid = {t, 0, 0};
        switch_to(l.scheduler, f.ctx);
        ran = ran || f.wait != Fiber::spin;
        live -= f.done;
      }
      // A pass where every thread that ran only polled again, and nothing
      // changed, would repeat forever.
      if (!ran && l.progress == before) {
        std::fprintf(stderr, "emu: block %u: a barrier that some thread never reaches, or an mbarrier phase that never completes\n", blk);
        std::abort();
      }
    }
  }
  running = nullptr;
}
#pragma GCC diagnostic pop

// exchange posts x for the warp and returns what the lane of this warp
// that source(lane) names posted; every lane of the warp must call it, as
// the kernels' full-mask shuffles require.
template <typename T, typename Source> T exchange(T x, Source source) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move at most 8 bytes");
  const unsigned lane = tid.x % 32, warp = tid.x / 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  running->words[tid.x] = bits;
  syncwarp();
  bits = running->words[warp * 32 + source(lane)];
  syncwarp();
  T y;
  std::memcpy(&y, &bits, sizeof(T));
  return y;
}

// shfl_xor returns x of lane (this lane ^ off) of the warp.
template <typename T> T shfl_xor(T x, int off) {
  return exchange(x, [off](unsigned lane) { return lane ^ static_cast<unsigned>(off); });
}

// shfl returns x of lane src of this lane's segment of width lanes.
template <typename T> T shfl(T x, int src, int width) {
  return exchange(x, [src, width](unsigned lane) {
    return (lane & ~static_cast<unsigned>(width - 1)) + static_cast<unsigned>(src % width);
  });
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
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
template <typename T> T __ldg(const T* p) { return *p; }
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>(static_cast<unsigned long long>(a) * b >> 32); }
[[noreturn]] inline void __trap() {
  std::fprintf(stderr, "emu: __trap (a launch shape the kernel does not accept)\n");
  std::abort();
}
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
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
inline uint16_t fp16_bits(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline float fp16_value(uint16_t b) { return static_cast<float>(std::bit_cast<_Float16>(b)); }

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
inline const std::array<uint32_t, 6>& posted(unsigned lane) { return running->frags[tid.x / 32 * 32 + lane]; }

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

#include "sm90_emu.h"
