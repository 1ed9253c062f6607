package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
	"github.com/flexlink/flexlink/internal/testenv"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// hello is the first message a proxy sends on connection k to the
// listener whose handle is handle.
func (a Auth) hello(k peerKey, handle []byte) []byte {
	return a.config().Marshal(hello.Hello{From: k.From, To: -1, Extra: kindBytes(k.Kind)}, handle)
}

// check is what a proxy's listener makes of hello b, among size ranks.
func (a Auth) check(b, handle []byte, size int) (peerKey, error) {
	h, err := a.config().Parse(b, handle)
	if err != nil {
		return peerKey{}, err
	}
	return peerOf(h, size)
}

// sayHello sends the hello of connection k and its confirmation on sc, as
// a proxy does, and waits for the listener to take it.
func (a Auth) sayHello(ctx context.Context, sc net.SendConn, k peerKey, handle []byte) error {
	q, err := a.config().Send(sc, hello.Hello{From: k.From, To: -1, Extra: kindBytes(k.Kind)}, handle)
	if err == nil {
		_, err = q.Wait(ctx)
	}
	return err
}

func TestHelloCheck(t *testing.T) {
	a := Auth{Secret: testSecret, JobID: "job", Key: "pxn/w/"}
	handle := []byte("listener of rank 0")
	good := a.hello(peerKey{3, connGroup}, handle)
	flip := func(i int) []byte { b := append([]byte(nil), good...); b[i] ^= 1; return b }
	tests := []struct {
		name   string
		hello  []byte
		check  Auth
		handle []byte
		want   string // "" for accepted as rank 3's group stream
	}{
		{"good", good, a, handle, ""},
		{"other secret", Auth{Secret: []byte("another secret of the same size!"), JobID: "job", Key: "pxn/w/"}.hello(peerKey{3, connGroup}, handle), a, handle, "proof"},
		{"other job", Auth{Secret: testSecret, JobID: "job2", Key: "pxn/w/"}.hello(peerKey{3, connGroup}, handle), a, handle, "proof"},
		{"other communicator", Auth{Secret: testSecret, JobID: "job", Key: "pxn/c1/"}.hello(peerKey{3, connGroup}, handle), a, handle, "proof"},
		{"other listener", good, a, []byte("listener of rank 1"), "proof"},
		{"not a hello", flip(0), a, handle, "not a flexlink hello"},
		{"rank changed", flip(4), a, handle, "proof"},
		{"kind changed", flip(13), a, handle, "proof"},
		{"proof changed", flip(len(good) - 1), a, handle, "proof"},
		{"rank out of range", a.hello(own(8), handle), a, handle, "rank 8 of 8"},
		{"kind out of range", a.hello(peerKey{3, connCTS + 1}, handle), a, handle, "kind 0300000000000000"},
		{"short", good[:10], a, handle, "10 bytes"},
		{"empty", nil, a, handle, "0 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			from, err := tc.check.check(tc.hello, tc.handle, 8)
			switch {
			case tc.want == "" && (err != nil || from != peerKey{3, connGroup}):
				t.Fatalf("check = %v, %v; want rank 3's group stream", from, err)
			case tc.want == "proof" && (err == nil || !strings.Contains(err.Error(), "does not prove the job secret")):
				t.Fatalf("check = %v, %v; want an error saying the proof fails", from, err)
			case tc.want != "" && tc.want != "proof" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check = %v, %v; want an error with %q", from, err, tc.want)
			}
		})
	}
}

// TestForeignHelloDropped: a connection to a proxy's listener whose hello
// claims rank 1 without the job secret is dropped, and the real rank 1's
// all-to-all still gets through.
func TestForeignHelloDropped(t *testing.T) {
	j := newJob(t, 2, 1, directVia, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc, h := dial(ctx, t, j.px[0])
	rogue := Auth{Secret: []byte("not the job secret, same length!"), JobID: "job", Key: "pxn/test/"}
	// The proxy reads the hello and aborts the connection: the rogue's
	// sends fail from then on, the hello's own completion included when the
	// drop overtakes it.
	err := send(ctx, sc, rogue.hello(own(1), h), helloTag)
	for err == nil {
		err = send(ctx, sc, []byte("data"), 1)
	}
	if ctx.Err() != nil {
		t.Fatalf("the rogue connection was never dropped: %v", err)
	}
	j.run(t, testenv.EvenLengths(2, 4096))
}

func send(ctx context.Context, sc net.SendConn, b []byte, tag uint64) error {
	req, err := sc.ISend(b, tag, nil)
	if err != nil {
		return err
	}
	_, err = req.Wait(ctx)
	return err
}
