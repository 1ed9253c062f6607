package comm

import (
	"reflect"
	"testing"
)

// TestEncodeEnd: what EncodeEnd puts, DecodeEnd reads back as it was
// given (a launcher hears another library's communicators' ends as it
// hears this package's), and the key is the communicator's end key.
func TestEncodeEnd(t *testing.T) {
	for _, e := range []EndReport{
		{Comm: "nccl@10.0.0.1:4000/w", Kind: "timeout", Text: "rank 0 of 3: AllReduce #5 did not complete: rank 1 has not called AllReduce #5", ClosedBy: -1, InCall: "AllReduce #5", Members: []int{2, 0, 1}, Behind: []int{1}},
		{Comm: "nccl@10.0.0.1:4000/w/1c0", Kind: "mismatch", Text: "collective mismatch: ...", ClosedBy: -1, InCall: "AllGather #2"},
		{Comm: "nccl@h:1/w", Kind: "peer-lost", Text: "rank 2 lost", ClosedBy: -1, Echo: true},
		{Comm: "x", Kind: "mismatch", Text: "closed early", ClosedBy: 3, ClosedCalls: 0, InCall: "allreduce #1", Members: []int{0, 3}},
	} {
		key, value := EncodeEnd(1, e)
		if key != endKey(e.Comm) {
			t.Errorf("%s: key %q, want %q", e.Comm, key, endKey(e.Comm))
		}
		got, ok := DecodeEnd(key, value)
		if !ok || !reflect.DeepEqual(got, e) {
			t.Errorf("%s: decoded %+v (%v), want %+v", e.Comm, got, ok, e)
		}
	}
}
