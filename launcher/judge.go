package launcher

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/internal/errs"

	"golang.org/x/sys/unix"
)

// ExitPeerLost is the exit status a rank program may end with when it
// fails only because a peer was lost (its error wraps errs.ErrPeerLost and
// names another rank). flexrun then never names it as a job's cause while
// another rank's failure can be. 75 is EX_TEMPFAIL of sysexits.h: running
// the job again may succeed.
const ExitPeerLost = errs.ExitPeerLost

// endKind says how a rank ended, as far as naming the cause goes.
type endKind int

const (
	endPeerLost endKind = iota // exited with ExitPeerLost: a consequence
	endStatus                  // exited with another non-zero status
	endSignal                  // killed by a signal
	endStopped                 // stopped by a signal and still there
	endHost                    // lost with its host
)

// outcome is one failed rank as flexrun saw it.
type outcome struct {
	rank, pid int
	host      string
	kind      endKind
	code      int       // flexrun's exit code if this is the cause
	how       string    // "exited with status 3", "was killed by signal 9 (killed)", ...
	order     int       // position in the order the ends were seen (the kernel's exit order for the ranks of one host)
	at        time.Time // when the end was seen
	remote    bool      // run by an agent on another host
	lost      string    // endHost: "host h2 lost: ..."
	lostWith  []int     // endHost: the ranks lost with the host
	// beforeJoin: it ended before joining the job's store while other
	// ranks joined (they cannot go on without it).
	beforeJoin bool
}

// sameTime is how close two ends must be for the kernel's order of them to
// be in doubt (see judge).
const sameTime = 50 * time.Millisecond

// verdict names a failed job's cause and the ranks that failed because of
// it.
type verdict struct {
	cause        outcome
	consequences []int // ranks that failed after the cause, in rank order
	// first, when set, is the cause's line (a mismatch, ranks that never
	// joined); why is what the consequences failed on ("" : the cause's
	// loss).
	first, why string
	// noRank: the cause is no one rank (a two-sided mismatch); cause is
	// then the first rank to fail, for the exit code.
	noRank bool
}

// judge names the cause among the failed ranks of a job (outs, in any
// order), with what the bootstrap server said (ev). The cause is, in this
// order:
//
//  1. a host that was lost (silent, or its connection ended): its ranks
//     went with it, and a silent host stops everything else;
//  2. a rank stopped by a signal (SIGSTOP): it cannot fail because of a
//     peer, it just stops answering;
//  3. the first rank the bootstrap server itself found lost (its
//     connection ended before its goodbye: the kernel closes a dying
//     process's sockets at once, well before its peers notice the loss on
//     their links, and a rank that notices waits up to a second for the
//     server's finding before it gives up, see internal/comm), even when
//     a rank's second-hand "peer lost" report reached the server first;
//     unless that rank is itself known to be a consequence (it reported a
//     lost peer, or exited with ExitPeerLost);
//  4. the first rank to end among those not known to be consequences
//     (ExitPeerLost, ranks that aborted the job because they lost a
//     peer). On one host "first" is the kernel's exit
//     order (see reaper): a rank cannot fail because of a peer's death
//     before that peer has begun to die. It is not exact, though: a dying
//     process may be preempted after it closed its sockets and before its
//     parent hears of its end, long enough for a peer to notice, fail and
//     end first. So a rank killed by a signal (which did not die because
//     of a peer) goes before a rank that exited with a status at most
//     sameTime earlier. Across hosts the order in which the agents'
//     reports arrive tells even less, and a signal always goes first.
//
// What the ranks and the server reported goes before 3 and 4 (see
// firstCause): a rank refused at the handshake, a collective mismatch a
// rank published, ranks that never joined once the bootstrap timeout has
// passed. A rank that ended before joining while others joined ranks with
// 3.
//
// ok is false when outs is empty.
func judge(outs []outcome, ev evidence) (v verdict, ok bool) {
	if len(outs) == 0 {
		return verdict{}, false
	}
	if v, ok := firstCause(outs, ev); ok {
		return v, true
	}
	reporters := ev.reporters
	named, hasNamed := ev.reportedLost()
	remote := slices.ContainsFunc(outs, func(o outcome) bool { return o.remote })
	rankOf := func(o outcome) int {
		switch {
		case o.kind == endHost:
			return 0
		case o.kind == endStopped:
			return 1
		case ev.lostFirst != nil && *ev.lostFirst == o.rank && !reporters[o.rank] && o.kind != endPeerLost:
			return 2
		case o.beforeJoin && o.kind != endPeerLost:
			return 2
		case hasNamed && named == o.rank && !reporters[o.rank] && o.kind != endPeerLost:
			return 2 // the rank the others' reports say they lost
		case o.kind == endPeerLost || reporters[o.rank]:
			return 5
		case remote && o.kind == endStatus:
			return 4
		}
		return 3
	}
	best := outs[0]
	for _, o := range outs[1:] {
		if rb, ro := rankOf(best), rankOf(o); ro < rb || ro == rb && o.order < best.order {
			best = o
		}
	}
	if best.kind == endStatus && rankOf(best) == 3 {
		// A death by a signal seen within sameTime of it goes first.
		var sig *outcome
		for i, o := range outs {
			if o.kind == endSignal && !reporters[o.rank] && o.at.Sub(best.at) <= sameTime && (sig == nil || o.order < sig.order) {
				sig = &outs[i]
			}
		}
		if sig != nil {
			best = *sig
		}
	}
	v.cause = best
	if hasNamed && named != best.rank && best.kind != endHost {
		// The ranks that failed say whom they lost: their words, not
		// the cause's rank (which their reports do not name).
		v.why = fmt.Sprintf("peer rank %d lost", named)
	}
	v.consequences = others(outs, func(r int) bool {
		return r == best.rank || best.kind == endHost && slices.Contains(best.lostWith, r)
	})
	return v, true
}

// others lists the ranks of outs that cause does not hold, in rank order.
func others(outs []outcome, cause func(rank int) bool) []int {
	var rs []int
	for _, o := range outs {
		if !cause(o.rank) && !slices.Contains(rs, o.rank) {
			rs = append(rs, o.rank)
		}
	}
	slices.Sort(rs)
	return rs
}

// lines renders a verdict as flexrun's two lines: the cause (and how many
// ranks are still to be terminated), then the ranks that failed because of
// it, if any.
func (v verdict) lines(others int) []string {
	c := v.cause
	first := fmt.Sprintf("rank %d (host %s, pid %d) %s", c.rank, c.host, c.pid, c.how)
	why := fmt.Sprintf("peer rank %d lost", c.rank)
	if c.kind == endHost {
		first = fmt.Sprintf("%s (ranks %s gone with it)", c.lost, joinInts(c.lostWith))
		why = "peer host " + c.host + " lost"
	}
	if v.first != "" {
		first = v.first
	}
	if v.why != "" {
		why = v.why
	}
	if others > 0 {
		first += "; terminating " + plural(others, "other rank")
	}
	out := []string{first}
	if n := len(v.consequences); n > 0 {
		who := "rank "
		if n > 1 {
			who = "ranks "
		}
		out = append(out, fmt.Sprintf("%s%s stopped: %s", who, joinInts(v.consequences), why))
	}
	return out
}

// stopSignal reports the signal that has stopped pid, a child of this
// process that is stopped now (SIGSTOP, SIGTSTP, ...). The stop stays
// reportable (WNOWAIT).
func stopSignal(pid int) (syscall.Signal, bool) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return 0, false
	}
	// The SIGCHLD fields follow the three-int header: pid, uid, status.
	ci := (*struct {
		signo, errno, code, _ int32
		pid, uid, status      int32
	})(unsafe.Pointer(&info))
	if ci.pid != int32(pid) || ci.code != cldStopped {
		return 0, false
	}
	return syscall.Signal(ci.status), true
}

const cldStopped = 5 // CLD_STOPPED, si_code of a stopped child

// stoppedHow is an outcome's words for a rank stopped by sig.
func stoppedHow(sig syscall.Signal) string {
	return fmt.Sprintf("was stopped by signal %d (%s)", int(sig), strings.TrimSpace(unix.SignalName(sig)))
}
