package cudakernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorgonia-flash/flashattention/kernels"
	"github.com/gorgonia-flash/flashattention/kernels/conformance"
)

// decodeHostCase is one problem of TestDecodeKernelsOnHost: the keys'
// storage format and the key splits to run it with (the device's split
// rule depends on its multiprocessors; these exercise the merge).
type decodeHostCase struct {
	s      storeKind
	splits int
	p      kernels.Params
	infKey bool // +Inf in one element of key 40 of key head 0
}

// decodeHostCases are few query rows per key head against a longer
// sequence of keys, as a key/value cache makes them: every unit shape of
// each storage format, grouped heads, lengths, a window, the softcap with
// ALiBi, causal rows, paged keys, +Inf in one key, and one to five
// splits.
func decodeHostCases() []decodeHostCase {
	at := func(b, h, hkv, nq, nk, d int) kernels.Params {
		return kernels.Params{B: b, H: h, Hkv: hkv, Nq: nq, Nk: nk, D: d, Scale: 1 / math.Sqrt(float64(d))}
	}
	lengths := at(2, 4, 2, 1, 300, 64)
	lengths.KLens = []int{300, 77}
	modified := at(1, 8, 1, 2, 250, 100) // 16 rows a key head: two units of 8
	modified.Causal, modified.Softcap, modified.ALiBi = true, 8, []float64{1, .5, .25, .125, .0625, .03125, .015625, .0078125}
	window := at(1, 2, 2, 3, 200, 40)
	window.Window = kernels.Window{On: true, Left: 50, Right: 0}
	paged := func(p kernels.Params, size int) kernels.Params {
		perSeq := (p.Nk + size - 1) / size
		pg := &kernels.Pages{Size: size, Count: p.B*perSeq + 3}
		next := pg.Count - 1 // pages handed out from the end, so that no table is the identity
		for range p.B {
			t := make([]int, perSeq)
			for i := range t {
				t[i], next = next, next-1
			}
			pg.Table = append(pg.Table, t)
		}
		p.Pages = pg
		return p
	}
	var cs []decodeHostCase
	for _, s := range []storeKind{storeF32, storeBF16, storeFP16} {
		for _, splits := range []int{1, 5} {
			cs = append(cs,
				decodeHostCase{s: s, splits: splits, p: at(2, 2, 2, 1, 200, 64)},
				decodeHostCase{s: s, splits: splits, p: lengths},
				decodeHostCase{s: s, splits: splits, p: modified},
				decodeHostCase{s: s, splits: splits, p: paged(window, 16)},
				decodeHostCase{s: s, splits: splits, p: paged(at(1, 4, 1, 1, 130, 200), 7)})
		}
		cs = append(cs, decodeHostCase{s: s, splits: 2, p: at(1, 4, 4, 4, 180, 128)},
			decodeHostCase{s: s, splits: 3, p: at(1, 4, 2, 1, 150, 64), infKey: true})
	}
	return cs
}

// TestDecodeKernelsOnHost runs the decoding kernels (csrc/decode.cuh: the
// split-KV units on CUDA cores for keys stored in float32 and on tensor
// cores for bf16 and fp16, and the merge of their splits) on the host
// through emu/decode.cc, with the launch shapes decode.go gives, and holds
// O and the LSE to the conformance suite's bounds in the precision the
// storage format serves (FP32, BF16, FP16). Stored rows are laid out as a
// device cache lays them out (padded to cacheRowAlign elements), keys
// past a sequence's length and a pool's unused pages hold NaN, and each
// sequence's last Nq keys come in through the cache's append kernel, as
// in a cache's step.
func TestDecodeKernelsOnHost(t *testing.T) {
	bin := buildEmu(t, emuCompiler(t), "decode")
	precisions := map[storeKind]Precision{storeF32: FP32, storeBF16: BF16, storeFP16: FP16}
	for i, c := range decodeHostCases() {
		name := fmt.Sprintf("%v/%s_paged=%v/splits=%d", c.s, caseName(c.p), c.p.Pages != nil, c.splits)
		if c.infKey {
			name += "/inf-k"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runDecodeOnHost(t, bin, c, precisions[c.s], uint64(i))
		})
	}
}

// storedRows returns x ([rows, d] float32) as format s stores it: rows of
// stride elements, the padding zero, as raw bytes.
func storedRows(s storeKind, x []float32, d, stride int) []byte {
	rows := len(x) / d
	out := make([]byte, rows*stride*s.bytes())
	for r := range rows {
		for c := range d {
			at := (r*stride + c) * s.bytes()
			switch v := x[r*d+c]; s {
			case storeF32:
				binary.LittleEndian.PutUint32(out[at:], math.Float32bits(v))
			case storeBF16:
				binary.LittleEndian.PutUint16(out[at:], bf16Bits(v))
			default:
				binary.LittleEndian.PutUint16(out[at:], fp16Bits(v))
			}
		}
	}
	return out
}

// bf16Bits rounds x to bfloat16, to nearest even (NaN stays NaN).
func bf16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// fp16Bits rounds x to IEEE binary16, to nearest even (past the largest
// half, 65504, to infinity).
func fp16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	sign := uint16(u>>16) & 0x8000
	a := math.Abs(float64(x))
	switch {
	case x != x:
		return 0x7e00
	case a >= 65520:
		return sign | 0x7c00
	case a < 0x1p-14: // subnormal: multiples of 2^-24
		return sign | uint16(math.RoundToEven(a*0x1p24))
	}
	u &= 0x7fffffff
	u += 0xfff + (u>>13)&1 // to 10 mantissa bits, nearest even
	exp := int(u>>23) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(u>>13)&0x3ff
}

// runDecodeOnHost runs one decode problem through emu/decode.cc and checks
// O and the LSE.
func runDecodeOnHost(t *testing.T, bin string, c decodeHostCase, prec Precision, seed uint64) {
	p := c.p
	normals := unitNormals(rand.New(rand.NewPCG(seed, 34)))
	poolRows := p.B * p.KVHeads() * p.Nk
	if p.Pages != nil {
		poolRows = p.Pages.Count * p.KVHeads() * p.Pages.Size
	}
	q, k, v := normals(p.QLen()), make([]float32, poolRows*p.D), make([]float32, poolRows*p.D)
	for i := range k {
		k[i], v[i] = float32(math.NaN()), float32(math.NaN()) // rows no key reads
	}
	// The last Nq keys of each sequence are the step's new rows, which the
	// append kernel stores: kNew and vNew [B, Hkv, Nq, D], each going to
	// its row of the pool (dest, in elements of the stored rows).
	kNew, vNew, dest := make([]float32, p.B*p.KVHeads()*p.Nq*p.D), make([]float32, p.B*p.KVHeads()*p.Nq*p.D), make([]int64, 0, p.B*p.KVHeads()*p.Nq)
	var appended [][2]int // (kvh, j) of each new row, in kNew's order
	for kvh := range p.B * p.KVHeads() {
		n := p.Nk
		if p.KLens != nil {
			n = p.KLens[kvh/p.KVHeads()]
		}
		for j := range n {
			row := p.KeyRow(kvh, j)
			copy(k[row:row+p.D], normals(p.D))
			copy(v[row:row+p.D], normals(p.D))
		}
		if c.infKey && kvh == 0 {
			k[p.KeyRow(0, 40)+2] = float32(math.Inf(1))
		}
		for j := n - p.Nq; j < n; j++ {
			row := p.KeyRow(kvh, j)
			copy(kNew[len(appended)*p.D:], k[row:row+p.D])
			copy(vNew[len(appended)*p.D:], v[row:row+p.D])
			appended = append(appended, [2]int{kvh, j})
		}
	}
	stored := func(x []float32) []float32 { // x as the pool holds it before the append: NaN in the new rows
		y := slices.Clone(x)
		for _, a := range appended {
			row := p.KeyRow(a[0], a[1])
			for c := range p.D {
				y[row+c] = float32(math.NaN())
			}
		}
		return y
	}
	// The backend's launch shape, with the case's splits (the device's
	// count rests on its multiprocessors; an H200's are given).
	sh, err := planDecode(p, c.s, 132, 227<<10, c.splits)
	if err != nil {
		t.Fatal(err)
	}
	stride := p.D
	if c.s != storeF32 {
		stride = int(roundUp(int64(p.D), cacheRowAlign))
	}
	var blob emuBlob
	vars := variantArgs{heads: int64(p.H)}
	if p.KLens != nil {
		vars.kLens = put(&blob, lens32(p.KLens))
	}
	if p.ALiBi != nil {
		vars.alibi = put(&blob, p.ALiBi)
	}
	for _, a := range appended {
		dest = append(dest, int64(p.KeyRow(a[0], a[1])/p.D*stride))
	}
	ops := operands{q: tensorAt{ptr: put(&blob, q), rows: int64(p.Nq), ld: int64(p.D)},
		k:    tensorAt{ptr: put(&blob, storedRows(c.s, stored(k), p.D, stride)), rows: int64(p.Nk), ld: int64(stride)},
		v:    tensorAt{ptr: put(&blob, storedRows(c.s, stored(v), p.D, stride)), rows: int64(p.Nk), ld: int64(stride)},
		o:    tensorAt{ptr: put(&blob, make([]float32, p.QLen())), rows: int64(p.Nq), ld: int64(p.D)},
		lse:  put(&blob, make([]float32, p.LSELen())),
		vars: vars}
	kp := newParams(p, ops)
	kp.Splits = int64(sh.splits)
	kp.KNew, kp.VNew, kp.DestRows = put(&blob, kNew), put(&blob, vNew), put(&blob, dest)
	var mergeBlocks, mergeThreads int64
	if sh.splits > 1 {
		o, lse := sh.partBytes(p, 4)
		kp.PartO, kp.PartLse = put(&blob, make([]float32, o/4)), put(&blob, make([]float32, lse/4))
		mergeBlocks, mergeThreads = sh.mergeBlocks(p), int64(decodeMergeBlock(sh.splits))
	}
	if p.Pages != nil {
		table, tableStride := tableOf(p)
		kp.BlockTable, kp.TableStride, kp.PageSize = put(&blob, table), tableStride, int64(p.Pages.Size)
	}
	formats := map[storeKind]int64{storeF32: 0, storeBF16: 1, storeFP16: 2}
	head := [8]int64{formats[c.s], int64(sh.dp), int64(sh.tile), int64(sh.grid), mergeBlocks, mergeThreads, int64(len(blob))}
	res := runEmu(t, bin, head, kp, blob)
	o, lse := get[float32](res, ops.o.ptr, p.QLen()), get[float32](res, ops.lse, p.LSELen())
	if p.Pages != nil {
		// The reference takes the keys dense: the same problem, gathered.
		dense := p
		dense.Pages = nil
		kd, vd := make([]float32, dense.KLen()), make([]float32, dense.KLen())
		for kvh := range p.B * p.KVHeads() {
			for j := range p.Nk {
				from, to := p.KeyRow(kvh, j), dense.KeyRow(kvh, j)
				copy(kd[to:to+p.D], k[from:])
				copy(vd[to:to+p.D], v[from:])
			}
		}
		p, k, v = dense, kd, vd
	}
	conformance.CheckForward(t, p, prec, q, k, v, o, lse)
}
