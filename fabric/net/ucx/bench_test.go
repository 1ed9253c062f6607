package ucx

import (
	"fmt"
	"io"
	"net"
	"testing"

	fnet "github.com/flexlink/flexlink/fabric/net"
)

// BenchmarkThroughput moves messages of 4 and 64 MiB one way over loopback:
// through this provider (UCX_TLS=tcp, mmap'd registered buffers, two
// messages in flight) and, as the ceiling, through a raw Go TCP socket pair
// in the same run.
//
//	go test -run - -bench Throughput -benchtime 20x ./fabric/net/ucx
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{4 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("ucx/%dMiB", size>>20), func(b *testing.B) { benchUCX(b, size) })
		b.Run(fmt.Sprintf("socket/%dMiB", size>>20), func(b *testing.B) { benchSocket(b, size) })
	}
}

func benchUCX(b *testing.B, size int) {
	pa, pb := open(b), open(b)
	s, r := pair(b, pa, pb)
	const window = 2
	alloc := func(p *Provider) ([]byte, fnet.MemRegion) {
		buf, err := AllocHost(size * window)
		if err != nil {
			b.Fatal(err)
		}
		mr, err := p.RegMr(buf, fnet.MemHost)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { mr.Deregister(); FreeHost(buf) })
		return buf, mr
	}
	src, smr := alloc(pa)
	dst, rmr := alloc(pb)
	pattern(src, 1)
	type inflight struct{ s, r fnet.Request }
	var q []inflight
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(q) == window {
			wait(b, q[0].r)
			wait(b, q[0].s)
			q = q[1:]
		}
		k := i % window
		rq, err := r.IRecv([][]byte{dst[k*size : (k+1)*size]}, []uint64{uint64(k)}, []fnet.MemRegion{rmr})
		if err != nil {
			b.Fatal(err)
		}
		sq, err := s.ISend(src[k*size:(k+1)*size], uint64(k), smr)
		if err != nil {
			b.Fatal(err)
		}
		q = append(q, inflight{sq, rq})
	}
	for _, f := range q {
		wait(b, f.r)
		wait(b, f.s)
	}
}

func benchSocket(b *testing.B, size int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	src := pattern(make([]byte, size), 1)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(src); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
