package ucx

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open(Options{Library: "libucp-missing.so.0"})
	if !errors.Is(err, errs.ErrNotSupported) || !bytes.Contains([]byte(err.Error()), []byte("libucp-missing.so.0")) {
		t.Fatalf("err = %v, want ErrNotSupported keeping dlopen's message", err)
	}
}

func TestSizes(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	for i, n := range []int{0, 1, 100, 4095, 8192, 65537, 1 << 20, 4<<20 + 3, 64 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := pattern(make([]byte, n), i)
			dst := make([]byte, n)
			rr, err := r.IRecv([][]byte{dst}, []uint64{uint64(i)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := s.ISend(src, uint64(i), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := wait(t, sr); len(got) != 1 || got[0] != n {
				t.Fatalf("send sizes %v", got)
			}
			if got := wait(t, rr); len(got) != 1 || got[0] != n {
				t.Fatalf("recv sizes %v", got)
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("data differs")
			}
		})
	}
}

// TestOrdering sends many messages (sends posted before the receives and
// after them) and checks each receive got the message of its position.
func TestOrdering(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	const n = 300
	size := func(i int) int { return []int{0, 7, 1000, 70000}[i%4] }
	var sends, recvs []fnet.Request
	dsts := make([][]byte, n)
	for i := 0; i < n; i++ {
		if i == n/2 { // the first half is unexpected at the receiver
			for j := 0; j < i; j++ {
				dsts[j] = make([]byte, 70000)
				rq, err := r.IRecv([][]byte{dsts[j]}, []uint64{uint64(j % 5)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				recvs = append(recvs, rq)
			}
		}
		if i >= n/2 {
			dsts[i] = make([]byte, 70000)
			rq, err := r.IRecv([][]byte{dsts[i]}, []uint64{uint64(i % 5)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			recvs = append(recvs, rq)
		}
		sq, err := s.ISend(pattern(make([]byte, size(i)), i), uint64(i%5), nil)
		if err != nil {
			t.Fatal(err)
		}
		sends = append(sends, sq)
	}
	for i := range sends {
		wait(t, sends[i])
		got := wait(t, recvs[i])
		if got[0] != size(i) || !bytes.Equal(dsts[i][:got[0]], pattern(make([]byte, size(i)), i)) {
			t.Fatalf("receive %d got %d bytes of the wrong message", i, got[0])
		}
	}
}

// TestMultiRecv sends n messages with shuffled tags and sizes; one IRecv of
// n buffers must put each in the buffer of its tag.
func TestMultiRecv(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	rng := rand.New(rand.NewSource(2))
	for n := 1; n <= fnet.MaxRecvs; n++ {
		for _, sendFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/sendFirst=%v", n, sendFirst), func(t *testing.T) {
				tags := make([]uint64, n)
				sizes := make([]int, n)
				for i := range tags {
					tags[i] = uint64(100*i + rng.Intn(100))
					sizes[i] = []int{0, 33, 5000, 300000}[rng.Intn(4)]
				}
				order := rng.Perm(n) // message k carries tag order[k]
				bufs := make([][]byte, n)
				for i := range bufs {
					bufs[i] = make([]byte, 300000)
				}
				var sends []fnet.Request
				send := func() {
					for k := 0; k < n; k++ {
						j := order[k]
						sq, err := s.ISend(pattern(make([]byte, sizes[j]), int(tags[j])), tags[j], nil)
						if err != nil {
							t.Fatal(err)
						}
						sends = append(sends, sq)
					}
				}
				if sendFirst {
					send()
				}
				rq, err := r.IRecv(bufs, tags, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !sendFirst {
					send()
				}
				got := wait(t, rq)
				for _, sq := range sends {
					wait(t, sq)
				}
				for j := range tags {
					if got[j] != sizes[j] || !bytes.Equal(bufs[j][:got[j]], pattern(make([]byte, sizes[j]), int(tags[j]))) {
						t.Fatalf("buffer %d (tag %d): %d bytes, want %d of its message", j, tags[j], got[j], sizes[j])
					}
				}
			})
		}
	}
}

// TestMultiRecvTakesNextMessages: two 2-buffer receives with the same tags
// {1,2}; sends 1,1,2,2 put two tag-1 messages in the first receive's
// window, which the interface calls a mismatch (UCX's own tag matching
// would have paired them across the receives instead).
func TestMultiRecvTakesNextMessages(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	bufs := func() [][]byte { return [][]byte{make([]byte, 8), make([]byte, 8)} }
	r1, err := r.IRecv(bufs(), []uint64{1, 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := r.IRecv(bufs(), []uint64{1, 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []uint64{1, 1, 2, 2} {
		if _, err := s.ISend([]byte("x"), tag, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitErr(t, r1); !errors.Is(err, errs.ErrMismatch) {
		t.Fatalf("first receive: %v, want ErrMismatch", err)
	}
	if err := waitErr(t, r2); !errors.Is(err, errs.ErrMismatch) {
		t.Fatalf("second receive: %v, want the connection's ErrMismatch", err)
	}
}

func TestMismatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recvLen int
		tags    []uint64
		sendLen int
		sendTag uint64
	}{
		{"wrong tag", 16, []uint64{3}, 8, 4},
		{"wrong tag multi", 16, []uint64{3, 5}, 8, 4},
		{"too long", 16, []uint64{3}, 17, 3},
		{"too long rendezvous", 1 << 10, []uint64{3}, 1 << 20, 3},
		{"too long multi", 16, []uint64{3, 5}, 17, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t), open(t)
			s, r := pair(t, a, b)
			bufs := make([][]byte, len(tc.tags))
			for i := range bufs {
				bufs[i] = make([]byte, tc.recvLen)
			}
			rq, err := r.IRecv(bufs, tc.tags, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.ISend(make([]byte, tc.sendLen), tc.sendTag, nil); err != nil {
				t.Fatal(err)
			}
			err = waitErr(t, rq)
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("err = %v, want ErrMismatch", err)
			}
			var ce *fnet.ConnError
			if !errors.As(err, &ce) || ce.Device == "" || ce.Remote == "" {
				t.Fatalf("error %v does not name device and remote", err)
			}
		})
	}
}

func TestRecvLargerThanSend(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	for i, n := range []int{0, 10, 1 << 20} {
		dst := make([]byte, 2<<20)
		rq, err := r.IRecv([][]byte{dst}, []uint64{9}, nil)
		if err != nil {
			t.Fatal(err)
		}
		src := pattern(make([]byte, n), i)
		if _, err := s.ISend(src, 9, nil); err != nil {
			t.Fatal(err)
		}
		if got := wait(t, rq); got[0] != n || !bytes.Equal(dst[:n], src) {
			t.Fatalf("size %d: got %v", n, got)
		}
	}
}

func TestBadArguments(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	if _, err := s.ISend(nil, MaxUserTag+1, nil); !errors.Is(err, errs.ErrNotSupported) {
		t.Errorf("send tag over %d bits: %v", UserTagBits, err)
	}
	for _, tc := range []struct {
		name string
		bufs [][]byte
		tags []uint64
	}{
		{"no buffers", nil, nil},
		{"nine buffers", make([][]byte, 9), make([]uint64, 9)},
		{"tags count", make([][]byte, 2), []uint64{1}},
		{"duplicate tag", make([][]byte, 2), []uint64{1, 1}},
		{"tag too big", make([][]byte, 1), []uint64{MaxUserTag + 1}},
	} {
		if _, err := r.IRecv(tc.bufs, tc.tags, nil); err == nil {
			t.Errorf("%s: IRecv accepted it", tc.name)
		}
	}
}
