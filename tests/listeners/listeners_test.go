// Package listeners attacks a running job from outside: every listening
// socket its processes hold (found in /proc, as any local process could)
// gets a connection that sends garbage, one that replays a hello made for
// another listener, and one that stays silent. Each must be dropped (the
// job closes it), and the job must then complete with correct results.
package listeners

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net/tcp"
)

// dropWithin bounds how long a listener may keep a foreign connection:
// the longest hello deadline (10 s, fabric/net/hello.DefaultWait, the
// bootstrap's and shm's handshakes) with room for two busy cores.
const dropWithin = 45 * time.Second

// TestForeignConnections runs a 4-rank job on two emulated hosts (tcp on
// loopback across them, shm within, PXN on), waits until every rank has
// run a checked allreduce and all-to-all (every listener open, the PXN
// proxy's too), attacks every listener of flexrun and of each rank, checks
// that each attacking connection is closed by the job within dropWithin,
// and only then lets the job run more checked rounds: it must exit 0 with
// #wrong 0 on every rank.
func TestForeignConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	j := startJob(ctx, t, jobSpec{timeout: "3m", wait: "2m", iters: 3})
	ls := j.inventory(t)

	// A hello made for another listener: the tcp provider's opening hello
	// carrying the nonce of a listener of an outside provider.
	outside, err := tcp.New(tcp.Options{IfName: "lo", Sockets: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	stale, err := outside.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	replayTCP := tcpHello(stale.Handle())
	replayShm := shmHello()

	type result struct {
		l    listener
		what string
		err  error
	}
	results := make(chan result)
	attacks := 0
	for _, l := range ls {
		for what, msg := range map[string][]byte{
			"garbage":  []byte("\x16\x03\x01\x02\x00 GET / HTTP/1.1 not a flexlink peer\r\n\r\n"),
			"replayed": map[bool][]byte{true: replayTCP, false: replayShm}[l.net == "tcp"],
			"silent":   nil,
		} {
			attacks++
			go func() { results <- result{l, what, attack(ctx, l, msg)} }()
		}
	}
	for range attacks {
		r := <-results
		if r.err != nil {
			t.Errorf("%s connection to %s: %v", r.what, r.l, r.err)
		}
	}
	t.Logf("%d listeners, %d foreign connections, each dropped", len(ls), attacks)

	// Let the job go on: it must finish with correct results.
	j.finish(t)
	// shm judges the hellos itself: its three drops per rank make one
	// WARN (rate-limited), not three.
	for r := range jobRanks {
		warns := regexp.MustCompile(`dropped a connection that did not prove the job secret.* rank=` + strconv.Itoa(r) + ` listener="shm socket`)
		if got := len(warns.FindAllString(j.stderr.String(), -1)); got != 1 {
			t.Errorf("rank %d: %d WARN lines for its shm listener's 3 dropped connections, want 1", r, got)
		}
	}
	t.Logf("job stderr:\n%s", j.stderr.String())
}

// checkInventory asserts that the attack reaches every kind of listener
// the job must have: the bootstrap's (TCP, in flexrun or a rank), and on
// every rank shm's (a unix seqpacket socket) and at least two TCP ones
// (netlink's and the PXN proxy's).
func checkInventory(t *testing.T, ls []listener, owners map[int]string) {
	t.Helper()
	tcpBy, shmBy := map[string]int{}, map[string]int{}
	for _, l := range ls {
		t.Logf("listener: %s", l)
		switch {
		case l.net == "tcp":
			tcpBy[l.owner]++
		case l.net == "unixpacket" && strings.HasPrefix(l.addr, "@flexlink-"):
			shmBy[l.owner]++
		}
	}
	total := 0
	for _, o := range owners {
		if o == "flexrun" {
			total += tcpBy[o]
			continue
		}
		if shmBy[o] < 1 || tcpBy[o] < 2 {
			t.Errorf("%s: %d shm and %d TCP listeners, want at least 1 and 2 (shm; netlink and the PXN proxy)", o, shmBy[o], tcpBy[o])
		}
		total += tcpBy[o] - 2
	}
	if total < 1 {
		t.Errorf("no TCP listener beyond netlink's and the proxy's: where is the bootstrap's? %v", ls)
	}
}

// attack opens one connection to l, writes msg (nil: nothing) and waits
// for the job to close it. An error says how it was not dropped.
func attack(ctx context.Context, l listener, msg []byte) error {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, l.net, l.addr)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dropWithin))
	if msg != nil {
		if _, err := c.Write(msg); err != nil {
			return nil // already closed on us: dropped
		}
	}
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // an answer (shm's proof of its own side): read on until closed
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("still open after %v", dropWithin)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return nil
		}
		return nil // any other read error: the job's end is gone
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }

// tcpHello is the tcp provider's 64-byte opening hello (fabric/net/tcp's
// wire format) for the listener whose handle is h: a hello that is well
// formed but made for another listener (its nonce), as a process that
// recorded one would replay it.
func tcpHello(h []byte) []byte {
	b := make([]byte, 64)
	copy(b, "FXNTHELO")
	binary.LittleEndian.PutUint16(b[8:], 1) // version
	binary.LittleEndian.PutUint16(b[10:], 0)
	binary.LittleEndian.PutUint16(b[12:], 1) // one socket
	copy(b[16:32], h[8:24])                  // the other listener's nonce
	rand.Read(b[32:48])
	copy(b[48:], "lo")
	return b
}

// shmHello is a well-formed shm hello (fabric/shm's M1) of another job:
// the listener must refuse it, or answer with its own proof and then
// drop the connection when no valid proof follows.
func shmHello() []byte {
	b := []byte("FLXSHM03")
	b = binary.LittleEndian.AppendUint32(b, 0) // from
	b = binary.LittleEndian.AppendUint32(b, 1) // to
	b = binary.LittleEndian.AppendUint64(b, 1<<20)
	b = binary.LittleEndian.AppendUint64(b, 0)
	nonce := make([]byte, 32)
	rand.Read(nonce)
	b = append(b, nonce...)
	for _, s := range []string{"another-job", "w"} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}
