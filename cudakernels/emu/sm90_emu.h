// sm90_emu.h: host stand-ins for the Hopper instructions sm90.cuh and the
// Hopper kernels issue (cuda_emu.h includes it; the scheduler, the fibers
// and the barriers are there). What each one does:
//
//   - wgmma.mma_async (ss and rs, K-major or transposed operands): recorded
//     at issue and computed at the wgmma.wait_group that completes it, the
//     latest moment the hardware may read its operands and write its
//     accumulators. A kernel that reads an accumulator before the wait, or
//     changes an A register or a shared operand before it, sees what that
//     order gives: stale accumulators, changed operands. Products are added
//     in double and the sum to the accumulator in float, as the mma.sync
//     stand-ins do.
//   - Matrix descriptors are decoded as the PTX ISA defines them (start
//     address, leading and stride byte offsets, 128-byte swizzle); the
//     swizzle XORs address bits 4–6 with bits 7–9 of the shared address.
//     Other swizzle modes and a nonzero base offset stop the program.
//   - mbarriers: init, arrive, arrive.expect_tx and try_wait.parity on a
//     phase count; a bulk copy (cp.async.bulk) lands at once and completes
//     its bytes on the barrier. A wait that finds its phase incomplete gives
//     the other fibers a turn (spin); a pass of the scheduler in which no
//     thread gets anywhere is reported as a deadlock.
//   - bar.sync id, count (named barriers); setmaxnreg and the fences do
//     nothing, since memory here is coherent and registers unlimited.
//
// What it cannot see: the async proxy's ordering (a missing
// fence.proxy.async), timing, register and shared-memory limits, and
// whether the hardware's reading of a descriptor matches the PTX ISA's
// text where the kernels' device runs have not yet shown it does (the
// MN-major layout).
#pragma once

namespace emu {

// Elem names a wgmma operand type.
enum Elem { kBF16 = 0, kFP16 = 1, kTF32 = 2 };

inline unsigned char* shared_at(uint32_t addr) { return flash::smem + addr; }

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "emu: %s\n", what);
  std::abort();
}

// operand reads element (mn, k) of a wgmma operand in shared memory: mn a
// row of A (M) or of B (N), k the reduction index, K-major (k contiguous
// within 128-byte rows, 8-row groups sbo apart) or, transposed, MN-major
// (mn contiguous within 128-byte rows of one k, 64-element groups lbo apart
// and 8-k groups sbo apart), both with the 128-byte swizzle.
inline float operand(uint64_t desc, int mn, int k, bool mnMajor, Elem e) {
  const uint32_t start = static_cast<uint32_t>(desc & 0x3fff) << 4;
  const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3fff) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3fff) << 4;
  if ((desc >> 62) != 1) fail("wgmma: a descriptor without the 128-byte swizzle");
  if (((desc >> 49) & 7) != 0) fail("wgmma: a descriptor with a base offset");
  const uint32_t bytes = e == kTF32 ? 4 : 2, per = 128 / bytes;
  uint32_t addr;
  if (!mnMajor) {
    addr = start + static_cast<uint32_t>(mn / 8) * sbo + static_cast<uint32_t>(mn % 8) * 128 + k * bytes;
  } else {
    if (e == kTF32) fail("wgmma: tf32 has no transposed operand");
    addr = start + static_cast<uint32_t>(mn / per) * lbo + static_cast<uint32_t>(k / 8) * sbo +
           static_cast<uint32_t>(k % 8) * 128 + static_cast<uint32_t>(mn % per) * bytes;
  }
  addr ^= ((addr >> 7) & 7) << 4;
  if (addr + bytes > dyn_smem) fail("wgmma: an operand past the block's shared memory");
  const unsigned char* p = shared_at(addr);
  if (e == kTF32) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    return __uint_as_float(w & 0xffffe000u);  // the tensor core ignores the low 13 bits
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return e == kBF16 ? bf16_value(h) : fp16_value(h);
}

// fragment reads element (r, k) of a warp's m16 A fragment, held by the
// lanes of warp0 … warp0 + 31 as mma.cuh lays out: m16n8k16 for 16-bit
// types, m16n8k8 for tf32.
inline float fragment(const Pending* const* lanes, int r, int k, Elem e) {
  if (e == kTF32) {
    const uint32_t w = lanes[r % 8 * 4 + k % 4]->aFrag[(r >= 8) + 2 * (k >= 4)];
    return __uint_as_float(w & 0xffffe000u);
  }
  const uint32_t w = lanes[r % 8 * 4 + k % 8 / 2]->aFrag[(r >= 8) + 2 * (k >= 8)];
  const uint16_t h = static_cast<uint16_t>(k % 2 ? w >> 16 : w);
  return e == kBF16 ? bf16_value(h) : fp16_value(h);
}

// truncating makes wgmma's accumulation round toward zero, as the
// tensor cores' float32 accumulators are observed to truncate, where
// rounding to nearest (the default) is float32's own; a request asks for
// it (hopper.cc's header flag 4, which the Go tests set: emuTruncate).
// A model, not the hardware's exact sums: the k-slice's products are
// summed exactly before the one truncation.
inline bool truncating = false;

// accumulate returns acc + sum (the exact products of one k-slice, summed
// in double) rounded to float32: to nearest, or toward zero where
// truncating.
inline float accumulate(float acc, double sum) {
  const double t = static_cast<double>(acc) + sum;
  const float f = static_cast<float>(t);
  if (truncating && std::fabs(static_cast<double>(f)) > std::fabs(t)) return std::nextafter(f, 0.f);
  return f;
}

// wgmma records d (+)= A·B of shape m64nNkK for the running thread.
inline void wgmma(float* d, int n, Elem e, uint64_t a, const uint32_t* aFrag, uint64_t b, bool scaleD, bool transA,
                  bool transB) {
  const unsigned t = tid.x;
  running->pending[t].push_back(
      {d, n, e == kTF32 ? 8 : 16, e, a, b, aFrag, scaleD, transA, transB, running->committed[t]});
}

inline void wgmma_commit() { ++running->committed[tid.x]; }

// wgmma_wait completes every wgmma of the running thread's warp but those
// of its newest `newest` committed groups. The warp meets first, so that
// each lane reads the A registers of the others as they are at the wait,
// and again after, before any lane may change them.
inline void wgmma_wait(unsigned newest) {
  syncwarp();
  const unsigned t = tid.x, lane = t % 32, warp0 = t - lane, row0 = warp0 % 128 / 32 * 16;
  auto& mine = running->pending[t];
  const unsigned done = running->committed[t] >= newest ? running->committed[t] - newest : 0;
  size_t i = 0;
  for (; i < mine.size() && mine[i].group < done; ++i) {
    const Pending& op = mine[i];
    const Pending* lanes[32];
    for (unsigned l = 0; l < 32; ++l) {
      const auto& theirs = running->pending[warp0 + l];
      if (theirs.size() <= i || theirs[i].n != op.n || theirs[i].group != op.group)
        fail("wgmma: the lanes of a warp issued different wgmma");
      lanes[l] = &theirs[i];
    }
    // The lane's two rows of A and n/4 columns of B, each element read
    // once (not once per output it feeds), then the sums in k order.
    const unsigned g = lane / 4, q = lane % 4;
    const Elem e = static_cast<Elem>(op.elem);
    if (op.n > 256 || op.k > 16) fail("wgmma: a shape past m64n256k16");
    float av[2][16], bv[64][16];
    for (int h = 0; h < 2; ++h) {
      const int r = static_cast<int>(row0 + g) + 8 * h;
      for (int k = 0; k < op.k; ++k)
        av[h][k] = op.aFrag ? fragment(lanes, r % 16, k, e) : operand(op.a, r, k, op.transA, e);
    }
    for (int j = 0; j < op.n / 8; ++j)
      for (int p = 0; p < 2; ++p)
        for (int k = 0; k < op.k; ++k)
          bv[2 * j + p][k] = operand(op.b, 8 * j + 2 * static_cast<int>(q) + p, k, op.transB, e);
    for (int j = 0; j < op.n / 8; ++j)
      for (int v = 0; v < 4; ++v) {
        const float* a = av[v >= 2], *b = bv[2 * j + (v & 1)];
        double sum = 0;
        for (int k = 0; k < op.k; ++k) sum += static_cast<double>(a[k]) * b[k];
        float& acc = op.d[4 * j + v];
        acc = accumulate(op.scaleD ? acc : 0.f, sum);
      }
  }
  syncwarp();
  mine.erase(mine.begin(), mine.begin() + static_cast<long>(i));
}

// mbarrier returns the state of the mbarrier at shared address addr.
inline Mbarrier& mbarrier(uint32_t addr, bool init = false) {
  if (addr % 8 != 0) fail("mbarrier: an address not 8-byte aligned");
  if (addr + 8 > dyn_smem) fail("mbarrier: past the block's shared memory");
  for (auto& [at, m] : running->mbarriers)
    if (at == addr) return m;
  if (!init) fail("mbarrier: used before mbarrier.init");
  running->mbarriers.push_back({addr, Mbarrier{}});
  return running->mbarriers.back().second;
}

// complete ends the phase once every arrival and byte it awaits is in.
inline void complete(Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) ++m.phase, m.pending = m.expected;
}

inline void mbar_init(uint32_t addr, unsigned count) {
  if (count == 0) fail("mbarrier.init with a count of 0");
  mbarrier(addr, true) = Mbarrier{count, count, 0, 0};
  ++running->progress;
}

inline void mbar_arrive(uint32_t addr, uint32_t txBytes = 0) {
  Mbarrier& m = mbarrier(addr);
  if (m.pending == 0) fail("mbarrier: more arrivals than the phase expects");
  m.tx += txBytes;
  --m.pending;
  complete(m);
  ++running->progress;
}

// mbar_done is try_wait.parity: whether the phase of that parity is over.
inline bool mbar_done(uint32_t addr, unsigned parity) { return (mbarrier(addr).phase & 1) != (parity & 1); }

inline void mbar_wait(uint32_t addr, unsigned parity) {
  while (!mbar_done(addr, parity)) spin();
}

// bulk_copy is cp.async.bulk global → shared completing on an mbarrier.
inline void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  if (dst % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0 || bytes % 16 != 0)
    fail("cp.async.bulk: an address or size not a multiple of 16 bytes");
  if (dst + bytes > dyn_smem) fail("cp.async.bulk: past the block's shared memory");
  std::memcpy(shared_at(dst), src, bytes);
  Mbarrier& m = mbarrier(bar);
  m.tx -= bytes;
  complete(m);
  ++running->progress;
}

// bulk_reduce_add is cp.reduce.async.bulk.global.shared::cta.bulk_group
// .add.f32: recorded at issue in the thread's open bulk group, its shared
// bytes read and added into dst only when a bulk_wait_read completes that
// group, the latest moment the hardware may read them, so that a kernel
// that rewrites them before it waits sees its results change.
inline void bulk_reduce_add(float* dst, uint32_t src, uint32_t bytes) {
  if (src % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 || bytes % 16 != 0)
    fail("cp.reduce.async.bulk: an address or size not a multiple of 16 bytes");
  if (src + bytes > dyn_smem) fail("cp.reduce.async.bulk: past the block's shared memory");
  running->bulk[tid.x].push_back({dst, src, bytes, running->bulkCommitted[tid.x]});
}

// bulk_commit is cp.async.bulk.commit_group: it closes the open group.
inline void bulk_commit() { ++running->bulkCommitted[tid.x]; }

// bulk_wait_read is cp.async.bulk.wait_group.read n: every bulk group of
// the thread but the newest n committed ones has read its shared memory
// (and here added it into global memory). A reduction in a group not yet
// committed counts as pending too (PTX leaves it to no group until then).
inline void bulk_wait_read(unsigned n) {
  std::vector<BulkReduce>& pending = running->bulk[tid.x];
  const unsigned committed = running->bulkCommitted[tid.x];
  std::vector<BulkReduce> left;
  for (const BulkReduce& r : pending) {
    if (r.group + n >= committed) {
      left.push_back(r);
      continue;
    }
    const unsigned char* s = shared_at(r.src);
    for (uint32_t i = 0; i < r.bytes / 4; ++i) {
      float x;
      std::memcpy(&x, s + 4 * i, 4);
      r.dst[i] += x;
    }
  }
  pending.swap(left);
  ++running->progress;
}

}  // namespace emu
