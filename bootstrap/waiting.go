package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A collective that times out says whom it was waiting for: the rank asks
// the server (a Get of the collective's waiting key, answered at once from
// the server's own state, never stored) which ranks have not joined the
// job and which have not called the collective yet.

// waitingPrefix starts the keys a rank reads to learn whom collective
// #seq waits for; ranks may not put keys under it.
const waitingPrefix = "bootstrap/waiting/"

func waitingKey(seq uint64) string { return waitingPrefix + strconv.FormatUint(seq, 10) }

// waitingAsk bounds the question after a timeout.
const waitingAsk = 500 * time.Millisecond

// waitingFor is the server's answer for key (ok false: not a waiting
// key). Called under the engine's lock.
func (e *engine) waitingFor(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, waitingPrefix)
	if !ok {
		return "", false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return "not a collective number", true
	}
	var notJoined, notCalled []int
	op := e.ops[seq]
	for r, m := range e.members {
		switch {
		case !m.staying():
			notJoined = append(notJoined, r)
		case op != nil && !op.have[r]:
			notCalled = append(notCalled, r)
		}
	}
	var parts []string
	if len(notJoined) > 0 {
		parts = append(parts, ranksWord(notJoined)+" not joined the job")
	}
	if len(notCalled) > 0 {
		parts = append(parts, fmt.Sprintf("%s not called %s #%d", ranksWord(notCalled), op.kind, seq))
	}
	if len(parts) == 0 {
		return "every rank has joined and called it", true
	}
	return strings.Join(parts, "; "), true
}

// ranksWord is "rank 3 has" or "ranks 1, 2 have".
func ranksWord(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	if len(rs) == 1 {
		return "rank " + s[0] + " has"
	}
	return "ranks " + strings.Join(s, ", ") + " have"
}

// whoMissing asks the server whom collective #seq waits for, briefly;
// "" when it cannot tell.
func (e *endpoint) whoMissing(seq uint64) string {
	if e.Err() != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitingAsk)
	defer cancel()
	r, err := e.request(ctx, "bootstrap: whom is it waiting for", func(id uint64) message { return getMsg{ID: id, Key: waitingKey(seq)} })
	if err != nil {
		return ""
	}
	return string(r.Value)
}
