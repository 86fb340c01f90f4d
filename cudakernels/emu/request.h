// request.h is what the one-problem programs (mma.cc, decode.cc) share:
// reading their standard input, which emu_test.go's runEmu writes — eight
// int64 header words, the kernels' Params with every pointer an offset
// into the blob plus one (0: none), then the blob — and turning those
// offsets into addresses.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../csrc/params.cuh"

// Request is one problem: the header words, Params with its pointers into
// blob, and the blob, 16-byte aligned as device memory is.
struct Request {
  int64_t head[8];
  flash::Params p;
  std::vector<uint4> memory;
  unsigned char* blob = nullptr;
  size_t bytes = 0;

  // read takes the request from standard input; the blob's size is header
  // word blobWord. It exits 2 on a short input.
  explicit Request(int blobWord) {
    readInto(head, sizeof head);
    readInto(&p, sizeof p);
    if (head[blobWord] < 0) fail("a negative blob size");
    bytes = static_cast<size_t>(head[blobWord]);
    memory.resize((bytes + 15) / 16);
    blob = reinterpret_cast<unsigned char*>(memory.data());
    readInto(blob, bytes);
    for (auto* f : {&p.q, &p.k, &p.v, &p.dout, &p.q_t, &p.k_t, &p.dout_t, &p.q_lens, &p.k_lens, &p.alibi, &p.dlse,
                    &p.bias, &p.block_table, &p.k_new, &p.v_new, &p.dest_rows, &p.k_src,
                    &p.v_src})
      relocate(*f);
    for (auto* f : {&p.o, &p.lse, &p.delta, &p.dq, &p.dk, &p.dv, &p.lse_log2, &p.delta_pad, &p.dbias, &p.part_o,
                    &p.part_lse})
      relocate(*f);
  }

  // reply writes the blob, after the run, to standard output.
  void reply() const { std::fwrite(blob, 1, bytes, stdout); }

  [[noreturn]] static void fail(const char* why) {
    std::fprintf(stderr, "emu: bad request: %s\n", why);
    std::exit(2);
  }

 private:
  static void readInto(void* dst, size_t n) {
    if (n && std::fread(dst, 1, n, stdin) != n) fail("short input");
  }
  template <typename P> void relocate(P*& field) {
    const auto off = reinterpret_cast<uintptr_t>(field);
    if (off > bytes) fail("a pointer past the blob");
    field = off ? reinterpret_cast<P*>(blob + off - 1) : nullptr;
  }
};
