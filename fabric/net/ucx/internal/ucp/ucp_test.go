package ucp

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/testenv"
)

func load(t *testing.T) *Lib {
	t.Helper()
	l, err := Load("")
	if err != nil {
		testenv.Missing(t, "libucx0", err.Error())
	}
	return l
}

func TestLoadMissingKeepsDlopenMessage(t *testing.T) {
	_, err := Load("libucp-does-not-exist.so.0")
	if !errors.Is(err, errs.ErrNotSupported) {
		t.Fatalf("err = %v, want ErrNotSupported", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("libucp-does-not-exist.so.0")) {
		t.Fatalf("err %q lost dlopen's message", err)
	}
}

// TestSelfSendRecv drives one tagged send/receive on one worker to itself:
// it checks the generated layouts (a wrong offset or mask bit fails here or
// crashes inside UCX).
func TestSelfSendRecv(t *testing.T) {
	l := load(t)
	t.Setenv("UCX_TLS", "tcp,self")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := l.Init()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Cleanup(ctx)
	w, err := l.WorkerCreate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.WorkerDestroy(w)
	addr, err := l.WorkerAddress(w)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := l.EpCreate(w, addr)
	if err != nil {
		t.Fatal(err)
	}
	src := []byte("hello, ucx")
	dst := make([]byte, 64)
	const tag = 0xabcdef0012345678
	rr, info, err := l.TagRecv(w, uintptr(unsafe.Pointer(&dst[0])), len(dst), tag, ^uint64(0), 0)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := l.TagSendSync(ep, uintptr(unsafe.Pointer(&src[0])), len(src), tag, 0)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for (sr != 0 && l.Check(sr) == StatusInProgress) || (rr != 0 && l.Check(rr) == StatusInProgress) {
		if time.Now().After(deadline) {
			t.Fatal("send/recv did not complete in 10 s")
		}
		l.Progress(w)
	}
	if sr != 0 {
		if st := l.Check(sr); st != StatusOK {
			t.Fatal(l.Err("send", st))
		}
		l.Free(sr)
	}
	if rr != 0 {
		var st Status
		st, info = l.RecvTest(rr)
		if st != StatusOK {
			t.Fatal(l.Err("recv", st))
		}
		l.Free(rr)
	}
	if info.SenderTag != tag || info.Length != len(src) || !bytes.Equal(dst[:len(src)], src) {
		t.Fatalf("got tag %#x len %d %q", info.SenderTag, info.Length, dst[:info.Length])
	}
	if cr, err := l.EpClose(ep, true); err != nil {
		t.Fatal(err)
	} else if cr != 0 {
		for l.Check(cr) == StatusInProgress {
			l.Progress(w)
		}
		l.Free(cr)
	}
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
}
