package comm

import "encoding/json"

// EndResumed is the Kind of a member's report that a collective it had
// reported as waiting (a "timeout" for InCall, published while the call
// still waited: flexlink's libnccl reports a call that has waited long)
// has completed since: it withdraws that report and is no end itself.
// A launcher takes a member's later report on a communicator over its
// earlier timeouts there.
const EndResumed = "resumed"

// EncodeEnd is the put (key and value) that publishes e as the end of
// communicator e.Comm seen by world rank by, in the form members of this
// package's communicators publish theirs (DecodeEnd reads it): for
// communicators that are not this package's but whose ends a launcher
// must hear of too (flexlink's libnccl reports its own to flexrun, see
// join.DialReporter). Their names must not be this package's ("w",
// "w.1", ...). e.ClosedBy is -1 unless a member closed the communicator
// while others were in a later collective.
func EncodeEnd(by int, e EndReport) (key string, value []byte) {
	rec := endRecord{Kind: e.Kind, Text: e.Text, InCall: e.InCall, Members: e.Members, By: by, Behind: e.Behind, Echo: e.Echo}
	if e.ClosedBy >= 0 {
		rec.Closed = &closeRecord{Rank: -1, World: e.ClosedBy, Calls: e.ClosedCalls}
	}
	b, _ := json.Marshal(rec)
	return endKey(e.Comm), b
}
