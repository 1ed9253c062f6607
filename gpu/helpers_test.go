package gpu_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/reduce"
)

// Test data and host references shared by the fake-driver and GPU tests.
// References come from package reduce's Ref and Finish (the host path's
// specification), never from the code under test.

// randomElems returns count elements of dt, seeded by seed. Integers are
// random bits (so sums and products overflow); float16 and bfloat16 are
// (and the float8 types) random bit patterns (every class: NaN, ±Inf,
// subnormals, ±0); float32
// and float64 mix random bit patterns with values of moderate magnitude, and
// put NaN, ±Inf and ±0 at fixed places.
func randomElems(dt dtype.DType, count int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(dt)))
	b := make([]byte, count*dt.Size())
	le := binary.LittleEndian
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, 1, -1}
	for i := 0; i < count; i++ {
		switch dt {
		case dtype.Int8, dtype.Uint8, dtype.Float8E4M3, dtype.Float8E5M2: // float8: every bit pattern
			b[i] = byte(r.Uint32())
		case dtype.Int32, dtype.Uint32:
			le.PutUint32(b[4*i:], r.Uint32())
		case dtype.Int64, dtype.Uint64:
			le.PutUint64(b[8*i:], r.Uint64())
		case dtype.Float16, dtype.BFloat16:
			le.PutUint16(b[2*i:], uint16(r.Uint32()))
		case dtype.Float32, dtype.Float64:
			var v float64
			switch k := r.IntN(16); {
			case k == 0:
				v = specials[r.IntN(len(specials))]
			case k < 4 && dt == dtype.Float32:
				v = float64(math.Float32frombits(r.Uint32()))
			case k < 4:
				v = math.Float64frombits(r.Uint64())
			default:
				v = r.NormFloat64() * math.Ldexp(1, r.IntN(40)-20)
			}
			if dt == dtype.Float32 {
				le.PutUint32(b[4*i:], math.Float32bits(float32(v)))
			} else {
				le.PutUint64(b[8*i:], math.Float64bits(v))
			}
		}
	}
	return b
}

// expectReduce is reduce's result for dst = a op b, finished with n
// contributions when op is Avg.
func expectReduce(t testing.TB, a, b []byte, dt dtype.DType, op dtype.Op, n int) []byte {
	t.Helper()
	want := append([]byte(nil), a...)
	if err := reduce.Ref(want, b, dt, op); err != nil {
		t.Fatal(err)
	}
	if err := reduce.Finish(want, dt, op, n); err != nil {
		t.Fatal(err)
	}
	return want
}

// isNaN reports whether element i of b is a NaN of type dt.
func isNaN(b []byte, i int, dt dtype.DType) bool {
	le := binary.LittleEndian
	switch dt {
	case dtype.Float16:
		h := le.Uint16(b[2*i:])
		return h&0x7c00 == 0x7c00 && h&0x03ff != 0
	case dtype.BFloat16:
		h := le.Uint16(b[2*i:])
		return h&0x7f80 == 0x7f80 && h&0x007f != 0
	case dtype.Float32:
		return math.IsNaN(float64(math.Float32frombits(le.Uint32(b[4*i:]))))
	case dtype.Float64:
		return math.IsNaN(math.Float64frombits(le.Uint64(b[8*i:])))
	case dtype.Float8E4M3:
		return b[i]&0x7f == 0x7f
	case dtype.Float8E5M2:
		return b[i]&0x7f > 0x7c
	}
	return false
}

// diffElems compares element by element: bit-identical, or NaN in both
// (which NaN is unspecified). It describes the first difference and counts
// them, or returns "".
func diffElems(got, want []byte, dt dtype.DType) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	sz := dt.Size()
	first, bad := -1, 0
	for i := 0; i < len(got)/sz; i++ {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if string(g) == string(w) || (isNaN(got, i, dt) && isNaN(want, i, dt)) {
			continue
		}
		if first < 0 {
			first = i
		}
		bad++
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d elements differ; first at %d: got %x (%g), want %x (%g)", bad, len(got)/sz, first,
		got[first*sz:(first+1)*sz], dtype.Get(got, first, dt), want[first*sz:(first+1)*sz], dtype.Get(want, first, dt))
}

// pattern fills n bytes with a sequence that differs at every offset within
// a 251-byte period, salted by seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ seed
	}
	return b
}

// reduceCase is one shape of a reduction test: element count, and offsets
// in elements of dst, a and b inside their allocations (non-zero offsets
// break 16-byte alignment and take the scalar path); inPlace makes dst be a.
type reduceCase struct {
	name               string
	count              int
	offDst, offA, offB int
	inPlace            bool
}

func reduceCases(large int) []reduceCase {
	return []reduceCase{
		{name: "one", count: 1},
		{name: "seven", count: 7},
		{name: "vector+tail", count: 4096 + 13},
		{name: "misaligned-a", count: 4099, offA: 1},
		{name: "misaligned-dst", count: 1031, offDst: 3},
		{name: "in-place", count: 2048 + 5, inPlace: true},
		{name: "large", count: large},
	}
}

// closeAtEnd calls c when t ends; its error fails t.
func closeAtEnd(t testing.TB, c func() error) {
	t.Cleanup(func() {
		if err := c(); err != nil {
			t.Error(err)
		}
	})
}

// mustAlloc is n bytes of dv, freed when t ends.
func mustAlloc(t testing.TB, dv *gpu.Device, n int) *gpu.Buffer {
	t.Helper()
	b, err := dv.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

// mustStream is a new stream of dv, closed when t ends.
func mustStream(t testing.TB, dv *gpu.Device) *gpu.Stream {
	t.Helper()
	s, err := dv.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mustEvent is a new event of dv (timing: for Since), closed when t ends.
func mustEvent(t testing.TB, dv *gpu.Device, timing bool) *gpu.Event {
	t.Helper()
	e, err := dv.NewEvent(timing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}
