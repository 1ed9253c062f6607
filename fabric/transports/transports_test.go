package transports

import (
	"reflect"
	"strings"
	"testing"
)

func TestKinds(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Pair
		want []string
		err  string
	}{
		{"auto same host", Pair{Mode: ModeAuto, SameHost: true}, []string{"shm"}, ""},
		{"auto across hosts", Pair{Mode: ModeAuto, MyRails: 2, PeerRails: 2}, []string{"net0", "net1"}, ""},
		{"auto uneven rails", Pair{Mode: ModeAuto, MyRails: 4, PeerRails: 2}, []string{"net0", "net1"}, ""},
		{"auto no rail", Pair{Mode: ModeAuto, MyRails: 2}, nil, "no network transport rail in common"},
		{"auto shm,tcp same host", Pair{Mode: ModeAuto, SameHost: true, Links: "tcp, shm"}, []string{"shm", "tcp"}, ""},
		{"auto shm,net same host", Pair{Mode: ModeAuto, SameHost: true, Links: "shm,net", MyRails: 1, PeerRails: 1}, []string{"net0", "shm"}, ""},
		{"auto shm,tcp across", Pair{Mode: ModeAuto, Links: "shm,tcp", MyRails: 1, PeerRails: 1}, []string{"tcp"}, ""},
		{"auto nvlink only", Pair{Mode: ModeAuto, SameHost: true, Links: "nvlink"}, []string{"shm"}, ""},
		{"net same host", Pair{Mode: ModeNet, SameHost: true, MyRails: 1, PeerRails: 1}, []string{"net0"}, ""},
		{"shm across", Pair{Mode: ModeShm}, nil, "another host"},
		{"tcp", Pair{Mode: ModeTCP, SameHost: true}, []string{"tcp"}, ""},
		{"bad mode", Pair{Mode: "udp"}, nil, "FLEXLINK_TRANSPORT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Kinds(c.p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}
