package launcher

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"flexlink/internal/errs"
)

type nopBootstrap struct{ aborted error }

func (b *nopBootstrap) Addr() string    { return "127.0.0.1:0" }
func (b *nopBootstrap) Abort(err error) { b.aborted = err }
func (b *nopBootstrap) Close() error    { return nil }

// TestCausePrecedence: with ranks on other hosts, the failures seen within
// causeGrace are weighed (a lost host over a signal over an exit status)
// whatever order their reports come in; on one host the first one is the
// cause at once.
func TestCausePrecedence(t *testing.T) {
	lost := &failure{cause: &JobError{Msg: "host h2 lost", Err: errs.ErrPeerLost}, code: 1, line: "host h2 lost; terminating 2 other ranks", weight: 3}
	killed := &failure{cause: errors.New("rank 3 killed"), code: 137, line: "rank 3 was killed by signal 9; terminating 3 other ranks", weight: 2}
	status := &failure{cause: errors.New("rank 0 exited"), code: 3, line: "rank 0 exited with status 3; terminating 3 other ranks", weight: 1}
	for _, tc := range []struct {
		name   string
		remote bool
		order  []*failure
		want   *failure
	}{
		{"remote: status, then lost host", true, []*failure{status, lost}, lost},
		{"remote: lost host, then status", true, []*failure{lost, status}, lost},
		{"remote: status, then signal", true, []*failure{status, killed, status}, killed},
		{"remote: signal, then lost host", true, []*failure{killed, lost}, lost},
		{"one host: the first", false, []*failure{status, lost}, status},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			bs := &nopBootstrap{}
			s := &supervisor{job: Job{Stderr: &stderr, KillGrace: time.Hour}, srv: bs, alive: 4}
			if tc.remote {
				s.remote = &remoteJob{}
			}
			for _, f := range tc.order {
				if s.cause == nil {
					s.hold(f)
				}
			}
			if tc.remote {
				if s.cause != nil || s.pendingC == nil {
					t.Fatalf("remote job failed before the grace (cause %v)", s.cause)
				}
				<-s.pendingC // the loop's timer
				s.failPending()
			}
			if s.cause != tc.want.cause || s.code != tc.want.code {
				t.Errorf("cause %v (code %d), want %v (code %d)", s.cause, s.code, tc.want.cause, tc.want.code)
			}
			if got := stderr.String(); strings.Count(got, "flexrun: ") != 1 || !strings.Contains(got, tc.want.line) {
				t.Errorf("stderr %q, want one line with %q", got, tc.want.line)
			}
			if bs.aborted == nil {
				t.Error("the bootstrap was not aborted")
			}
		})
	}
}
