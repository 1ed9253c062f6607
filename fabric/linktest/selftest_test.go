package linktest_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
)

// broken wraps a good link and breaks one rule of the Link contract.
type broken struct {
	fabric.Link
	bug string
}

func (b broken) Send(tag fabric.Tag, buf []byte) fabric.Request {
	switch {
	case b.bug == "IgnoresTagWord3":
		tag[3] = 0
	case b.bug == "TruncatesLarge" && len(buf) > 1<<20:
		buf = buf[:len(buf)-1]
	case b.bug == "FlipsBit" && len(buf) > 100:
		buf = append([]byte(nil), buf...)
		buf[len(buf)/2] ^= 0x10
	}
	return b.Link.Send(tag, buf)
}

func (b broken) Recv(tag fabric.Tag, buf []byte) fabric.Request {
	if b.bug == "IgnoresTagWord3" {
		tag[3] = 0
	}
	return b.Link.Recv(tag, buf)
}

func (b broken) Abort(err error) {
	if b.bug == "LosesAbortError" {
		err = errors.New("some other error")
	}
	b.Link.Abort(err)
}

func (b broken) Close() error {
	if b.bug == "CloseWithoutErrClosed" {
		b.Link.Abort(errors.New("closed, but not errs.ErrClosed"))
		return nil
	}
	return b.Link.Close()
}

// TestBrokenLink runs the suite on a broken link; it runs only as the child
// process of TestSuiteCatchesBugs, which expects it to fail.
func TestBrokenLink(t *testing.T) {
	bug := os.Getenv("LINKTEST_BUG")
	if bug == "" {
		return
	}
	linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
		nw := fake.NewNetwork(2, fake.Options{})
		return broken{nw.Link(0, 1), bug}, broken{nw.Link(1, 0), bug}
	})
}

// TestSuiteCatchesBugs checks that the suite fails links that break the
// contract, in the subtest that covers the broken rule.
func TestSuiteCatchesBugs(t *testing.T) {
	for _, tc := range []struct{ bug, fails string }{
		{"IgnoresTagWord3", "TagMismatch/Word3"},
		{"TruncatesLarge", "Sizes"},
		{"FlipsBit", "FIFO/SendsFirst"},
		{"LosesAbortError", "Abort"},
		{"CloseWithoutErrClosed", "Close"},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			top, _, _ := strings.Cut(tc.fails, "/")
			linktest.SuiteFails(t, "^TestBrokenLink$/^"+top+"$", "LINKTEST_BUG="+tc.bug, "TestBrokenLink/"+tc.fails, "a link that "+tc.bug)
		})
	}
}
