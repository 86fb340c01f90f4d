// Hopper (sm_90a) building blocks: warpgroup MMA (wgmma.mma_async) with
// operands in shared memory described by matrix descriptors, mbarriers, and
// bulk asynchronous copies (cp.async.bulk) from global to shared memory
// that complete on an mbarrier. Only hopper.cu includes this header; it
// compiles for compute_90a alone.
//
// Shared-memory operand layout ("tile image"). Every wgmma operand here is
// K-major (the reduction index is the contiguous one) with the 128-byte
// swizzle: a tile of R rows is cut along K into panels 128 bytes wide (64
// 16-bit or 32 tf32 elements); panel p holds R rows of 128 bytes at
// p·R·128 bytes, and inside each row the 16-byte chunk c sits at chunk
// c ⊕ (row mod 8). Panels start at 1024-byte boundaries, so the XOR is the
// one the hardware applies to address bits 4–6 from bits 7–9. A descriptor
// names the panel's start, the 1024-byte stride between groups of 8 rows
// and the swizzle mode; the next k-slice of one wgmma (32 bytes of K: k16
// of 16-bit or k8 of tf32 elements) inside the panel is the same
// descriptor with its start moved by 32 bytes (k_slice_offset).
//
// The conversions at the end of this file (to_image_rows, to_image_vt)
// write the forward's and the backward's operands into global memory
// already in this layout, tile after tile, so one bulk copy of contiguous
// bytes lands a whole tile ready for wgmma.
#pragma once
#include <stdint.h>

#include "mma.cuh"

namespace flash {
namespace sm90 {

using mma::smem_addr;

// A tile image of `rows` rows is panels of 8 chunks (16 bytes each,
// counted along K) a row, row after row; within a row of a panel, chunk
// c % 8 sits at position (c % 8) ⊕ (r % 8), the 128-byte swizzle.
// image_panel is the index, in chunks, of the panel holding chunk c, and
// image_swizzle the position of chunk c within row r of its panel.
// image_chunk is the index, in 16-byte chunks from the start of the image,
// of logical chunk c of row r; loops that advance along rows or columns
// use the two parts.
__device__ __forceinline__ int image_panel(int c, int rows) { return (c / 8) * rows * 8; }
__device__ __forceinline__ int image_swizzle(int r, int c) { return (c % 8) ^ (r % 8); }
__device__ __forceinline__ int image_chunk(int r, int c, int rows) {
  // image_panel(c, rows) + 8r + image_swizzle(r, c), in this association:
  // written as that sum, ptxas 12.4 emitted other code for the callers.
  return ((c / 8) * rows + r) * 8 + image_swizzle(r, c);
}

// kDescHigh is the high word of every wgmma descriptor the kernels make:
// the stride between 8-row groups, 1024 bytes (>> 4), in bits 32–45 and
// swizzle mode 1 (128 bytes) in bits 62–63. Only the low word (start
// address and leading-dimension offset) varies between operands, which
// the split type's products rely on (Wgmma<mma::TF32x3, N>).
constexpr uint32_t kDescHigh = (1024 >> 4) | (1u << 30);

// desc_sw128 is the wgmma descriptor of a K-major, 128-byte-swizzled panel
// at shared address addr (1024-byte aligned): start address >> 4 in bits
// 0–13, leading-dimension offset 1 (unused by swizzled K-major layouts),
// and kDescHigh.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (1ull << 16) | (static_cast<uint64_t>(kDescHigh) << 32);
}

// warp_uniform returns x, the same in every lane of the (converged) warp,
// read through lane 0, so that the compiler knows it is uniform and keeps
// what follows from it (a warpgroup's or warp's shared addresses and wgmma
// descriptors) in uniform registers instead of moving them there before
// every wgmma: computed from threadIdx.x, the warpgroup index cost the
// backward's tile loops 6–12 % more instructions (ptxas 12.4).
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// desc_advance moves descriptor d's start address by bytes (a multiple of
// 16 inside the panel's 256 KiB window) with a 32-bit add: the start field
// cannot carry into the upper word, and a 64-bit add, which the compiler
// must assume can, cost two vector instructions and a move to a uniform
// register per wgmma where a descriptor is held across a loop.
__device__ __forceinline__ uint64_t desc_advance(uint64_t d, uint32_t bytes) {
  return (d & 0xffffffff00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(d) + (bytes >> 4));
}

// desc_mn_sw128 is the descriptor of an MN-major, 128-byte-swizzled
// operand (wgmma's transpose bit set, 16-bit types only) at shared address
// addr (1024-byte aligned): each K index a 128-byte row of 64 consecutive
// M (or N) elements, 8 rows an atom; the leading-dimension offset is the
// stride between 64-element groups of M or N (lbo bytes), the stride
// offset between 8-row groups of K (1024 bytes). The row images hold K
// (row = key, 64 d values a panel) in exactly this layout for a product
// that sums over keys.
__device__ __forceinline__ uint64_t desc_mn_sw128(uint32_t addr, uint32_t lbo) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (static_cast<uint64_t>((lbo & 0x3ffff) >> 4) << 16) |
         (static_cast<uint64_t>(kDescHigh) << 32);
}

// fence_proxy_async makes this thread's generic shared-memory stores
// visible to the async proxy (wgmma reading shared operands).
__device__ __forceinline__ void fence_proxy_async() {
#ifndef FLASH_EMU  // emulated memory is coherent
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// k_slice_offset is the byte offset of k-slice kc (32 bytes of K) in a
// K-major tile image of `rows` rows: panel kc/4, 32 bytes per slice within.
__device__ __forceinline__ uint32_t k_slice_offset(int kc, int rows) {
  return static_cast<uint32_t>((kc / 4) * rows * 128 + (kc % 4) * 32);
}

// mbarrier operations on shared addresses.
#ifdef FLASH_EMU  // emu/sm90_emu.h
__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) { ::emu::mbar_init(bar, count); }
__device__ __forceinline__ void mbar_fence_init() {}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) { ::emu::mbar_arrive(bar); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) { ::emu::mbar_arrive(bar, bytes); }
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) { ::emu::mbar_wait(bar, parity); }
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  ::emu::bulk_copy(dst, src, bytes, bar);
}
__device__ __forceinline__ void bulk_reduce_add(float* dst, uint32_t src, uint32_t bytes) {
  ::emu::bulk_reduce_add(dst, src, bytes);
}
__device__ __forceinline__ void bulk_commit() { ::emu::bulk_commit(); }
template <int N> __device__ __forceinline__ void bulk_wait_read() { ::emu::bulk_wait_read(N); }
__device__ __forceinline__ void bulk_wait_done() { ::emu::bulk_wait_read(0); }
__device__ __forceinline__ void wgmma_fence() {}
__device__ __forceinline__ void wgmma_commit() { ::emu::wgmma_commit(); }
template <int N> __device__ __forceinline__ void wgmma_wait() { ::emu::wgmma_wait(N); }
#else
__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// mbar_arrive_expect_tx arrives and announces bytes that bulk copies will
// deliver before the phase can complete.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// mbar_wait blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// bulk_copy starts copying bytes (a multiple of 16, both addresses 16-byte
// aligned) from global src to shared dst; the mbarrier bar counts them.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// bulk_reduce_add starts adding bytes of float32 (a multiple of 16, both
// addresses 16-byte aligned) from shared src into global dst, in the L2,
// as part of this thread's open bulk group; bulk_commit closes the group,
// and bulk_wait_read<N> waits until every group of this thread but the
// newest N has read its shared memory, which may then be rewritten;
// bulk_wait_done waits until every group has completed, its writes too.
__device__ __forceinline__ void bulk_reduce_add(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_done() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// wgmma_fence orders this thread's earlier register writes (accumulators, A
// fragments) before the wgmma that follow; commit and wait close a group.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#endif

// Wgmma<E, N> issues wgmma.mma_async of shape m64nNk(E::kK) with fp32
// accumulators d (N/2 per thread: the m16n8 C layout of mma.cuh for each of
// the warpgroup's four warps, n8 tile j in d[4j … 4j+3]):
//   ss: d (+)= A·B with A (64 × K) and B (N × K) both K-major in shared
//       memory, given by descriptors; scale_d = 0 overwrites d.
//   rs: d += A·B with A from registers (the m16 A fragment of mma.cuh per
//       warp) and B from a descriptor.
#ifdef FLASH_EMU  // emu/sm90_emu.h: one template serves every shape
template <typename E> constexpr ::emu::Elem emu_elem() {
  return sizeof(typename E::Storage) == 4 ? ::emu::kTF32 : std::is_same_v<E, mma::BF16> ? ::emu::kBF16 : ::emu::kFP16;
}
template <typename E, int N> struct Wgmma {
  static void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
    ::emu::wgmma(d, N, emu_elem<E>(), a, nullptr, b, scale_d != 0, false, false);
  }
  static void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
    ::emu::wgmma(d, N, emu_elem<E>(), 0, a, b, true, false, false);
  }
};
template <typename E, int N> struct WgmmaMN {
  static void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
    ::emu::wgmma(d, N, emu_elem<E>(), a, nullptr, b, scale_d != 0, true, true);
  }
};
template <typename E, int N> struct WgmmaRsMN {
  static void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
    ::emu::wgmma(d, N, emu_elem<E>(), 0, a, b, true, false, true);
  }
};
#else
template <typename E, int N> struct Wgmma;

// Accumulator operand lists: "{%0, …, %n−1}" and the matching "+f" constraints.
#define FLASH_WGMMA_D4 "{%0, %1, %2, %3}"
#define FLASH_WGMMA_D16 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" "}"
#define FLASH_WGMMA_D32 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20," \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" "}"
#define FLASH_WGMMA_D64 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20," \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39," \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58," \
  "%59, %60, %61, %62, %63" "}"
#define FLASH_WGMMA_D128 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20," \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39," \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58," \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77," \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96," \
  "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112," \
  "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" "}"
#define FLASH_WGMMA_ACC8(i)                                                                                \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define FLASH_WGMMA_OPS4 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define FLASH_WGMMA_OPS16 FLASH_WGMMA_ACC8(0), FLASH_WGMMA_ACC8(8)
#define FLASH_WGMMA_OPS32 FLASH_WGMMA_OPS16, FLASH_WGMMA_ACC8(16), FLASH_WGMMA_ACC8(24)
#define FLASH_WGMMA_OPS64 \
  FLASH_WGMMA_OPS32, FLASH_WGMMA_ACC8(32), FLASH_WGMMA_ACC8(40), FLASH_WGMMA_ACC8(48), FLASH_WGMMA_ACC8(56)
#define FLASH_WGMMA_OPS128                                                                                    \
  FLASH_WGMMA_OPS64, FLASH_WGMMA_ACC8(64), FLASH_WGMMA_ACC8(72), FLASH_WGMMA_ACC8(80), FLASH_WGMMA_ACC8(88), \
      FLASH_WGMMA_ACC8(96), FLASH_WGMMA_ACC8(104), FLASH_WGMMA_ACC8(112), FLASH_WGMMA_ACC8(120)

// FLASH_WGMMA defines Wgmma<E, N>. NREG = N/2 accumulators; SHAPE is the
// instruction's shape and types; TRANS_SS and TRANS_RS the transpose
// immediates 16-bit types take (none for tf32); the operand numbers after
// the accumulators: SS_AB (a-desc, b-desc), SS_SCALE, RS_AB (a registers,
// b-desc), RS_SCALE.
#define FLASH_WGMMA(E, N, NREG, SHAPE, TRANS_SS, TRANS_RS, SS_AB, SS_SCALE, RS_AB, RS_SCALE)                  \
  template <> struct Wgmma<mma::E, N> {                                                                    \
    static __device__ __forceinline__ void ss(float (&d)[NREG], uint64_t a, uint64_t b, int scale_d) {      \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SS_SCALE ", 0;\nwgmma.mma_async.sync.aligned." SHAPE " " \
                   FLASH_WGMMA_D##NREG ", " SS_AB ", p, 1, 1" TRANS_SS ";\n}\n"                              \
                   : FLASH_WGMMA_OPS##NREG                                                                 \
                   : "l"(a), "l"(b), "r"(scale_d));                                                        \
    }                                                                                                      \
    static __device__ __forceinline__ void rs(float (&d)[NREG], const uint32_t (&a)[4], uint64_t b) {       \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RS_SCALE ", 0;\nwgmma.mma_async.sync.aligned." SHAPE " " \
                   FLASH_WGMMA_D##NREG ", " RS_AB ", p, 1, 1" TRANS_RS ";\n}\n"                              \
                   : FLASH_WGMMA_OPS##NREG                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                          \
    }                                                                                                      \
  };

#define FLASH_WGMMA_N32(E, K, TYPES, TRANS_SS, TRANS_RS)                                                       \
  FLASH_WGMMA(E, 32, 16, "m64n32" K TYPES, TRANS_SS, TRANS_RS, "%16, %17", "%18", "{%16, %17, %18, %19}, %20", \
              "%21")
#define FLASH_WGMMA_N64(E, K, TYPES, TRANS_SS, TRANS_RS)                                                       \
  FLASH_WGMMA(E, 64, 32, "m64n64" K TYPES, TRANS_SS, TRANS_RS, "%32, %33", "%34", "{%32, %33, %34, %35}, %36", \
              "%37")
#define FLASH_WGMMA_N128(E, K, TYPES, TRANS_SS, TRANS_RS)                                                       \
  FLASH_WGMMA(E, 128, 64, "m64n128" K TYPES, TRANS_SS, TRANS_RS, "%64, %65", "%66", "{%64, %65, %66, %67}, %68", \
              "%69")
#define FLASH_WGMMA_N256(E, K, TYPES, TRANS_SS, TRANS_RS)                                                 \
  FLASH_WGMMA(E, 256, 128, "m64n256" K TYPES, TRANS_SS, TRANS_RS, "%128, %129", "%130",                   \
              "{%128, %129, %130, %131}, %132", "%133")
#define FLASH_WGMMA_ALL_N(E, K, TYPES, TRANS_SS, TRANS_RS) \
  FLASH_WGMMA_N32(E, K, TYPES, TRANS_SS, TRANS_RS)        \
  FLASH_WGMMA_N64(E, K, TYPES, TRANS_SS, TRANS_RS)        \
  FLASH_WGMMA_N128(E, K, TYPES, TRANS_SS, TRANS_RS)       \
  FLASH_WGMMA_N256(E, K, TYPES, TRANS_SS, TRANS_RS)

FLASH_WGMMA_ALL_N(BF16, "k16", ".f32.bf16.bf16", ", 0, 0", ", 0")
FLASH_WGMMA_ALL_N(FP16, "k16", ".f32.f16.f16", ", 0, 0", ", 0")
// n8, for the row sums of P against a tile of ones (fwd_wgmma_ws.cuh).
#define FLASH_WGMMA_N8(E, TYPES) \
  FLASH_WGMMA(E, 8, 4, "m64n8k16" TYPES, ", 0, 0", ", 0", "%4, %5", "%6", "{%4, %5, %6, %7}, %8", "%9")
FLASH_WGMMA_N8(BF16, ".f32.bf16.bf16")
FLASH_WGMMA_N8(FP16, ".f32.f16.f16")
FLASH_WGMMA_ALL_N(TF32, "k8", ".f32.tf32.tf32", "", "")
// The split type's products are tf32 products (split_ss, split_rs), its
// ss form handing the asm the descriptors' low words alone, the high word
// being kDescHigh. Why: a split kernel issues 108 wgmmas a step, each with
// two descriptors, and given whole 64-bit descriptors ptxas 12.4 computed
// their low words in vector registers and moved each into a uniform one
// (VIADD, R2UR, and a UMOV of the high word per descriptor per wgmma),
// having run out of uniform registers precomputing a run of them; given
// the low words it adds them in uniform registers (UIADD3). FP32's dQ
// step at D = 128 went from 2265 to 2016 instructions, dK's from 2311 to
// 2121, the forward's tile loop from 1261 to 1192 (cudakernels/NOTES.md,
// "Twenty-eighth session"); on the H100, FP32's D128 backward ran 3–4 %
// faster (bench/RESULTS.md, twenty-ninth session). The 16-bit and TF32
// kernels keep the 64-bit form: with this one some of their loops grew by
// up to 11 instructions.
#define FLASH_WGMMA_SPLIT_SS(N, NREG, LO_A, LO_B, SCALE, HI)                                                  \
  template <> struct Wgmma<mma::TF32x3, N> : Wgmma<mma::TF32, N> {                                         \
    static __device__ __forceinline__ void ss(float (&d)[NREG], uint64_t a, uint64_t b, int scale_d) {      \
      asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, " SCALE ", 0;\n"                      \
                   "mov.b64 da, {" LO_A ", " HI "};\nmov.b64 db, {" LO_B ", " HI "};\n"                       \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " FLASH_WGMMA_D##NREG               \
                   ", da, db, p, 1, 1;\n}\n"                                                                 \
                   : FLASH_WGMMA_OPS##NREG                                                                 \
                   : "r"(static_cast<uint32_t>(a)), "r"(static_cast<uint32_t>(b)), "r"(scale_d), "n"(kDescHigh)); \
    }                                                                                                      \
  };
FLASH_WGMMA_SPLIT_SS(32, 16, "%16", "%17", "%18", "%19")
FLASH_WGMMA_SPLIT_SS(64, 32, "%32", "%33", "%34", "%35")
FLASH_WGMMA_SPLIT_SS(128, 64, "%64", "%65", "%66", "%67")
FLASH_WGMMA_SPLIT_SS(256, 128, "%128", "%129", "%130", "%131")
#undef FLASH_WGMMA_SPLIT_SS

// WgmmaMN<E, N>::ss issues d (+)= A·B of shape m64nNk16 with A (64 × 16)
// and B (N × 16) both MN-major in shared memory (desc_mn_sw128), for the
// 16-bit types (tf32 has no transposed form).
template <typename E, int N> struct WgmmaMN;
#define FLASH_WGMMA_MN(E, N, NREG, TYPES, AB, SCALE)                                                      \
  template <> struct WgmmaMN<mma::E, N> {                                                                 \
    static __device__ __forceinline__ void ss(float (&d)[NREG], uint64_t a, uint64_t b, int scale_d) {     \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
                   "k16" TYPES " " FLASH_WGMMA_D##NREG ", " AB ", p, 1, 1, 1, 1;\n}\n"                      \
                   : FLASH_WGMMA_OPS##NREG                                                                \
                   : "l"(a), "l"(b), "r"(scale_d));                                                       \
    }                                                                                                     \
  };
FLASH_WGMMA_MN(BF16, 32, 16, ".f32.bf16.bf16", "%16, %17", "%18")
FLASH_WGMMA_MN(BF16, 64, 32, ".f32.bf16.bf16", "%32, %33", "%34")
FLASH_WGMMA_MN(FP16, 32, 16, ".f32.f16.f16", "%16, %17", "%18")
FLASH_WGMMA_MN(FP16, 64, 32, ".f32.f16.f16", "%32, %33", "%34")

// WgmmaRsMN<E, N>::rs issues d += A·B of shape m64nNk16 with A from
// registers (as Wgmma::rs) and B MN-major in shared memory
// (desc_mn_sw128, the transpose immediate set), for the 16-bit types: the
// backward's products that sum over rows read the row images of dO, Q and
// K this way (bwd_wgmma.cuh's gemm_rs).
template <typename E, int N> struct WgmmaRsMN;
#define FLASH_WGMMA_RS_MN(E, N, NREG, TYPES, AB, SCALE)                                                   \
  template <> struct WgmmaRsMN<mma::E, N> {                                                               \
    static __device__ __forceinline__ void rs(float (&d)[NREG], const uint32_t (&a)[4], uint64_t b) {      \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N  \
                   "k16" TYPES " " FLASH_WGMMA_D##NREG ", " AB ", p, 1, 1, 1;\n}\n"                         \
                   : FLASH_WGMMA_OPS##NREG                                                                \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                         \
    }                                                                                                     \
  };
FLASH_WGMMA_RS_MN(BF16, 64, 32, ".f32.bf16.bf16", "{%32, %33, %34, %35}, %36", "%37")
FLASH_WGMMA_RS_MN(BF16, 128, 64, ".f32.bf16.bf16", "{%64, %65, %66, %67}, %68", "%69")
FLASH_WGMMA_RS_MN(FP16, 64, 32, ".f32.f16.f16", "{%32, %33, %34, %35}, %36", "%37")
FLASH_WGMMA_RS_MN(FP16, 128, 64, ".f32.f16.f16", "{%64, %65, %66, %67}, %68", "%69")
#endif  // FLASH_EMU

// halved_big reports whether the scores' big products over KC k-slices
// run as two chains (split_scores, big_rest): above 8 k-slices (DP =
// 128 for tf32). The tensor cores truncate as they add each k-slice into
// the float32 accumulator, so a chain's error grows with its steps; over
// 16 the scores erred about twice as much as float32's fma chain
// (simulated: 2.0× its rms error at DP = 128, 1.6× at 64; two chains of 8
// summed to nearest, 1.1×), and dV, which takes P = exp(S − LSE), missed
// the FP32 bound on an H100 (NOTES, "Twenty-fifth session").
template <int KC> __host__ __device__ constexpr bool halved_big() { return KC > 8; }

// split_products issues A·Bᵀ over KC k-slices for a split operand type
// (E::kParts 2: each image KC slices of hi values, then KC of lo ones),
// A and B K-major at descriptors a and b of a_rows and b_rows rows: the
// small products over every k-slice first, into small (the first one
// overwriting it), then the big one into big, which kApart starts afresh
// and otherwise adds to (big and small then the same accumulator).
// kALoFirst orders the small ones: A_lo·B_hi then A_hi·B_lo, or the other
// way round. With kApart and halved_big, big gets the first KC/2 k-slices
// (big_rest issues the rest).
template <typename E, int N, int KC, bool kALoFirst, bool kApart>
__device__ __forceinline__ void split_products(float (&big)[N / 2], float (&small)[N / 2], uint64_t a, int a_rows,
                                               uint64_t b, int b_rows) {
  static_assert(E::kParts == 2, "a split operand type");
  auto slice = [&](uint64_t desc, int kc, int rows) { return desc_advance(desc, k_slice_offset(kc, rows)); };
  constexpr int kA1 = kALoFirst ? KC : 0, kB1 = kALoFirst ? 0 : KC;  // the first small product's parts
#pragma unroll
  for (int kc = 0; kc < KC; ++kc)
    Wgmma<E, N>::ss(small, slice(a, kc + kA1, a_rows), slice(b, kc + kB1, b_rows), kc > 0);
#pragma unroll
  for (int kc = 0; kc < KC; ++kc)
    Wgmma<E, N>::ss(small, slice(a, kc + KC - kA1, a_rows), slice(b, kc + KC - kB1, b_rows), 1);
  constexpr int kBig = kApart && halved_big<KC>() ? KC / 2 : KC;  // the rest: big_rest
#pragma unroll
  for (int kc = 0; kc < kBig; ++kc) Wgmma<E, N>::ss(big, slice(a, kc, a_rows), slice(b, kc, b_rows), !kApart || kc > 0);
}

// split_ss sets d = A·Bᵀ (split_products into one accumulator, small
// products first, while it is still small).
template <typename E, int N, int KC, bool kALoFirst>
__device__ __forceinline__ void split_ss(float (&d)[N / 2], uint64_t a, int a_rows, uint64_t b, int b_rows) {
  split_products<E, N, KC, kALoFirst, false>(d, d, a, a_rows, b, b_rows);
}

// split_scores is split_products for the scores S = Q·Kᵀ (or Sᵀ = K·Qᵀ):
// the big products into d and the small ones into small, which add_small
// folds into d once both have landed (where halved_big, d holds the big
// products of the first KC/2 k-slices; big_rest issues the rest into an
// accumulator of its own, which add_rest adds after). Apart because an
// infinite operand's small products are no guide to its score: with hi =
// ±∞ and lo = 0 (mma::TF32x3::lo), lo·∞ is NaN or an infinity of either
// sign, where the naive score is the big product's ±∞, whose exponential
// a softmax turns into P = 0; add_small drops a non-finite small sum.
// Every element of d and small is a sum of the same products in the same
// order whichever operand is A (kALoFirst: A is Q), so the backward's Sᵀ
// = K·Qᵀ repeats the forward's S = Q·Kᵀ bit for bit if the tensor cores'
// sums depend only on the products and their order
// (TestTF32ProductsIgnoreOperandOrder, the probe, checks that for tf32
// wgmmas on the device: it passed on an H100, 2026-12-05).
template <typename E, int N, int KC, bool kALoFirst>
__device__ __forceinline__ void split_scores(float (&d)[N / 2], float (&small)[N / 2], uint64_t a, int a_rows,
                                             uint64_t b, int b_rows) {
  split_products<E, N, KC, kALoFirst, true>(d, small, a, a_rows, b, b_rows);
}

// split_scores_rs is split_scores with A's lo parts in registers (a_lo,
// its KC fragments) and its hi image at a: the small products A_hi·B_lo
// first, the first one overwriting small, then A_lo·B_hi, then the big
// A_hi·B_hi into d. The backward's Sᵀ = K·Qᵀ repeats these sums with
// split_scores<…, kALoFirst = true> (K_lo·Q_hi, then K_hi·Q_lo), the
// order of each element's products being what decides its bits.
template <typename E, int N, int KC>
__device__ __forceinline__ void split_scores_rs(float (&d)[N / 2], float (&small)[N / 2],
                                                const uint32_t (&a_lo)[KC][4], uint64_t a, int a_rows, uint64_t b,
                                                int b_rows) {
  static_assert(E::kParts == 2, "a split operand type");
  auto slice = [&](uint64_t desc, int kc, int rows) { return desc_advance(desc, k_slice_offset(kc, rows)); };
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) Wgmma<E, N>::ss(small, slice(a, kc, a_rows), slice(b, kc + KC, b_rows), kc > 0);
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) Wgmma<E, N>::rs(small, a_lo[kc], slice(b, kc, b_rows));
  constexpr int kBig = halved_big<KC>() ? KC / 2 : KC;  // the rest: big_rest
#pragma unroll
  for (int kc = 0; kc < kBig; ++kc) Wgmma<E, N>::ss(d, slice(a, kc, a_rows), slice(b, kc, b_rows), kc > 0);
}

// big_rest issues, where halved_big, the second chain of split_scores's
// big products: d2 = A·Bᵀ over k-slices KC/2 … KC − 1 (A and B K-major
// at descriptors a and b of a_rows and b_rows rows, their hi slices), in
// the same group as the rest of the scores. Every kernel that computes
// the scores at DP = 128 (the forward and the three backward kernels)
// adds them in the same order, add_small then add_rest, so that its
// scores are the same bits.
template <typename E, int N, int KC>
__device__ __forceinline__ void big_rest(float (&d2)[N / 8][4], uint64_t a, int a_rows, uint64_t b, int b_rows) {
  auto slice = [&](uint64_t desc, int kc, int rows) { return desc_advance(desc, k_slice_offset(kc, rows)); };
#pragma unroll
  for (int kc = KC / 2; kc < KC; ++kc)
    Wgmma<E, N>::ss(reinterpret_cast<float(&)[N / 2]>(d2), slice(a, kc, a_rows), slice(b, kc, b_rows), kc > KC / 2);
}

// add_small adds split_scores's small sums to the big ones, each where it
// is finite: an infinite operand's small products are no guide to its
// score (split_scores).
template <int NS> __device__ __forceinline__ void add_small(float (&d)[NS][4], const float (&small)[NS][4]) {
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (fabsf(small[j][e]) <= 3.40282347e+38f) d[j][e] += small[j][e];  // false for ±∞ and NaN
}

// add_rest adds big_rest's chain to the scores, whatever it holds: its
// products are big ones, as the first chain's are.
template <int NS> __device__ __forceinline__ void add_rest(float (&d)[NS][4], const float (&d2)[NS][4]) {
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[j][e] += d2[j][e];
}

// split_rs adds A·B to d for a split operand type: A in registers, KC hi
// fragments then KC lo ones (mma::put_frag), B K-major at descriptor b of
// b_rows rows (KC hi slices, then KC lo): A_lo·B_hi, A_hi·B_lo, A_hi·B_hi.
template <typename E, int N, int KC>
__device__ __forceinline__ void split_rs(float (&d)[N / 2], const uint32_t (&a)[2 * KC][4], uint64_t b, int b_rows) {
  static_assert(E::kParts == 2, "a split operand type");
  auto slice = [&](int kc) { return desc_advance(b, k_slice_offset(kc, b_rows)); };
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) Wgmma<E, N>::rs(d, a[KC + kc], slice(kc));
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) Wgmma<E, N>::rs(d, a[kc], slice(KC + kc));
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) Wgmma<E, N>::rs(d, a[kc], slice(kc));
}

// rs_product adds A·B to d over KK k-slices: A in registers (frag_count
// fragments: a split type's hi ones, then its lo ones), B K-major at
// descriptor b of b_rows rows (for a split type its hi slices, then its
// lo ones: split_rs).
template <typename E, int N, int KK>
__device__ __forceinline__ void rs_product(float (&d)[N / 2], const uint32_t (&a)[KK * E::kParts][4], uint64_t b,
                                           int b_rows) {
  if constexpr (E::kParts > 1) {
    split_rs<E, N, KK>(d, a, b, b_rows);
  } else {
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) Wgmma<E, N>::rs(d, a[kk], desc_advance(b, k_slice_offset(kk, b_rows)));
  }
}

// step_product adds the product that issue(c) issues into accumulator c
// to acc and waits for it. A split type's product goes into a zeroed
// accumulator of its own that is added to acc in float32 once it lands,
// so that each tile's or step's sum is a short one: the tensor cores'
// sums truncate, and O summed over thousands of keys in one accumulator
// erred 2–4× the naive float32 computation's error on the H200 (NOTES,
// "FP32 on tensor cores"); the backward's dV, dK and dQ alike. Other
// types accumulate in acc and wait for all but kPending groups, as the
// caller's pipeline wants.
template <typename E, int N, int kPending, typename F>
__device__ __forceinline__ void step_product(float (&acc)[N / 8][4], F&& issue) {
  if constexpr (E::kParts > 1) {
    float part[N / 8][4];
#pragma unroll
    for (int n = 0; n < N / 8; ++n) part[n][0] = part[n][1] = part[n][2] = part[n][3] = 0.f;
    wgmma_fence();
    issue(part);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] += part[n][e];
  } else {
    wgmma_fence();
    issue(acc);
    wgmma_commit();
    wgmma_wait<kPending>();
  }
}

// Keys of TF32's Vᵀ images are permuted in groups of 8 (vt_position);
// key_at_column inverts that: the key stored at column c.
template <typename E> __device__ __forceinline__ int key_at_column(int c) {
  if constexpr (sizeof(typename E::Storage) == 4) {
    const int r = c & 7;
    return (c & ~7) | (r < 4 ? 2 * r : 2 * (r - 4) + 1);
  } else {
    return c;
  }
}

// to_image_rows writes x [bhs, n, dim] fp32 as images of tiles of `rows`
// rows: y is [bhs, n_pad, dp·E::kParts] in E's storage type, n_pad a
// multiple of rows, zero past n and past dim (a split type: the hi values
// in columns below dp, the lo ones above). One thread per 16-byte output
// chunk, written in order; grid-stride, any grid.
template <typename E>
__device__ void to_image_rows(const float* __restrict__ x, uint4* __restrict__ y, long long bhs, long long n,
                              long long n_pad, long long dim, int dp, int rows) {
  constexpr int kVec = mma::StorageOf<E>::kVec;
  const int row_chunks = dp * E::kParts / kVec;
  const long long tile_chunks = static_cast<long long>(rows) * row_chunks, head_chunks = n_pad * row_chunks;
  const long long total = bhs * head_chunks, stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const long long bh = i / head_chunks, u = i % head_chunks;
    const int w = static_cast<int>(u % tile_chunks);  // = (panel·rows + r)·8 + physical chunk
    const int r = (w / 8) % rows, panel = w / 8 / rows;
    const long long row = u / tile_chunks * rows + r;
    const long long c = static_cast<long long>(panel * 8 + ((w % 8) ^ (r % 8))) * kVec;  // image column
    int part = 0;  // constant for the unsplit types, whose code stays as it was
    long long c0 = c;
    if constexpr (E::kParts > 1) part = static_cast<int>(c / dp), c0 = c - static_cast<long long>(part) * dp;
    float f[kVec];
    mma::load_chunk(f, x + (bh * n + row) * dim + c0, row < n, c0, dim);
    y[i] = mma::image_value<E>(f, part);
  }
}

// SeqRows says which rows of a conversion's heads are real when the call has
// per-sequence lengths: head bh of the conversion (a query head for Q and dO,
// a key head for K and V) belongs to batch entry (first + bh) / per, whose
// rows i < lens[entry] are real. The conversions write those rows and zero
// rows after them up to a multiple of unit, and leave the tiles past that
// unwritten: no kernel reads them, since the attention kernels walk tiles
// only up to a batch entry's last real row or key, in blocks and steps that
// unit is a multiple of (their blocks of padding rows or keys load nothing).
// Zeros matter in the rows they do read: a masked score multiplies them by
// P = 0, and 0 times a stale NaN would not be 0.
struct SeqRows {
  const int* lens;
  long long first, per;
  int unit;

  // limits returns the real rows len (at most n) of head bh and the rows
  // the conversion writes, len rounded up to unit.
  __device__ __forceinline__ void limits(long long bh, long long n, long long& len, long long& end) const {
    len = lens[(first + bh) / per];
    if (len > n) len = n;
    end = (len + unit - 1) / unit * unit;
  }
};

// to_image_rows_len is to_image_rows for a call with lengths (SeqRows): one
// tile of `rows` rows per block at a time (grid-stride over the bhs·n_pad /
// rows tiles), so that a tile past the rows it writes costs the block one
// compare; rows past the length are zero.
template <typename E>
__device__ void to_image_rows_len(const float* __restrict__ x, uint4* __restrict__ y, long long bhs, long long n,
                                  long long n_pad, long long dim, int dp, int rows, const SeqRows& sr) {
  static_assert(E::kParts == 1, "no split type serves calls with lengths");
  constexpr int kVec = mma::StorageOf<E>::kVec;
  const int row_chunks = dp / kVec, tile_chunks = rows * row_chunks;
  const long long tiles = n_pad / rows, total = bhs * tiles;
  for (long long b = blockIdx.x; b < total; b += gridDim.x) {
    const long long bh = b / tiles, r0 = b % tiles * rows;
    long long len, end;
    sr.limits(bh, n, len, end);
    if (r0 >= end) continue;
    const float* xh = x + bh * n * dim;
    uint4* yt = y + (bh * n_pad + r0) * row_chunks;
    for (int w = threadIdx.x; w < tile_chunks; w += blockDim.x) {
      const int r = (w / 8) % rows, panel = w / 8 / rows;  // w = (panel·rows + r)·8 + physical chunk
      const long long row = r0 + r;
      const int c0 = (panel * 8 + ((w % 8) ^ (r % 8))) * kVec;
      float f[kVec];
      mma::load_chunk(f, xh + row * dim + c0, row < len, c0, dim);
      yt[w] = mma::StorageOf<E>::convert(f);
    }
  }
}

// to_image_vt writes x [bhs, nk, dim] fp32 (V in the forward; Q, K and dO
// in the backward) transposed, as one [dp, bk] image (row d, column key)
// per tile of bk keys ([dp, 2·bk] for a split type: the hi values of the
// tile's keys, then their lo values): y holds nk_pad / bk tiles
// per head (nk_pad a multiple of bk, and bk of 64), zero past nk and dim.
// Blocks of 256 threads (any grid) take 64 keys × 64 columns through shared
// memory, so that reads of V and writes of y are both coalesced, with 16
// loads of 4 bytes in flight per thread (at 32 columns and each shared
// store waiting for its load, the pass ran at half the DRAM's speed: 77 µs
// for V at B·N = 16k, D = 128). dp must be a
// multiple of 64 (every padded D of the Hopper kernels is). kLens: a
// call with lengths (SeqRows sr): keys past a head's length are zero, and
// blocks of 64 keys past the keys it writes are skipped.
//
// kRows (to_image_rows_vt, plain calls): the same pass also writes the
// row image of x into y_rows, tiles of bk rows as to_image_rows writes
// them with rows = bk, from the tile already in shared memory. The TF32
// backward needs both images of Q, K and dO; one pass reads each once
// instead of twice.
template <typename E, bool kLens = false, bool kRows = false>
__device__ void to_image_vt(const float* __restrict__ x, uint4* __restrict__ y, long long bhs, long long nk,
                            long long nk_pad, long long dim, int dp, int bk, const SeqRows& sr = SeqRows{},
                            uint4* __restrict__ y_rows = nullptr) {
  static_assert(E::kParts == 1 || !kLens, "no split type serves calls with lengths");
  static_assert(!(kLens && kRows), "the row image of a call with lengths is to_image_rows_len's");
  constexpr int kVec = mma::StorageOf<E>::kVec;
  constexpr int kRowChunks = 64 / kVec;  // output chunks per d in 64 keys
  constexpr int kCols = 64;              // columns (d) per block
  if (dp % kCols != 0 || (kRows && bk % 64 != 0)) __trap();
  __shared__ float tile[64][kCols + 1];
  const long long key_blocks = nk_pad / 64, d_blocks = dp / kCols, n = bhs * key_blocks * d_blocks;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (long long b = blockIdx.x; b < n; b += gridDim.x) {
    const long long bh = b / (key_blocks * d_blocks);
    const long long j0 = b / d_blocks % key_blocks * 64, d0 = b % d_blocks * kCols;
    long long len = nk;
    if constexpr (kLens) {
      long long end;
      sr.limits(bh, nk, len, end);
      if (j0 >= end) continue;  // uniform over the block: no barrier is skipped by some threads only
    }
    // All 16 loads first, then the stores: interleaved, each store waited
    // for its load before the next loads issued.
    float v[8][kCols / 32];
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
      for (int h = 0; h < kCols / 32; ++h) {
        const long long j = j0 + ty + 8 * k, d = d0 + 32 * h + tx;
        v[k][h] = j < len && d < dim ? x[(bh * nk + j) * dim + d] : 0.f;
      }
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
      for (int h = 0; h < kCols / 32; ++h) tile[ty + 8 * k][32 * h + tx] = v[k][h];
    __syncthreads();
    uint4* img = y + (bh * (nk_pad / bk) + j0 / bk) * (static_cast<long long>(dp) * bk * E::kParts / kVec);
    for (int c = threadIdx.x; c < kCols * kRowChunks * E::kParts; c += blockDim.x) {
      int part = 0, w = c;
      if constexpr (E::kParts > 1) part = c / (kCols * kRowChunks), w = c % (kCols * kRowChunks);
      const int r = w / kRowChunks, col = w % kRowChunks * kVec;  // d = d0 + r; columns col … of these 64 keys
      float f[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) f[e] = tile[key_at_column<E>(col + e)][r];
      img[image_chunk(static_cast<int>(d0) + r, (static_cast<int>(j0 % bk + col) + part * bk) / kVec, dp)] =
          mma::image_value<E>(f, part);
    }
    if constexpr (kRows) {
      // Rows j0 … j0+63 lie in one row tile (bk a multiple of 64): chunk
      // (r, column c) of the tile is (panel·bk + r)·8 + (c/kVec mod 8 ^
      // r mod 8), panel = c / (8·kVec), as to_image_rows indexes it.
      constexpr int kColChunks = kCols / kVec;  // a row's chunks in the block's columns
      const int row_chunks = dp * E::kParts / kVec;
      const long long r0 = j0 % bk;
      uint4* rows_img = y_rows + (bh * nk_pad + j0 - r0) * row_chunks;
      for (int c = threadIdx.x; c < 64 * kColChunks * E::kParts; c += blockDim.x) {
        int part = 0, w = c;
        if constexpr (E::kParts > 1) part = c / (64 * kColChunks), w = c % (64 * kColChunks);
        const int key = w / kColChunks, col = w % kColChunks * kVec;  // row j0 + key, columns d0 + col …
        float f[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) f[e] = tile[key][col + e];
        const int r = static_cast<int>(r0) + key, chunk = (part * dp + static_cast<int>(d0) + col) / kVec;
        rows_img[(chunk / 8 * bk + r) * 8 + ((chunk % 8) ^ (r % 8))] = mma::image_value<E>(f, part);
      }
    }
    __syncthreads();
  }
}

}  // namespace sm90
}  // namespace flash
