// The warp-specialized Hopper forward: the plain problems (fwd_wgmma.cuh's
// plain kernel's: no grouped heads, lengths, left window bound or score
// modifier) of 16-bit operands at DP = 64 and 128 and of TF32 at DP = 128,
// on the K and Vᵀ tile images fwd_rowblock reads and the caller's float32
// Q, with a producer warpgroup and two consumer ones (three at DP = 64:
// ws_consumers) instead of two that do both. (TF32 at DP = 64 stays on
// fwd_rowblock, which measured faster there: 4.16 against 4.71 ms at
// N = 8k on the H200, 2026-12-04.)
//
// Why: in fwd_rowblock every warpgroup computes S = Q·Kᵀ, waits for it, runs
// the softmax, computes O += P·V and waits again, and one of its threads
// issues the copies; the tensor cores idle while the softmax runs unless
// the other warpgroup happens to be in a product. Here
//   - warpgroup 0 is the producer: one thread issues the bulk copies of the
//     K and Vᵀ tiles into kWsStages stages, K and Vᵀ with barriers of their
//     own (a consumer needs K of tile i with Vᵀ of tile i − 1). It gives
//     its registers up (setmaxnreg.dec) to the consumer warpgroups
//     (setmaxnreg.inc), which hold O, S and P at once;
//   - each consumer warpgroup (64 query rows) converts its rows of the
//     caller's float32 Q into its part of the Q tile (QRows, every load in
//     flight at once), then overlaps its softmax with its own products: it
//     issues S_i = Q·K_iᵀ and O += P_{i−1}·V_{i−1}, waits for S_i alone,
//     runs the softmax of tile i while P·V runs, then waits for P·V,
//     rescales O and packs P_i. The tensor cores see a product queued
//     behind every softmax.
// The epilogue stores O through the warpgroup's part of the Q tile
// (store_wg_rows), which its last S = Q·Kᵀ is done reading.
//
// Q is not an image: it is read once per block, and converting it here
// saves the pass the other kernels need (a read of Q in float32, a write
// and a read of its image: 46 µs of 1.81 ms at D = 128 N = 8k on the
// H200). K and V stay images: every query block reads them, and float32
// tiles would double the main loop's traffic. But the persistent kernels
// write those images themselves, during the forward, with the producer
// warpgroup's idle warps (KVConverter below), where p.k_src is set.
//
// The two-consumer kernels (ws_persistent) run on a persistent grid of at
// most one block per SM (wgmmaForward.launch). Block b starts with item b
// of the B·H·q_tiles items of ws_rows rows (block_order's order); then
// its producer takes the next ticket of p.work_counter (zero at launch),
// the item gridDim.x + ticket, and hands it to the consumers through a
// ring of two shared slots (item_full, item_empty). Items so go out in
// block_order's order as blocks free up, as the hardware's scheduler hands
// out blocks: a fixed stride instead left some causal blocks twice the
// work of others (+17–46 % at N ≥ 4k, H100 2026-12-05). The producer
// counts K/V tiles across items, so that it copies the next item's first
// tiles while the consumers finish the last one; the consumers ask L2
// for the next item's Q rows before their epilogue (QRows::prefetch), and
// load them after it. A block's start (barriers, the first copies' round
// trip) and end are paid once per SM instead of once per item. The
// three-consumer kernel takes one item per block: at its 160 registers a
// thread, the item loop put 112–192 bytes of spills into the tile loop
// (ptxas 12.4).
//
// With p.k_src (KVConverter), the producer copies a tile only once the
// conversion's count for it is complete (wait_count).
//
// Barriers: full_k/full_v per stage (a tile's bytes, one arrival: the
// producer's expect_tx), empty_k/empty_v per stage (every consumer thread
// arrives when its products are done reading the tile, the last tile of
// an item too: an arrive releases only the arriving thread's own
// accesses). Stage uses are counted across the block's items (g): use g
// goes to stage g mod kWsStages, its round u = g / kWsStages, whose parity
// is u & 1; the producer refills a stage for round u after the release of
// round u − 1. The producer pads each item to whole rounds with uses that
// copy nothing (the consumers wait for them and release them), so that
// tile it of every item is in stage it mod kWsStages: a stage index the
// compiler can see is warp-uniform, which keeps the descriptors out of
// vector registers (see the consumers' loop).
#pragma once
#include "common.cuh"
#include "sm90.cuh"
#include "sm90_variants.cuh"

namespace flash {
namespace sm90 {

constexpr int kWsStages = 2;
// ws_consumers is the block's consumer warpgroups (NC), 64 query rows
// each, by default: three at DP = 64, where per score the softmax does as
// much as at 128 against half the tensor work, so more warps hide it
// (FlashAttention 3 takes 192-row blocks there too); two at DP = 128, whose
// O, S and P fill 240 registers a thread. DP = 64 also has a two-consumer
// kernel, for short causal problems, where 192-row blocks leave too few
// blocks (select.go's wgmmaWSConsumers). ws_threads adds the producer
// warpgroup, ws_rows is the block's rows.
template <int DP> __host__ __device__ constexpr int ws_consumers() { return DP == 64 ? 3 : 2; }
template <int NC> __host__ __device__ constexpr int ws_threads() { return 128 * (NC + 1); }
template <int NC> __host__ __device__ constexpr int ws_rows() { return 64 * NC; }
// ws_persistent: the grid is persistent, each block taking items in turn
// (the two-consumer kernels), or one block per item (three consumers: at
// their 160 registers a thread, the item loop put 112–192 bytes of spills
// into the tile loop, ptxas 12.4). select.go repeats it (wgmmaWSPersistent).
template <int NC> __host__ __device__ constexpr bool ws_persistent() { return NC == 2; }
// Registers per thread after setmaxnreg: 24 × 128 + 240 × 256 or
// 24 × 128 + 160 × 384, 64512 of the SM's 65536 (the block is alone on its
// SM).
constexpr int kWsProducerRegs = 24;
template <int NC> __host__ __device__ constexpr int ws_consumer_regs() { return NC == 3 ? 160 : 240; }

// ws_built reports whether the warp-specialized forward serves precision E
// at DP (select.go repeats it: wgmmaWSBuilt).
template <typename E, int DP> __host__ __device__ constexpr bool ws_built() {
  return sizeof(typename E::Storage) == 2 ? DP == 64 || DP == 128 : DP == 128;
}
// ws_ring_bytes: the persistent kernels' item ring, two slots of the next
// item's index and their item_full and item_empty mbarriers.
template <int NC> __host__ __device__ constexpr int ws_ring_bytes() { return ws_persistent<NC>() ? 6 * 8 : 0; }
// ws_bar_bytes: the 4·kWsStages mbarriers of the stages and the item ring.
template <int NC> __host__ __device__ constexpr int ws_bar_bytes() { return 4 * kWsStages * 8 + ws_ring_bytes<NC>(); }
// ws_sums_on_tc: the kernels that sum P's rows on the tensor cores, as
// the product of P with a tile of ones (an n8 wgmma beside each of P·V's),
// instead of 62 FADD a thread and tile: 16-bit operands at DP = 64, where
// the softmax, not the tensor cores, bounds the loop. The sums are then
// those of the 16-bit P that P·V multiplies. ws_ones_bytes is their tile
// of ones: one 1024-byte panel, which every k-slice's descriptor reads
// (all of it is ones, so where the swizzle puts a slice does not matter).
template <typename E, int DP> __host__ __device__ constexpr bool ws_sums_on_tc() {
  return sizeof(typename E::Storage) == 2 && DP == 64;
}
template <typename E, int DP> __host__ __device__ constexpr int ws_ones_bytes() {
  return ws_sums_on_tc<E, DP>() ? 1024 : 0;
}
// ws_base_bytes: up to 1024 bytes to align the tiles, Q (ws_rows rows),
// kWsStages stages of a K and a Vᵀ tile of fwd_bk keys, ws_ones_bytes and
// ws_bar_bytes. It is all a launch without the K/V conversion needs, which
// matters: the rest of the SM's 256 KB is its L1 cache, and with the
// conversion's staging areas allocated but unused the short BF16 D = 128
// forwards that keep the conversion passes ran 1.3–6.3 % slower (H100,
// 2026-12-07).
template <typename E, int DP, int NC> __host__ __device__ constexpr int ws_base_bytes() {
  return 1024 + ws_rows<NC>() * DP * static_cast<int>(sizeof(typename E::Storage)) +
         2 * kWsStages * fwd_kv_bytes<E, DP>() + ws_ones_bytes<E, DP>() + ws_bar_bytes<NC>();
}
// The persistent kernels convert K and V into their images themselves
// (KVConverter below): a task is kWsCvtBytes of float32 rows, which a bulk
// copy brings into one of ws_cvt_stages staging areas (each with an
// mbarrier and a slot for the task's number, 16 bytes, after the item
// ring), as many as fit beside the rest in the kSmemOptIn bytes a block
// may have, up to four: four at 16-bit DP = 64 and 128, two at TF32
// DP = 128. The areas come last, ws_cvt_off bytes after the stages'
// mbarriers (128-byte aligned), so that a launch without the conversion
// takes ws_base_bytes alone. select.go repeats them (wgmmaWSCvtStages,
// wgmmaWSSmem).
constexpr int kWsCvtBytes = 16384;
constexpr int kSmemOptIn = 232448;  // 227 KB, sm_90's most dynamic shared memory a block may have
template <typename E, int DP, int NC> __host__ __device__ constexpr int ws_cvt_stages() {
  if (!ws_persistent<NC>()) return 0;
  const int fit = (kSmemOptIn - ws_base_bytes<E, DP, NC>() - 127) / (kWsCvtBytes + 16);  // 127: the alignment
  return fit < 4 ? fit : 4;
}
template <typename E, int DP, int NC> __host__ __device__ constexpr int ws_cvt_off() {
  return (ws_bar_bytes<NC>() + 16 * ws_cvt_stages<E, DP, NC>() + 127) / 128 * 128;
}
// ws_smem_bytes: ws_base_bytes and, with staging areas, their mbarriers,
// slots, alignment and the areas. select.go repeats it (wgmmaWSSmem).
template <typename E, int DP, int NC> __host__ __device__ constexpr int ws_smem_bytes() {
  return ws_cvt_stages<E, DP, NC>() == 0
             ? ws_base_bytes<E, DP, NC>()
             : ws_base_bytes<E, DP, NC>() - ws_bar_bytes<NC>() + ws_cvt_off<E, DP, NC>() +
                   ws_cvt_stages<E, DP, NC>() * kWsCvtBytes;
}

#ifdef FLASH_EMU  // no register file to share out on the host
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {}
#else
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

// fence_regs pins the registers of x at this point of the program: the
// compiler may not move their reads or writes across it. wgmma writes its
// accumulators asynchronously, which the compiler does not know; reads of
// them must stay after the wgmma_wait that completes them, and writes
// before the wgmma_fence that precedes the next product.
template <int N> __device__ __forceinline__ void fence_regs(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
#ifdef FLASH_EMU  // emulated wgmma writes at the wait, which the compiler sees
      (void)x[i][e];
#else
      asm volatile("" : "+f"(x[i][e])::"memory");
#endif
    }
}

// row_reduce folds with op, as a tree (tree_reduce), the scores of row r
// (0 or 1) that a thread holds in an m16n8 accumulator layout: s[j][2r]
// and s[j][2r + 1] of each n8 tile j. FMax, FMin and FSum are the
// softmax's ops.
template <int N, typename Op> __device__ __forceinline__ float row_reduce(const float (&s)[N][4], int r, Op op) {
  float v[N];
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = op(s[j][2 * r], s[j][2 * r + 1]);
  return tree_reduce(v, op);
}
struct FMax {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct FMin {
  __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); }
};
struct FSum {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// prefetch_l2 asks L2 for the line holding x (nothing on the host).
__device__ __forceinline__ void prefetch_l2(const float* x) {
#ifdef FLASH_EMU
  (void)x;
#else
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(x));
#endif
}

// take_item returns the next ticket of the persistent grid's item counter.
__device__ __forceinline__ long long take_item(void* counter) {
#ifdef FLASH_EMU  // one host thread runs every fiber
  int* c = static_cast<int*>(counter);
  return (*c)++;
#else
  return atomicAdd(static_cast<int*>(counter), 1);
#endif
}

// The persistent kernels' p.work_counter is an int array, zero at launch:
// the item counter, the conversion's task counter (KVConverter), then one
// count per (head, key tile) of the conversion tasks done there.

// publish_writes orders this thread's global stores before later accesses
// of the async proxy (other blocks' bulk copies read them once a count
// announces them: count_done after a barrier).
__device__ __forceinline__ void publish_writes() {
#ifndef FLASH_EMU  // emulated memory is coherent
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
// count_done adds one to a ready count, a release at GPU scope: after a
// barrier of the threads whose stores it announces, it makes those visible
// to the thread that acquires the count (wait_count).
__device__ __forceinline__ void count_done(int* c) {
#ifdef FLASH_EMU
  ++*c;
#else
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(c) : "memory");
#endif
}
// wait_count waits until *c is at least need (an acquire at GPU scope),
// then orders the bulk copies that follow after what it saw. Each acquire
// load invalidates the SM's whole L1 (ptxas 12.4: LDG.E.STRONG.GPU, then
// CCTL.IVALL), so a stack slot that any warp of the block reloads in a
// loop costs it a trip to L2 (see q_tiles_of in fwd_wgmma_ws below).
__device__ __forceinline__ void wait_count(const int* c, int need) {
#ifdef FLASH_EMU  // the other fibers raise it
  while (*static_cast<const volatile int*>(c) < need) ::emu::spin();
#else
  for (;;) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(c) : "memory");
    if (v >= need) break;
    __nanosleep(128);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
// named_bar synchronises count threads on named barrier id.
__device__ __forceinline__ void named_bar(int id, int count) {
#ifdef FLASH_EMU
  ::emu::arrive_named(id, count);
#else
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}

// KVConverter converts the caller's float32 K and V (p.k_src and p.v_src:
// dense [B·H, nk, dim], dim a multiple of 4, 16-byte aligned) into the K
// and Vᵀ images the producer copies tiles from (p.k, p.v, as
// to_image_rows and to_image_vt write them), inside the persistent
// kernels, with the three warps of the producer warpgroup that have
// nothing else to do. Why: as two passes before the forward (a read of K
// and V in float32, a write of their images) they took 127 µs at
// B·N = 16k, hidden 2048 (H200, ncu), a fifth of the BF16 forward at
// N = 2k, while here they run under the forward's products, whose DRAM
// is mostly idle. (Copying float32 tiles into every block instead would
// double the tile loop's traffic: every query block reads all of K and V.)
//
// A task is kRows rows (kWsCvtBytes of float32) of K or of V of one head.
// Each converter warp takes tasks from the task counter into the staging
// areas it owns (run; with TF32's two areas the three warps together):
// its lane 0 bulk-copies the task's rows into an area, the warp converts
// them from there into the image and publishes its stores, then lane 0
// raises the count of the task's (head, key tile) and takes the next task
// into the area. Tasks go out in the order the items need them: heads in
// block_order's groups of kOrderPairs, key tile by key tile within a
// group, K and V of each head of the group at each tile. The producer
// waits for a tile's count to reach kPerTile before it copies the tile
// (wait_count, before it waits for the stage to be free, so that the
// check's round trip overlaps that wait). Converters wait for nothing but
// their own copies, so the tasks finish with any number of the grid's
// blocks resident: no block waits on one that cannot run.
template <typename E, int DP, int NC> struct KVConverter {
  using S = typename E::Storage;
  static constexpr int kBK = fwd_bk<E, DP>(), kRows = kWsCvtBytes / (DP * 4), kPerTile = 2 * kBK / kRows;
  static constexpr int kStages = ws_cvt_stages<E, DP, NC>(), kVec = mma::StorageOf<E>::kVec;
  static constexpr int kBar = 8;  // run_team's named barrier: the consumers' are 1 … NC
  static constexpr int kThreads = 96;  // warps 1 … 3 of the producer warpgroup
  static_assert(E::kParts == 1, "the split type is not warp-specialized");
  static_assert(kBK % kRows == 0 && kRows % 8 == 0, "tasks split a key tile into groups of 8 keys");
  static_assert(kStages >= 2, "at least two staging areas: a copy in flight while one converts");

  // The state is one shared address, the block's mbarriers (bars), after
  // which come the areas' mbarriers (kFullOff on), their task slots and
  // the areas; the rest is recomputed from p (constant memory), since the
  // converters have the producer warpgroup's 24 registers a thread
  // (kWsProducerRegs).
  const Params& p;
  uint32_t bars;
  static constexpr int kFullOff = ws_bar_bytes<NC>();  // after the item ring
  static constexpr int kSlotOff = kFullOff + 8 * kStages;
  static constexpr int kAreaOff = ws_cvt_off<E, DP, NC>();
  static_assert(kSlotOff + 8 * kStages <= kAreaOff, "the slots end before the areas");

  __device__ __forceinline__ KVConverter(const Params& p_, uint32_t bars_) : p(p_), bars(bars_) {}
  __device__ __forceinline__ uint32_t area(int s) const { return bars + kAreaOff + s * kWsCvtBytes; }

  __device__ __forceinline__ int* counters() const { return static_cast<int*>(p.work_counter); }
  __device__ __forceinline__ unsigned heads() const { return static_cast<unsigned>(p.b * p.h); }
  __device__ __forceinline__ unsigned kv_tiles() const { return static_cast<unsigned>((p.nk + kBK - 1) / kBK); }
  __device__ __forceinline__ unsigned total() const { return heads() * kv_tiles() * kPerTile; }
  __device__ __forceinline__ uint32_t full(int s) const { return bars + kFullOff + 8 * s; }

  // ready is the count the producer waits on for key tile `tile` of head bh.
  __device__ __forceinline__ static const int* ready(const Params& p, long long bh, int tile) {
    const long long kv_tiles = (p.nk + kBK - 1) / kBK;
    return static_cast<const int*>(p.work_counter) + 2 + bh * kv_tiles + tile;
  }

  struct Task {
    unsigned bh, tile, sub;  // head, key tile, kRows-row part of the tile
    bool v;                  // V's rows, else K's
  };
  __device__ __forceinline__ Task decode(unsigned t) const {
    const unsigned group_tasks = kOrderPairs * kv_tiles() * kPerTile;
    const unsigned group = t / group_tasks, r = t - group * group_tasks;
    const unsigned left = heads() - group * kOrderPairs, in_group = left < kOrderPairs ? left : kOrderPairs;
    const unsigned per_tile = in_group * kPerTile, tile = r / per_tile, rem = r - tile * per_tile;
    const unsigned s = rem % kPerTile;
    return {group * kOrderPairs + rem / kPerTile, tile, s >> 1, (s & 1) != 0};
  }
  __device__ __forceinline__ volatile unsigned* slot(int s) const {
    return reinterpret_cast<volatile unsigned*>(smem + (bars + kSlotOff + 8 * s - smem_addr(smem)));
  }
  // valid_rows is how many of a task's rows are keys (the rest pad the tile).
  __device__ __forceinline__ int valid_rows(const Task& k) const {
    const long long left = p.nk - (static_cast<long long>(k.tile) * kBK + k.sub * kRows);
    return left <= 0 ? 0 : left < kRows ? static_cast<int>(left) : kRows;
  }

  // take returns the next task's number (the task counter's next ticket).
  __device__ __forceinline__ unsigned take() const { return static_cast<unsigned>(take_item(counters() + 1)); }

  // issue puts task t into staging area s and starts its copy (one
  // thread); past the last task it posts the number alone, which ends the
  // converters' loop.
  __device__ __forceinline__ void issue(int s, unsigned t) const {
    *slot(s) = t;
    if (t < total()) {
      const Task k = decode(t);
      const uint32_t bytes = static_cast<uint32_t>(valid_rows(k)) * static_cast<uint32_t>(p.dim) * 4u;
      if (bytes > 0) {
        const float* src = static_cast<const float*>(k.v ? p.v_src : p.k_src) +
                           (static_cast<long long>(k.bh) * p.nk + static_cast<long long>(k.tile) * kBK + k.sub * kRows) * p.dim;
        mbar_arrive_expect_tx(full(s), bytes);
        bulk_copy(area(s), src, bytes, full(s));
        return;
      }
    }
    mbar_arrive(full(s));
  }

  // convert writes task k's rows from staging area s into its image, as
  // thread ct of a team of kTeam. K: its 16-byte chunks in image order, a
  // row's chunks to consecutive threads; V: one column (d) of kVec keys per
  // chunk, consecutive columns to consecutive threads (reads of one staged
  // row, without bank conflicts).
  template <int kTeam> __device__ __forceinline__ void convert(const Task& k, int s, int ct) const {
    const float* st = reinterpret_cast<const float*>(smem + (area(s) - smem_addr(smem)));
    const int dim = static_cast<int>(p.dim), valid = valid_rows(k);
    unsigned char* img = reinterpret_cast<unsigned char*>(
        static_cast<S*>(const_cast<void*>(k.v ? p.v : p.k)) +
        (static_cast<long long>(k.bh) * kv_tiles() + k.tile) * kBK * DP);
    if (kFullTaskLoops && valid == kRows && dim == DP) {
      if (!k.v) {
        if constexpr (kTeam % (DP / kVec) == 0) return convert_full_k<kTeam>(st, reinterpret_cast<uint4*>(img), k.sub, ct);
      } else {
        if constexpr (DP % kTeam == 0) return convert_full_v<kTeam>(st, reinterpret_cast<uint4*>(img), k.sub, ct);
      }
    }
    if (!k.v) {
      constexpr int kChunks = DP / kVec;
#pragma unroll 1
      for (int w = ct; w < kRows * kChunks; w += kTeam) {
        const int r = w / kChunks, c = w % kChunks;
        float f[kVec];
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
          if (r < valid && c * kVec + e < dim) a = *reinterpret_cast<const float4*>(st + r * dim + c * kVec + e);
          f[e] = a.x, f[e + 1] = a.y, f[e + 2] = a.z, f[e + 3] = a.w;
        }
        *reinterpret_cast<uint4*>(img + image_chunk(static_cast<int>(k.sub) * kRows + r, c, kBK) * 16) =
            mma::image_value<E>(f, 0);
      }
    } else {
      constexpr int kKeyChunks = kRows / kVec;
#pragma unroll 1
      for (int w = ct; w < DP * kKeyChunks; w += kTeam) {
        const int d = w % DP, kc = w / DP;
        float f[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const int key = key_at_column<E>(kc * kVec + e);
          f[e] = d < dim && key < valid ? st[key * dim + d] : 0.f;
        }
        *reinterpret_cast<uint4*>(img + image_chunk(d, static_cast<int>(k.sub) * kKeyChunks + kc, DP) * 16) =
            mma::image_value<E>(f, 0);
      }
    }
  }

  // convert_full_k and convert_full_v are convert for a task of kRows keys
  // of D = DP, the common case, with a thread's columns fixed over the
  // loop: its loads need no bounds and its image addresses advance by a
  // constant but for the swizzle, about a third of the general loop's
  // instructions (whose divisions, bounds and per-element addresses ptxas
  // computes every pass in the converters' 24 registers). At DP = 128 they
  // ran the 16-bit forward 8–11 % faster at N = 512 and at N = 1k causal
  // (a warp's task: 4.3 → 2.9 µs converting); at DP = 64 the same loops
  // ran the three-consumer forward 1–4 % slower at N ≤ 4k, though they
  // converted faster there too (H100, 2026-12-07, RESULTS), so DP = 64
  // keeps the general loop (kFullTaskLoops).
  static constexpr bool kFullTaskLoops = DP == 128;
  // K: thread ct converts chunk c = ct mod kChunks of rows ct / kChunks,
  // + kStep, + 2·kStep, …; a warp's stores fill whole 128-byte lines.
  template <int kTeam>
  __device__ __forceinline__ void convert_full_k(const float* st, uint4* img, unsigned sub, int ct) const {
    constexpr int kChunks = DP / kVec, kStep = kTeam / kChunks;
    const int c = ct % kChunks, r0 = ct / kChunks;
    const float* src = st + r0 * DP + c * kVec;
    uint4* out = img + image_panel(c, kBK);
    const int end = (static_cast<int>(sub) + 1) * kRows;
#pragma unroll 1
    for (int r = static_cast<int>(sub) * kRows + r0; r < end; r += kStep, src += kStep * DP) {
      float f[kVec];
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        const float4 a = *reinterpret_cast<const float4*>(src + e);
        f[e] = a.x, f[e + 1] = a.y, f[e + 2] = a.z, f[e + 3] = a.w;
      }
      out[r * 8 + image_swizzle(r, c)] = mma::image_value<E>(f, 0);
    }
  }
  // V: thread ct converts column d = ct + kTeam·j (j < DP / kTeam) of each
  // kVec keys in turn; consecutive threads read consecutive columns of
  // one staged row (no bank conflicts), kVec rows apart.
  template <int kTeam>
  __device__ __forceinline__ void convert_full_v(const float* st, uint4* img, unsigned sub, int ct) const {
    constexpr int kKeyChunks = kRows / kVec;
    static_assert(kTeam % 8 == 0, "a thread's rows d share d % 8, its swizzle");
#pragma unroll 1
    for (int kc = 0; kc < kKeyChunks; ++kc) {
      const int col = static_cast<int>(sub) * kKeyChunks + kc;  // the image's chunk column
      uint4* out = img + image_panel(col, DP) + image_swizzle(ct, col);
#pragma unroll 1
      for (int d = ct; d < DP; d += kTeam) {
        float f[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) f[e] = st[key_at_column<E>(kc * kVec + e) * DP + d];
        out[d * 8] = mma::image_value<E>(f, 0);
      }
    }
  }

  // run is the converters' loop (thread ct of kThreads). With three staging
  // areas or more (16-bit operands) each warp works on its own
  // (run_warps); with two (TF32 at DP = 128) the three warps convert each
  // task together (run_team): two warps of one area each ran the TF32
  // forward 16 % slower where the conversion binds (N = 1k, and 2k causal;
  // H100, 2026-12-07).
  __device__ void run(int ct) const {
    if constexpr (kStages >= 3) {
      run_warps(ct / 32, ct % 32);
    } else {
      run_team(ct);
    }
  }

  // run_warps: warp `warp` owns the staging areas s ≡ warp (mod 3); its
  // lane 0 issues their copies and takes the next task's ticket before
  // converting (the atomic's round trip under the conversion). After
  // converting, the lanes fence their stores for the async proxy and meet
  // at __syncwarp, which orders them before lane 0's release at GPU scope
  // (red.release.gpu: MEMBAR.GPU, then the add). Why per warp: as one team
  // every task waited in turn on the stores' fence, one named barrier and
  // one MEMBAR.GPU (1.7–2.1 µs converting and fencing, 0.5 µs releasing a
  // 16 KB task, H100 trace, fwd-trace.patch), and the producers waited on
  // the conversion for 46–49 % of the forward at D = 128, N = 1k and 2k
  // causal; here a warp's fence and release run while the other two
  // convert (−13 % there).
  __device__ void run_warps(int warp, int lane) const {
    constexpr int kWarps = kThreads / 32;
    const int owned = (kStages - warp + kWarps - 1) / kWarps;
    if (lane == 0)
      for (int j = 0; j < owned; ++j) issue(warp + j * kWarps, take());
#pragma unroll 1
    for (unsigned n = 0;; ++n) {
      const unsigned use = n / static_cast<unsigned>(owned);
      const int s = warp + static_cast<int>(n - use * static_cast<unsigned>(owned)) * kWarps;
      mbar_wait(full(s), use & 1);
      const unsigned t = *slot(s);
      if (t >= total()) return;
      const unsigned next = lane == 0 ? take() : 0u;
      const Task k = decode(t);
      convert<32>(k, s, lane);
      publish_writes();
      __syncwarp();  // every lane's stores made, the staging area read
      if (lane == 0) {
        count_done(counters() + 2 + static_cast<long long>(k.bh) * kv_tiles() + k.tile);
        issue(s, next);
      }
    }
  }

  // run_team: the three warps take the areas in turn and convert each task
  // together; the issuing thread (ct 0) takes the refill's ticket before
  // converting, and raises the count after the named barrier kBar, a
  // release at GPU scope that covers every converter's stores (the barrier
  // orders them before it, as CUTLASS's GenericBarrier does).
  __device__ void run_team(int ct) const {
    if (ct == 0)
      for (int s = 0; s < kStages; ++s) issue(s, take());
#pragma unroll 1
    for (unsigned n = 0;; ++n) {
      const int s = static_cast<int>(n % kStages);
      mbar_wait(full(s), (n / kStages) & 1);
      const unsigned t = *slot(s);
      if (t >= total()) return;
      const unsigned next = ct == 0 ? take() : 0u;
      const Task k = decode(t);
      convert<kThreads>(k, s, ct);
      publish_writes();
      named_bar(kBar, kThreads);  // every thread's stores made, the staging area read
      if (ct == 0) {
        count_done(counters() + 2 + static_cast<long long>(k.bh) * kv_tiles() + k.tile);
        issue(s, next);
      }
    }
  }
};

// QRows holds a thread's share of a warpgroup's 64 rows of Q in float32
// (WgRows, whose store it uses). Its load is WgRows::load written for Q's
// Params fields: written as a call of WgRows::load, ptxas 12.4 laid the
// forward out differently (5552 → 5560 instructions, the tile loop the same
// but 192 bytes later) and the BF16 forward ran 0.7–1.2 % slower at D = 128
// and up to 4.9 % at D = 64, N ≤ 1k (H100, 2026-12-06, RESULTS).
template <typename E, int DP> struct QRows : WgRows<E, DP> {
  using WgRows<E, DP>::kVec, WgRows<E, DP>::kRowChunks, WgRows<E, DP>::kPer, WgRows<E, DP>::f;

  // load issues every load of rows r0 … r0 + 63 of head bh of the
  // caller's float32 Q (p.q with its strides), zero past nq and dim, as
  // thread tid of the warpgroup: all of them in flight at once, so that
  // the conversion costs one DRAM round trip, not one per chunk (one
  // chunk after another, a first version cost 60–90 µs over the forward,
  // H100 2026-12-05).
  __device__ __forceinline__ void load(const Params& p, long long bh, long long r0, int tid) {
    const float* qh = head_of(static_cast<const float*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
    // 16-byte loads where every row of the head starts on a 16-byte boundary.
    const bool vec = p.dim % 4 == 0 && p.q_row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(qh) % 16 == 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * 128, r = i / kRowChunks, c = i % kRowChunks;
      const long long row = r0 + r, c0 = static_cast<long long>(c) * kVec;
      const float* src = qh + row * p.q_row_stride + c0;
      if (vec && row < p.nq && c0 + kVec <= p.dim) {
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 a = *reinterpret_cast<const float4*>(src + e);
          f[j][e] = a.x, f[j][e + 1] = a.y, f[j][e + 2] = a.z, f[j][e + 3] = a.w;
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) f[j][e] = row < p.nq && c0 + e < p.dim ? src[e] : 0.f;
      }
    }
  }
  // prefetch asks L2 for the lines load will read (no registers held: at
  // DP = 128 the float32 rows held through the epilogue spilled 644 bytes,
  // ptxas 12.4, since every consumer thread lives within the launch's 168
  // registers).
  __device__ __forceinline__ static void prefetch(const Params& p, long long bh, long long r0, int tid) {
    const float* qh = head_of(static_cast<const float*>(p.q), bh, p.h, p.q_batch_stride, p.q_head_stride);
    constexpr int kLines = DP / 32;  // 128-byte lines of a row (up to DP columns)
#pragma unroll
    for (int k = 0; k < kQTileRows * kLines / 128; ++k) {
      const int line = tid + k * 128;
      const long long row = r0 + line / kLines, c0 = line % kLines * 32;
      if (row < p.nq && c0 < p.dim) prefetch_l2(qh + row * p.q_row_stride + c0);
    }
  }
};

// WsItem is one item of the persistent grid: ws_rows query rows of one
// head, and the key tiles they see.
struct WsItem {
  long long bh, q0;
  SeqMask mk;
  int n_tiles;
};

// ws_item locates item i of n_items (block_order's order over B·H heads of
// q_tiles tiles each, longest first with a right bound) for blocks of ROWS
// rows and key tiles of BK.
template <int ROWS, int BK>
__device__ __forceinline__ WsItem ws_item(const Params& p, long long i, long long n_items, long long q_tiles) {
  WsItem w;
  long long tile;
  block_order(static_cast<unsigned>(i), static_cast<unsigned>(q_tiles), static_cast<unsigned>(n_items),
              p.mask_right >= 0, w.bh, tile);
  w.q0 = tile * ROWS;
  w.mk = seq_mask(p, w.bh);
  // The rows see keys 0 … key_hi of the last real row (plain problems:
  // from key 0, bounds nondecreasing in the row).
  const long long kv_end =
      w.q0 < w.mk.lq ? w.mk.key_hi((w.q0 + ROWS < w.mk.lq ? w.q0 + ROWS : w.mk.lq) - 1) : 0;
  w.n_tiles = static_cast<int>((kv_end + BK - 1) / BK);
  return w;
}

// fwd_ws is the kernel's body (see the top of this file): p.q is the
// caller's float32 Q, p.k and p.v the images fwd_rowblock reads. Block b
// starts with item b of the B·H·q_tiles items of ws_rows rows; with two
// consumers (ws_persistent: a grid of at most one block per SM,
// wgmmaForward.launch) it then takes items from p.work_counter until they
// run out, with three it stops there (a grid of one block per item).
template <typename E, int DP, int NC = ws_consumers<DP>()> __device__ void fwd_ws(const Params& p) {
  static_assert(ws_built<E, DP>(), "the warp-specialized forward is not built for this operand type and DP");
  static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
  // Without the K/V conversion (p.k_src unset) the launch leaves out its
  // staging areas, the last of the layout.
  require_launch(ws_threads<NC>(), p.k_src != nullptr ? ws_smem_bytes<E, DP, NC>() : ws_base_bytes<E, DP, NC>());
  require_plain(p);
  using S = typename E::Storage;
  constexpr int BK = fwd_bk<E, DP>();
  constexpr int kRows = ws_rows<NC>(), kConsumerThreads = ws_threads<NC>() - 128;
  constexpr int kQBytes = kRows * DP * static_cast<int>(sizeof(S)), kKVBytes = fwd_kv_bytes<E, DP>();
  constexpr int kWgQBytes = kQTileRows * DP * static_cast<int>(sizeof(S));
  constexpr int kNS = BK / 8, kNO = DP / 8;
  const float kInf = Math<float>::inf();
  const long long nq = p.nq, nk = p.nk;
  // The grid's items, q_tiles_of() a head's: each warpgroup counts them
  // after its setmaxnreg. Counted before it, they were live across it, so
  // ptxas 12.4 put them on the stack, and the 16-bit DP = 128 consumers
  // reloaded them at every item, without L1 to count on: each acquire of
  // the producer's waits (wait_count) invalidates the SM's whole L1
  // (CCTL.IVALL). Without the reloads that forward ran 0.3–4.8 % faster
  // (H100, 2026-12-07, RESULTS).
  const auto q_tiles_of = [&] { return (nq + kRows - 1) / kRows; };

  const uint32_t sQ = (smem_addr(smem) + 1023u) & ~1023u;
  // The mbarriers follow the stages; the K/V conversion's (persistent
  // kernels) follow the item ring, and its staging areas come last
  // (KVConverter), so that a launch without it can leave them out.
  using Cvt = KVConverter<E, DP, NC>;
  constexpr int kCvtStages = ws_cvt_stages<E, DP, NC>();
  const uint32_t sK = sQ + kQBytes, sV = sK + kWsStages * kKVBytes, sOnes = sV + kWsStages * kKVBytes;
  const uint32_t bars = sOnes + ws_ones_bytes<E, DP>();
  auto full_k = [&](int st) { return bars + 8 * st; };
  auto full_v = [&](int st) { return bars + 8 * (kWsStages + st); };
  auto empty_k = [&](int st) { return bars + 8 * (2 * kWsStages + st); };
  auto empty_v = [&](int st) { return bars + 8 * (3 * kWsStages + st); };
  // The item ring (persistent kernels): the producer writes the block's
  // next item into slot j mod 2 after issuing item j's copies (item_full),
  // the consumers read it when item j's products are done (item_empty).
  auto item_full = [&](int slot) { return bars + 8 * (4 * kWsStages + slot); };
  auto item_empty = [&](int slot) { return bars + 8 * (4 * kWsStages + 2 + slot); };
  auto item_slot = [&](int slot) {
    return reinterpret_cast<volatile long long*>(smem + (bars + 8 * (4 * kWsStages + 4 + slot) - smem_addr(smem)));
  };
  if (threadIdx.x == 0) {
    for (int st = 0; st < kWsStages; ++st) {
      mbar_init(full_k(st), 1);
      mbar_init(full_v(st), 1);
      mbar_init(empty_k(st), kConsumerThreads);
      mbar_init(empty_v(st), kConsumerThreads);
    }
    if constexpr (ws_persistent<NC>()) {
      for (int slot = 0; slot < 2; ++slot) {
        mbar_init(item_full(slot), 1);
        mbar_init(item_empty(slot), kConsumerThreads);
      }
      // The conversion's mbarriers lie past ws_base_bytes, all a launch
      // without it has.
      if (p.k_src != nullptr)
        for (int st = 0; st < kCvtStages; ++st) mbar_init(Cvt(p, bars).full(st), 1);
    }
    mbar_fence_init();
  }
  if constexpr (ws_sums_on_tc<E, DP>()) {
    // The tile of ones, written before any wgmma can read it.
    if (threadIdx.x < 64) {
      const uint32_t one = E::pack(1.f, 1.f);
      reinterpret_cast<uint4*>(smem + (sOnes - smem_addr(smem)))[threadIdx.x] = make_uint4(one, one, one, one);
      fence_proxy_async();
    }
  }
  __syncthreads();

  // warp_uniform: the consumers' Q descriptors in uniform registers
  // (ptxas 12.4: 917 → 887 instructions a tile at TF32 D = 128, with the
  // stages below).
  const int wg = warp_uniform(threadIdx.x / 128);
  if (wg == 0) {
    setmaxnreg_dec<kWsProducerRegs>();
    const long long q_tiles = q_tiles_of(), n_items = p.b * p.h * q_tiles;
    // With p.k_src, the kernel makes the K and Vᵀ images itself (persistent
    // kernels only): warps 1 … 3 convert, and the producer copies a tile
    // once its conversion is done.
    const bool own_kv = ws_persistent<NC>() && p.k_src != nullptr;
    if constexpr (ws_persistent<NC>()) {
      if (own_kv && threadIdx.x >= 32) {
        Cvt(p, bars).run(threadIdx.x - 32);
        return;
      }
    } else {
      if (p.k_src != nullptr) __trap();  // the three-consumer kernel reads images made before it
    }
    if (threadIdx.x == 0) {
      // Stage uses are counted across the block's items (see the top of
      // the file), so that the producer runs on into the next item while
      // the consumers finish one.
      int g = 0;
      long long i = blockIdx.x;
      for (int j = 0; i < n_items; ++j) {
        const WsItem w = ws_item<kRows, BK>(p, i, n_items, q_tiles);
        const S* kh = static_cast<const S*>(p.k) + w.bh * ((nk + BK - 1) / BK) * BK * DP;
        const S* vh = static_cast<const S*>(p.v) + w.bh * ((nk + BK - 1) / BK) * BK * DP;
        for (int it = 0; it < w.n_tiles; ++it, ++g) {
          const int st = g % kWsStages;
          const unsigned prev = ((g / kWsStages) & 1) ^ 1;  // parity of the stage's last release
          const long long off = static_cast<long long>(it) * BK * DP;
          if constexpr (ws_persistent<NC>()) {
            if (own_kv) wait_count(Cvt::ready(p, w.bh, it), Cvt::kPerTile);
          }
          if (g >= kWsStages) mbar_wait(empty_k(st), prev);
          mbar_arrive_expect_tx(full_k(st), kKVBytes);
          bulk_copy(sK + st * kKVBytes, kh + off, kKVBytes, full_k(st));
          if (g >= kWsStages) mbar_wait(empty_v(st), prev);
          mbar_arrive_expect_tx(full_v(st), kKVBytes);
          bulk_copy(sV + st * kKVBytes, vh + off, kKVBytes, full_v(st));
        }
        if constexpr (!ws_persistent<NC>()) {
          break;
        } else {
          // Stage uses without a copy up to a whole round of the stages
          // (the full barriers' phases complete on the arrival alone), so
          // that every item starts at stage 0 (see the consumers' loop).
          for (; g % kWsStages != 0; ++g) {
            const int st = g % kWsStages;
            const unsigned prev = ((g / kWsStages) & 1) ^ 1;
            if (g >= kWsStages) mbar_wait(empty_k(st), prev);
            mbar_arrive(full_k(st));
            if (g >= kWsStages) mbar_wait(empty_v(st), prev);
            mbar_arrive(full_v(st));
          }
        }
        // The block's next item: after the grid's first ones, the counter
        // hands them out in order as blocks ask (the hardware's scheduler
        // did so for one item a block; a fixed stride left causal blocks
        // with twice the work of others).
        i = gridDim.x + take_item(p.work_counter);
        const int slot = j & 1;
        if (j >= 2) mbar_wait(item_empty(slot), ((j >> 1) - 1) & 1);
        *item_slot(slot) = i;
        mbar_arrive(item_full(slot));  // releases the slot's write (n_items or more: the end)
      }
    }
    return;
  }
  setmaxnreg_inc<ws_consumer_regs<NC>()>();
  const long long q_tiles = q_tiles_of(), n_items = p.b * p.h * q_tiles;

  const int cw = wg - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const uint32_t sQw = sQ + cw * kWgQBytes;  // this warpgroup's rows of the Q tile
  const uint64_t q_desc = desc_sw128(sQw);
  const float scale_log2 = static_cast<float>(p.scale) * 1.4426950408889634f;
  float acc[kNO][4];
  float s[kNS][4];
  uint32_t pf[BK / E::kK][4];  // P of the last tile, the A operand of its P·V
  // With ws_sums_on_tc, the row sums of P accumulate on the tensor cores
  // beside O, rescaled with it: every column of the n8 tile holds its row's.
  constexpr bool kSumsOnTC = ws_sums_on_tc<E, DP>();
  float ls[1][4];
  const uint64_t ones_desc = desc_sw128(sOnes);
  // fence_acc: fence_regs of what P·V accumulates into.
  auto fence_acc = [&] {
    fence_regs(acc);
    if constexpr (kSumsOnTC) fence_regs(ls);
  };

  // qk issues S = Q·K_itᵀ for the tile in stage st.
  auto qk = [&](int st) {
    const uint64_t k_desc = desc_sw128(sK + st * kKVBytes);
#pragma unroll
    for (int kc = 0; kc < DP / E::kK; ++kc)
      Wgmma<E, BK>::ss(reinterpret_cast<float(&)[BK / 2]>(s), desc_advance(q_desc, k_slice_offset(kc, kQTileRows)),
                       desc_advance(k_desc, k_slice_offset(kc, BK)), kc > 0);
    wgmma_commit();
  };
  // pv issues O += P·V for the tile in stage st.
  auto pv = [&](int st) {
    const uint64_t v_desc = desc_sw128(sV + st * kKVBytes);
#pragma unroll
    for (int kk = 0; kk < BK / E::kK; ++kk) {
      Wgmma<E, DP>::rs(reinterpret_cast<float(&)[DP / 2]>(acc), pf[kk], desc_advance(v_desc, k_slice_offset(kk, DP)));
      if constexpr (kSumsOnTC) Wgmma<E, 8>::rs(ls[0], pf[kk], ones_desc);
    }
    wgmma_commit();
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < BK / E::kK; ++kk) E::p_frag(pf[kk], s, kk);
  };

  int gt = 0;  // the block's stage uses so far, as the producer counts them (g)
  const int tid = threadIdx.x % 128;
  QRows<E, DP> qr;  // the item's Q rows
  long long i = blockIdx.x;
  for (int j = 0; i < n_items; ++j) {
    const WsItem w = ws_item<kRows, BK>(p, i, n_items, q_tiles);
    const long long bh = w.bh, q0 = w.q0;
    const int n_tiles = w.n_tiles;
    auto row_of = [&](int r) { return q0 + cw * 64 + warp * 16 + g + 8 * r; };
    long long vis[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      long long lo;
      row_keys(w.mk, row_of(r), lo, vis[r]);
    }
    // Tiles below the fewer keys either row sees need no mask.
    const int n_unmasked = static_cast<int>((vis[0] < vis[1] ? vis[0] : vis[1]) / BK);
    float m[2] = {-kInf, -kInf}, l[2] = {0.f, 0.f};  // l: this thread's partial sums
#pragma unroll
    for (int n = 0; n < kNO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    ls[0][0] = ls[0][1] = ls[0][2] = ls[0][3] = 0.f;

    // The warpgroup's Q rows: the last item's epilogue is done with the
    // region (every thread past this barrier), then each thread's stores
    // are made visible to wgmma and the barrier waits for all of them.
    qr.load(p, bh, q0 + cw * 64, tid);
    wg_bar(cw);
    qr.store(sQw, tid);
    fence_proxy_async();
    wg_bar(cw);

    // softmax turns the scores of tile it into probabilities in s (online,
    // in log2 units, element e of n8 tile j being row e/2, key
    // 8j + 2t + (e & 1) of the tile), updates m and l, and returns each
    // row's factor for O. Unmasked tiles take the row's extremum of the raw
    // scores and fold the scale into the exponential's argument,
    // exp2(s·scale − m) in one FFMA: one multiplication less per score than
    // scaling first, which counts where the softmax, not the tensor cores,
    // bounds the loop (D = 64). The extremum is the minimum for a negative
    // scale. Masked tiles scale first, so that a masked score is −inf
    // whatever the scale's sign. The exponential flushes results below
    // 2^−126 to zero (ex2_ftz).
    auto softmax = [&](int it, float (&alpha)[2]) {
      const long long k0 = static_cast<long long>(it) * BK;
      with_mask(it >= n_unmasked, [&](auto kMasked) {
        float mult = scale_log2;  // what multiplies s in the exponential
        if constexpr (kMasked) {
#pragma unroll
          for (int j = 0; j < kNS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              s[j][e] *= scale_log2;
              if (k0 + j * 8 + 2 * t + (e & 1) >= vis[e / 2]) s[j][e] = -kInf;
            }
          mult = 1.f;
        }
        // Both rows' extrema, each a tree over the thread's scores, then
        // across the row's four threads; the sums are trees too (see
        // tree_reduce).
        float mx[2];
#pragma unroll
        for (int r = 0; r < 2; ++r)
          mx[r] = mult * (kMasked || scale_log2 >= 0.f ? row_reduce(s, r, FMax{}) : row_reduce(s, r, FMin{}));
#pragma unroll
        for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
#pragma unroll
        for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_new = fmaxf(m[r], mx[r]);
          // A row with no visible key so far keeps m = −inf; its reference is 0.
          const float ref = m_new == -kInf ? 0.f : m_new;
          alpha[r] = ex2_ftz(m[r] - ref);
          m[r] = m_new;
#pragma unroll
          for (int j = 0; j < kNS; ++j) {
            s[j][2 * r] = ex2_ftz(fmaf(s[j][2 * r], mult, -ref));
            s[j][2 * r + 1] = ex2_ftz(fmaf(s[j][2 * r + 1], mult, -ref));
          }
          if constexpr (!kSumsOnTC) l[r] = l[r] * alpha[r] + row_reduce(s, r, FSum{});
        }
      });
    };

    // Every item starts at stage 0 (the producer pads items to whole rounds
    // of the stages), so that a tile's stage is its index's, which the
    // compiler knows warp-uniform: counted across items, the stage kept the
    // K and Vᵀ descriptors in vector registers (+18 instructions a tile at
    // TF32 D = 128, ptxas 12.4). u0 is the item's first round.
    const int u0 = gt / kWsStages;
    auto phase = [&](int it) { return static_cast<unsigned>(u0 + it / kWsStages) & 1; };
    if (n_tiles > 0) {
      mbar_wait(full_k(0), phase(0));
      wgmma_fence();
      qk(0);
      wgmma_wait<0>();
      fence_regs(s);
      mbar_arrive(empty_k(0));
      float alpha[2];
      softmax(0, alpha);  // alpha multiplies an O of zeros: nothing to rescale
      pack_p();
      for (int it = 1; it < n_tiles; ++it) {
        const int st = it % kWsStages, pst = (it - 1) % kWsStages;
        mbar_wait(full_k(st), phase(it));
        mbar_wait(full_v(pst), phase(it - 1));
        fence_acc();
        wgmma_fence();
        qk(st);
        pv(pst);
        wgmma_wait<1>();  // S of tile it; P·V of tile it − 1 still running
        fence_regs(s);
        mbar_arrive(empty_k(st));
        softmax(it, alpha);
        wgmma_wait<0>();
        fence_acc();
        mbar_arrive(empty_v(pst));
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (alpha[r] != 1.f) {
#pragma unroll
            for (int n = 0; n < kNO; ++n) acc[n][2 * r] *= alpha[r], acc[n][2 * r + 1] *= alpha[r];
            if constexpr (kSumsOnTC) ls[0][2 * r] *= alpha[r], ls[0][2 * r + 1] *= alpha[r];
          }
        pack_p();
      }
      const int last = (n_tiles - 1) % kWsStages;
      mbar_wait(full_v(last), phase(n_tiles - 1));
      fence_acc();
      wgmma_fence();
      pv(last);
      wgmma_wait<0>();
      fence_acc();
      mbar_arrive(empty_v(last));
    }
    if constexpr (ws_persistent<NC>()) {
      // The producer's padding: each use waited for (so that no thread runs
      // a whole round of phases ahead) and released.
      int it = n_tiles;
      for (; it % kWsStages != 0; ++it) {
        const int st = it % kWsStages;
        mbar_wait(full_k(st), phase(it));
        mbar_wait(full_v(st), phase(it));
        mbar_arrive(empty_k(st));
        mbar_arrive(empty_v(st));
      }
      gt += it;
    }

    // The next item, its Q rows on their way into L2 during the epilogue.
    long long next = n_items;
    if constexpr (ws_persistent<NC>()) {
      const int slot = j & 1;
      mbar_wait(item_full(slot), (j >> 1) & 1);
      next = *item_slot(slot);
      mbar_arrive(item_empty(slot));
      if (next < n_items) {
        const WsItem nw = ws_item<kRows, BK>(p, next, n_items, q_tiles);
        QRows<E, DP>::prefetch(p, nw.bh, nw.q0 + cw * 64, tid);
      }
    }

    // Epilogue: O = acc / l and LSE; rows that see no key get O = 0 and
    // LSE = +inf (finish_row's conventions).
    float inv[2];
    if constexpr (kSumsOnTC) {
      // Each of the quad's threads holds its rows' whole sums, which
      // finish_wg_rows adds over the quad: one thread's alone.
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = t == 0 ? ls[0][2 * r] : 0.f;
    }
    finish_wg_rows(p, bh, nq, row_of(0), vis, m, l, 1.f, t, inv);
    // O = 0 exactly for a row without keys, whatever its zero probabilities
    // met (0·NaN from a non-finite V is NaN).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (vis[r] <= 0) {
#pragma unroll
        for (int n = 0; n < kNO; ++n) acc[n][2 * r] = acc[n][2 * r + 1] = 0.f;
      }
    }
    float* o = head_of(static_cast<float*>(p.o), bh, p.h, p.o_batch_stride, p.o_head_stride);
    store_wg_rows<DP, kWgQBytes>(o, p.o_row_stride, q0 + cw * 64, nq, p.dim, sQw, acc, inv, cw,
                                 rows_vec(o, p.o_row_stride, p.dim));
    if constexpr (!ws_persistent<NC>()) break;
    i = next;
  }
}

}  // namespace sm90
}  // namespace flash
