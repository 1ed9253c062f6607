package nettest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

func testDevices(t *testing.T, e *Env) {
	devs := e.A.Devices()
	if len(devs) == 0 {
		t.Fatalf("provider %s lists no devices", e.A.Name())
	}
	for i, d := range devs {
		if d.Name == "" || d.MaxRecvs < 1 || d.MaxRecvs > net.MaxRecvs || d.Ptr&net.MemHost == 0 || d.Speed < 0 {
			t.Errorf("device %d: %+v: want a name, MaxRecvs in 1..%d, host memory, speed ≥ 0", i, d, net.MaxRecvs)
		}
	}
	if _, err := e.A.Listen(context.Background(), len(devs)); err == nil {
		t.Errorf("Listen on device %d of %d succeeded", len(devs), len(devs))
	}
	mr, err := e.A.RegMr(make([]byte, 4096), net.MemHost)
	if err != nil {
		t.Fatalf("RegMr of host memory: %v", err)
	}
	if err := mr.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
}

// size i of the ordering test: small, odd, and some across any stripe
// threshold up to 200 KiB.
func orderSize(i int) int {
	switch i % 10 {
	case 0:
		return 0
	case 7:
		return 200<<10 + i
	default:
		return (i * 7919) % 70000
	}
}

// testOrdering sends many messages with distinct tags; one-buffer receives
// take them in send order (posted before, after and interleaved with the
// sends).
func testOrdering(t *testing.T, e *Env) {
	for _, mode := range []string{"RecvsFirst", "SendsFirst", "Interleaved"} {
		t.Run(mode, func(t *testing.T) {
			s, r := e.Pair()
			const n = 300
			got := make([][]byte, n)
			var sends, recvs []net.Request
			postSend := func(i int) { sends = append(sends, Send(t, s, Pattern(uint64(i), orderSize(i)), uint64(i)*3+1)) }
			postRecv := func(i int) {
				got[i] = make([]byte, orderSize(i))
				recvs = append(recvs, Recv(t, r, [][]byte{got[i]}, []uint64{uint64(i)*3 + 1}))
			}
			for i := range n {
				switch mode {
				case "RecvsFirst":
					postRecv(i)
				case "SendsFirst":
					postSend(i)
				default:
					postSend(i)
					postRecv(i)
				}
			}
			for i := range n {
				switch mode {
				case "RecvsFirst":
					postSend(i)
				case "SendsFirst":
					postRecv(i)
				}
			}
			for i := range n {
				sizes := AwaitOK(t, recvs[i], fmt.Sprintf("recv %d", i))
				if len(sizes) != 1 || sizes[0] != orderSize(i) {
					t.Fatalf("recv %d: sizes %v, want [%d]", i, sizes, orderSize(i))
				}
				Check(t, fmt.Sprintf("message %d", i), got[i], uint64(i))
			}
			for i := range n {
				if sizes := AwaitOK(t, sends[i], fmt.Sprintf("send %d", i)); !slices.Equal(sizes, []int{orderSize(i)}) {
					t.Fatalf("send %d: sizes %v, want [%d]", i, sizes, orderSize(i))
				}
			}
		})
	}
}

// testMultiRecv posts receives of 1..8 buffers whose messages are sent in
// a shuffled tag order; each must land in the buffer of its tag.
func testMultiRecv(t *testing.T, e *Env) {
	s, r := e.Pair()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 3 {
		for n := 1; n <= net.MaxRecvs; n++ {
			tags := make([]uint64, n)
			lens := make([]int, n)
			bufs := make([][]byte, n)
			for i := range n {
				tags[i] = uint64(1000*n + 17*i + round)
				lens[i] = []int{0, 1, 333, 4096, 65537, 300 << 10}[rng.IntN(6)]
				bufs[i] = make([]byte, lens[i]+rng.IntN(3)) // sometimes longer than the message
			}
			order := rng.Perm(n)
			seed := func(i int) uint64 { return uint64(round<<16 | n<<8 | i) }
			var q net.Request
			recvFirst := round%2 == 0
			if recvFirst {
				q = Recv(t, r, bufs, tags)
			}
			var sends []net.Request
			for _, i := range order {
				sends = append(sends, Send(t, s, Pattern(seed(i), lens[i]), tags[i]))
			}
			if !recvFirst {
				q = Recv(t, r, bufs, tags)
			}
			what := fmt.Sprintf("round %d, %d buffers, send order %v", round, n, order)
			sizes := AwaitOK(t, q, what)
			if !slices.Equal(sizes, lens) {
				t.Fatalf("%s: sizes %v, want %v", what, sizes, lens)
			}
			for i := range n {
				Check(t, fmt.Sprintf("%s, buffer %d", what, i), bufs[i][:lens[i]], seed(i))
			}
			for _, sr := range sends {
				AwaitOK(t, sr, what+": send")
			}
		}
	}
}

func testSizes(t *testing.T, e *Env, large int) {
	s, r := e.Pair()
	sizes := []int{0, 1, 2, 7, 63, 4095, 4096, 4097, 65535, 65536, 65537, 1<<20 + 3, 4 << 20, 4<<20 + 1}
	if large > 4<<20+1 {
		sizes = append(sizes, large)
	}
	for i, n := range sizes {
		got := make([]byte, n)
		q := Recv(t, r, [][]byte{got}, []uint64{uint64(i)})
		msg := Pattern(uint64(n), n)
		sr := Send(t, s, msg, uint64(i))
		msg = nil
		if sz := AwaitOK(t, q, fmt.Sprintf("recv of %d bytes", n)); !slices.Equal(sz, []int{n}) {
			t.Fatalf("recv of %d bytes: sizes %v", n, sz)
		}
		AwaitOK(t, sr, fmt.Sprintf("send of %d bytes", n))
		Check(t, fmt.Sprintf("%d-byte message", n), got, uint64(n))
		// Test after done keeps answering the same.
		for _, q := range []net.Request{q, sr} {
			if done, sz, err := q.Test(); !done || err != nil || !slices.Equal(sz, []int{n}) {
				t.Fatalf("Test after done: %v %v %v, want true [%d] nil", done, sz, err, n)
			}
		}
	}
}

// testLargerBuffer: a buffer longer than its message is allowed; the size
// is reported and the bytes past the message are left alone.
func testLargerBuffer(t *testing.T, e *Env) {
	s, r := e.Pair()
	for i, c := range []struct{ msg, buf int }{{0, 10}, {5, 6}, {1000, 4096}, {70000, 1 << 20}, {3 << 20, 5 << 20}} {
		buf := make([]byte, c.buf)
		for j := range buf {
			buf[j] = 0xa5
		}
		q := Recv(t, r, [][]byte{buf}, []uint64{7})
		sr := Send(t, s, Pattern(uint64(i), c.msg), 7)
		if sz := AwaitOK(t, q, "recv"); !slices.Equal(sz, []int{c.msg}) {
			t.Fatalf("%d-byte message into %d bytes: sizes %v", c.msg, c.buf, sz)
		}
		AwaitOK(t, sr, "send")
		Check(t, "message", buf[:c.msg], uint64(i))
		for j := c.msg; j < c.buf; j++ {
			if buf[j] != 0xa5 {
				t.Fatalf("%d-byte message into %d bytes: byte %d past the message was written", c.msg, c.buf, j)
			}
		}
	}
}

// testTooLong: a message longer than its buffer fails the receive with
// ErrMismatch (and the connection becomes unusable; the send's outcome is
// the provider's choice).
func testTooLong(t *testing.T, e *Env) {
	for _, c := range []struct{ msg, buf int }{{1, 0}, {17, 16}, {1 << 20, 1<<20 - 1}, {9 << 20, 64}} {
		t.Run(fmt.Sprintf("%dinto%d", c.msg, c.buf), func(t *testing.T) {
			s, r := e.Pair()
			buf := make([]byte, c.buf)
			q := Recv(t, r, [][]byte{buf}, []uint64{3})
			sr := Send(t, s, Pattern(1, c.msg), 3)
			_, err := Await(t, q, "recv into a short buffer")
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("%d-byte message into %d bytes: error %v, want one wrapping ErrMismatch", c.msg, c.buf, err)
			}
			Await(t, sr, "send of the long message")
			awaitFail(t, post(r.IRecv([][]byte{make([]byte, 1)}, []uint64{1}, nil)), nil, failTimeout, "recv after a mismatch")
		})
	}
}

// testWrongTag: a message whose tag the receive does not list fails it
// with ErrMismatch, for one buffer and for several.
func testWrongTag(t *testing.T, e *Env) {
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprintf("%dbuffers", n), func(t *testing.T) {
			s, r := e.Pair()
			bufs := make([][]byte, n)
			tags := make([]uint64, n)
			for i := range n {
				bufs[i], tags[i] = make([]byte, 64), uint64(10+i)
			}
			q := Recv(t, r, bufs, tags)
			var sends []net.Request
			for i := range n - 1 {
				sends = append(sends, Send(t, s, Pattern(uint64(i), 64), tags[i]))
			}
			sends = append(sends, Send(t, s, Pattern(9, 64), 99))
			_, err := Await(t, q, "recv with a foreign tag")
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("error %v, want one wrapping ErrMismatch", err)
			}
			for _, sr := range sends {
				Await(t, sr, "send")
			}
		})
	}
}

// testTagWidth: the provider declares its tag width (TagBits, 1..64);
// the largest tag of that width and its neighbours below travel (in one
// multi-receive), and with fewer than 64 bits, one more is refused by
// ISend and IRecv with ErrNotSupported, so what CheckTags promises holds.
func testTagWidth(t *testing.T, e *Env) {
	bits := e.A.TagBits()
	if bits < 1 || bits > 64 || e.B.TagBits() != bits {
		t.Fatalf("TagBits %d and %d: want one width in 1..64", bits, e.B.TagBits())
	}
	max := net.MaxTag(bits)
	s, r := e.Pair()
	tags := []uint64{max, max - 1, max >> 1}
	bufs := make([][]byte, len(tags))
	for i := range bufs {
		bufs[i] = make([]byte, 100)
	}
	q := Recv(t, r, bufs, tags)
	for i, tag := range tags {
		AwaitOK(t, Send(t, s, Pattern(uint64(i), 100), tag), fmt.Sprintf("send tag %#x", tag))
	}
	AwaitOK(t, q, "recv the widest tags")
	for i := range tags {
		Check(t, fmt.Sprintf("tag %#x", tags[i]), bufs[i], uint64(i))
	}
	if bits == 64 {
		return
	}
	if _, err := s.ISend(nil, max+1, nil); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("ISend with tag %#x over %d bits: %v, want ErrNotSupported", max+1, bits, err)
	}
	if _, err := r.IRecv([][]byte{make([]byte, 1)}, []uint64{max + 1}, nil); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("IRecv with tag %#x over %d bits: %v, want ErrNotSupported", max+1, bits, err)
	}
}

// testBadRecvArgs: malformed receives are refused, not posted.
func testBadRecvArgs(t *testing.T, e *Env) {
	_, r := e.Pair()
	b := func(n int) [][]byte { return make([][]byte, n) }
	tg := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i)
		}
		return out
	}
	for _, c := range []struct {
		name string
		bufs [][]byte
		tags []uint64
	}{
		{"NoBuffers", nil, nil},
		{"NineBuffers", b(9), tg(9)},
		{"FewerTags", b(3), tg(2)},
		{"DuplicateTags", b(2), []uint64{5, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			awaitFail(t, post(r.IRecv(c.bufs, c.tags, nil)), nil, failTimeout, c.name)
		})
	}
}
