//go:build flashgpu

package ring

/*
#cgo LDFLAGS: -lcuda -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// NCCL is loaded at run time: its headers are not packaged in Debian, and
// a binary must start (and run on the CPU) where the library is missing.
// These are the few declarations of NCCL's stable C ABI this file uses:
// an opaque communicator, the 128-byte unique id passed by value,
// ncclResult_t (0 is ncclSuccess) and ncclInt8 (0) for byte transfers.
typedef struct ncclComm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;
enum { ringNcclInt8 = 0 };

static ncclResult_t (*p_ncclGetUniqueId)(ncclUniqueId*);
static ncclResult_t (*p_ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
static ncclResult_t (*p_ncclSend)(const void*, size_t, int, int, ncclComm_t, CUstream);
static ncclResult_t (*p_ncclRecv)(void*, size_t, int, int, ncclComm_t, CUstream);
static ncclResult_t (*p_ncclGroupStart)(void);
static ncclResult_t (*p_ncclGroupEnd)(void);
static ncclResult_t (*p_ncclCommDestroy)(ncclComm_t);
static ncclResult_t (*p_ncclCommAbort)(ncclComm_t);
static const char* (*p_ncclGetErrorString)(ncclResult_t);

// ringNcclOpen loads libnccl.so.2 and its entry points. It returns 0, or
// 1 with *msg dlerror's text when the library cannot be loaded, or 2 with
// *msg the name of a missing entry point.
static int ringNcclOpen(const char **msg) {
	void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		*msg = dlerror();
		return 1;
	}
#define RING_LOAD(name) \
	if (!(*(void **)&p_##name = dlsym(h, #name))) { *msg = #name; return 2; }
	RING_LOAD(ncclGetUniqueId)
	RING_LOAD(ncclCommInitRank)
	RING_LOAD(ncclSend)
	RING_LOAD(ncclRecv)
	RING_LOAD(ncclGroupStart)
	RING_LOAD(ncclGroupEnd)
	RING_LOAD(ncclCommDestroy)
	RING_LOAD(ncclCommAbort)
	RING_LOAD(ncclGetErrorString)
#undef RING_LOAD
	return 0;
}

// cgo cannot call through function pointers: these wrappers do.
static ncclResult_t ringNcclGetUniqueId(ncclUniqueId *id) { return p_ncclGetUniqueId(id); }
static ncclResult_t ringNcclCommInitRank(ncclComm_t *c, int n, ncclUniqueId *id, int r) { return p_ncclCommInitRank(c, n, *id, r); }
static ncclResult_t ringNcclCommDestroy(ncclComm_t c) { return p_ncclCommDestroy(c); }
static ncclResult_t ringNcclCommAbort(ncclComm_t c) { return p_ncclCommAbort(c); }
static const char *ringNcclError(ncclResult_t r) { return p_ncclGetErrorString(r); }

// ringNcclSendRecv posts, as one group so that neither waits for the
// other, the send of ns bytes at device address s to next and the receive
// of nr bytes at r from prev, on stream st.
static ncclResult_t ringNcclSendRecv(CUdeviceptr s, size_t ns, int next, CUdeviceptr r, size_t nr, int prev, ncclComm_t c, CUstream st) {
	ncclResult_t e = p_ncclGroupStart();
	if (e) return e;
	ncclResult_t es = p_ncclSend((const void *)(uintptr_t)s, ns, ringNcclInt8, next, c, st);
	ncclResult_t er = p_ncclRecv((void *)(uintptr_t)r, nr, ringNcclInt8, prev, c, st);
	e = p_ncclGroupEnd();
	return es ? es : er ? er : e;
}
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-flash/flashattention/op"
)

// LibNCCL is the library the NCCL transport loads at run time.
const LibNCCL = "libnccl.so.2"

// ErrNoNCCL is wrapped by the errors of the NCCL transport when LibNCCL
// cannot be loaded or lacks an entry point.
var ErrNoNCCL = errors.New("NCCL not available")

var (
	ncclOnce sync.Once
	ncclErr  error
)

// loadNCCL loads LibNCCL once per process.
func loadNCCL() error {
	ncclOnce.Do(func() {
		var msg *C.char
		switch C.ringNcclOpen(&msg) {
		case 1:
			ncclErr = fmt.Errorf("%w: cannot load %s (install NCCL, e.g. PyTorch's nvidia-nccl-cu13, and put its lib directory on LD_LIBRARY_PATH): %s", ErrNoNCCL, LibNCCL, C.GoString(msg))
		case 2:
			ncclErr = fmt.Errorf("%w: %s has no %s", ErrNoNCCL, LibNCCL, C.GoString(msg))
		}
	})
	return ncclErr
}

// ncclError describes an NCCL result.
func ncclError(what string, r C.ncclResult_t) error {
	return fmt.Errorf("ring: NCCL %s: %s (ncclResult_t %d)", what, C.GoString(C.ringNcclError(r)), int(r))
}

// NCCLID identifies one NCCL ring: every rank joins with the same id.
type NCCLID [128]byte

// NewNCCLID returns a fresh id, to be made on one rank and given to all
// (ShareNCCLID does it through a file).
func NewNCCLID() (NCCLID, error) {
	var id NCCLID
	if err := loadNCCL(); err != nil {
		return id, err
	}
	var cid C.ncclUniqueId
	if r := C.ringNcclGetUniqueId(&cid); r != 0 {
		return id, ncclError("ncclGetUniqueId", r)
	}
	copy(id[:], C.GoBytes(unsafe.Pointer(&cid), C.int(len(id))))
	return id, nil
}

// ShareNCCLID is a bootstrap for one process per rank: rank 0 makes an id
// and writes it to path (atomically, through a rename), the other ranks
// wait up to timeout for the file and read it. path must be on a file
// system every process sees, and must not hold an old id: remove it before
// starting the ranks.
func ShareNCCLID(path string, rank int, timeout time.Duration) (NCCLID, error) {
	if rank == 0 {
		id, err := NewNCCLID()
		if err != nil {
			return id, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(path), ".ncclid-*")
		if err != nil {
			return id, fmt.Errorf("ring: sharing the NCCL id: %w", err)
		}
		_, err = tmp.Write(id[:])
		err = errors.Join(err, tmp.Close())
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			return id, fmt.Errorf("ring: sharing the NCCL id: %w", err)
		}
		return id, nil
	}
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) == len(NCCLID{}) {
			return NCCLID(b), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return NCCLID{}, fmt.Errorf("ring: reading the NCCL id: %w", err)
		}
		if time.Now().After(deadline) {
			return NCCLID{}, fmt.Errorf("%w: rank %d waited %v for the NCCL id in %s", ErrTimeout, rank, timeout, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failure is a ring's failed state, shared by the ranks of one process.
type failure struct {
	once   sync.Once
	failed chan struct{}
	cause  error
}

func newFailure() *failure { return &failure{failed: make(chan struct{})} }

func (f *failure) fail(rank int, cause error) {
	f.once.Do(func() {
		f.cause = fmt.Errorf("%w by rank %d: %v", ErrAborted, rank, cause)
		close(f.failed)
	})
}

// NCCL is the Transport of one rank over NCCL, on one CUDA device. All its
// CUDA and NCCL calls run on one locked OS thread with the device's
// primary context current. SendRecv stages the host parts in device
// buffers, sends and receives them on its own stream, and copies the
// received bytes back: the ring's blocks live in host memory, as the
// backends take them.
//
// Within one process, the ranks of NCCLRing share their failed state, so
// that Fail stops them at once; across processes a rank learns of another's
// failure by the timeout of its transfers, after which it aborts its
// communicator.
type NCCL struct {
	rank, size int
	f          *failure
	th         *deviceThread
	comm       C.ncclComm_t // owned by th's thread
}

var _ Transport = (*NCCL)(nil)

// NewNCCL joins rank of a ring of size ranks over NCCL, identified by id,
// on CUDA device ordinal device; every rank must call it, and it returns
// once all have joined, or with an error wrapping ErrTimeout after
// timeout. NCCL's initialisation cannot be interrupted: after a timeout
// its thread stays blocked until the process ends. Close releases the
// transport.
func NewNCCL(id NCCLID, rank, size, device int, timeout time.Duration) (*NCCL, error) {
	return newNCCL(id, rank, size, device, timeout, newFailure())
}

// NCCLRing returns the transports of a ring over NCCL in this process,
// rank r on CUDA device devices[r], to be used by one goroutine each.
func NCCLRing(devices []int, timeout time.Duration) ([]Transport, error) {
	id, err := NewNCCLID()
	if err != nil {
		return nil, err
	}
	f := newFailure()
	ts := make([]*NCCL, len(devices))
	errs := make([]error, len(devices))
	var wg sync.WaitGroup
	for r, d := range devices {
		wg.Go(func() { ts[r], errs[r] = newNCCL(id, r, len(devices), d, timeout, f) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, t := range ts {
			if t != nil {
				err = errors.Join(err, t.Close())
			}
		}
		return nil, err
	}
	out := make([]Transport, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out, nil
}

func newNCCL(id NCCLID, rank, size, device int, timeout time.Duration, f *failure) (*NCCL, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, invalid("NCCL rank %d of %d", rank, size)
	}
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	t := &NCCL{rank: rank, size: size, f: f}
	th, opened := startDeviceThread(device, func(*deviceThread) error { return t.join(id) })
	t.th = th
	select {
	case err := <-opened:
		if err != nil {
			return nil, err
		}
		return t, nil
	case <-time.After(timeout):
		err := fmt.Errorf("%w: rank %d: NCCL initialisation took more than %v (did every rank join?)", ErrTimeout, rank, timeout)
		f.fail(rank, err)
		return nil, err
	}
}

// join joins the communicator, on the thread.
func (t *NCCL) join(id NCCLID) error {
	var cid C.ncclUniqueId
	C.memcpy(unsafe.Pointer(&cid), unsafe.Pointer(&id[0]), C.size_t(len(id)))
	if r := C.ringNcclCommInitRank(&t.comm, C.int(t.size), &cid, C.int(t.rank)); r != 0 {
		t.comm = nil
		return ncclError("ncclCommInitRank", r)
	}
	return nil
}

// destroy destroys the communicator, on the thread.
func (t *NCCL) destroy() error {
	if t.comm == nil {
		return nil
	}
	r := C.ringNcclCommDestroy(t.comm)
	t.comm = nil
	if r != 0 {
		return ncclError("ncclCommDestroy", r)
	}
	return nil
}

func (t *NCCL) closed() error { return fmt.Errorf("ring: NCCL rank %d is closed", t.rank) }

// Close destroys the communicator and frees the device memory. Use it
// once every rank is done with the ring; later calls do nothing.
func (t *NCCL) Close() error { return t.th.close(t.destroy, t.closed()) }

func (t *NCCL) Rank() int { return t.rank }
func (t *NCCL) Size() int { return t.size }

// Fail implements Transport.
func (t *NCCL) Fail(cause error) { t.f.fail(t.rank, cause) }

// header describes a message: its part count, total bytes and a hash of
// the part lengths, exchanged before the message itself, since NCCL needs
// the receive size to match the send size exactly.
func header(parts [][]byte) [3]uint64 {
	h := fnv.New64a()
	var b [8]byte
	total := 0
	for _, p := range parts {
		binary.LittleEndian.PutUint64(b[:], uint64(len(p)))
		h.Write(b[:])
		total += len(p)
	}
	return [3]uint64{uint64(len(parts)), uint64(total), h.Sum64()}
}

// SendRecv implements Transport: a header exchange, then the message.
func (t *NCCL) SendRecv(ctx context.Context, send, recv [][]byte) error {
	select {
	case <-t.f.failed:
		return t.f.cause
	default:
	}
	mine, want := header(send), header(recv)
	var theirs [3]uint64
	if err := t.exchange(ctx, [][]byte{bytesOf64(mine[:])}, [][]byte{bytesOf64(theirs[:])}); err != nil {
		return err
	}
	if theirs != want {
		err := fmt.Errorf("ring: rank %d: %w: %d parts of %d bytes sent, %d of %d expected (do the ranks agree on the problem and the layout?)",
			t.rank, op.ErrInvalidInput, theirs[0], theirs[1], want[0], want[1])
		t.Fail(err)
		return err
	}
	return t.exchange(ctx, send, recv)
}

// exchange moves send to the next rank and the previous rank's message
// into recv through the device buffers, waiting on the stream until it is
// done, ctx ends or the ring fails; in the last two cases it aborts the
// communicator, which unblocks the device, and fails the ring.
func (t *NCCL) exchange(ctx context.Context, send, recv [][]byte) error {
	stop := stopper(ctx, t.f, "NCCL", t.rank)
	return t.th.do(func() error {
		if t.comm == nil {
			return t.f.cause
		}
		ns, nr := 0, 0
		for _, p := range send {
			ns += len(p)
		}
		for _, p := range recv {
			nr += len(p)
		}
		if err := t.th.reserve(max(ns, nr)); err != nil {
			t.Fail(err)
			return err
		}
		if err := t.th.upload(t.th.send, send); err != nil {
			return t.abort(err)
		}
		next, prev := (t.rank+1)%t.size, (t.rank+t.size-1)%t.size
		if r := C.ringNcclSendRecv(t.th.send, C.size_t(ns), C.int(next), t.th.recv, C.size_t(nr), C.int(prev), t.comm, t.th.stream); r != 0 {
			return t.abort(ncclError("send/receive", r))
		}
		if err := t.th.wait(stop); err != nil {
			return t.abort(err)
		}
		if err := t.th.download(recv, t.th.recv); err != nil {
			return t.abort(err)
		}
		if err := t.th.wait(stop); err != nil {
			return t.abort(err)
		}
		return nil
	}, t.closed())
}

// abort fails the ring with err and aborts the communicator, which ends
// the transfers in flight; the transport cannot send again.
func (t *NCCL) abort(err error) error {
	t.Fail(err)
	if t.comm != nil {
		if r := C.ringNcclCommAbort(t.comm); r != 0 {
			err = errors.Join(err, ncclError("ncclCommAbort", r))
		}
		t.comm = nil
	}
	return err
}
