package pxntest

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

var groupRE = regexp.MustCompile(`group payload: rank=\d+ cross_host_bytes=(\d+)`)

// crossBytes sums what the ranks sent to other hosts in their groups.
func crossBytes(t *testing.T, out string) int64 {
	t.Helper()
	ms := groupRE.FindAllStringSubmatch(out, -1)
	if len(ms) != 2*per {
		t.Fatalf("%d ranks printed their group payload, want %d:\n%s", len(ms), 2*per, out)
	}
	var sum int64
	for _, m := range ms {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		sum += n
	}
	return sum
}

// TestGroupSpine: grouped sends and receives, every rank to every other
// with seeded uneven lengths (2 groups), then a group of a few pairs
// whose relays are in no pair, every element checked by the program.
// With FLEXLINK_PXN=2 and FLEXLINK_PXN_GROUP=1 the cross-rail messages go
// through the relays: the spine forwards under 1% of the cross-host
// payload and the relays' counters carry it; with FLEXLINK_PXN_GROUP=0
// the same groups are correct and the spine carries the cross-rail part.
func TestGroupSpine(t *testing.T) {
	need(t)
	spine := map[string]int64{}
	var payload int64
	for _, group := range []string{"1", "0"} {
		before := spineBytes(t)
		code, out, errs := jobEnv(t, []string{"FLEXLINK_PXN=2", "FLEXLINK_PXN_GROUP=" + group}, 40*time.Second, "-groups", "2", "-size", "524288")
		if code != 0 {
			t.Fatalf("PXN_GROUP=%s: flexrun exit %d\nstdout:\n%s\nstderr:\n%s", group, code, out, errs)
		}
		spine[group] = spineBytes(t) - before
		payload = crossBytes(t, out)
		t.Logf("FLEXLINK_PXN_GROUP=%s: spine %d bytes of %d cross-host", group, spine[group], payload)
		if group == "1" {
			tot := parseCounters(t, out)
			t.Logf("counters %+v", tot)
			// About 3/4 of the cross-host payload is cross-rail: relayed.
			if tot.relayed == 0 || tot.bytes < payload/2 {
				t.Errorf("the relays carried %d bytes in %d messages of %d cross-host: want about 3/4", tot.bytes, tot.relayed, payload)
			}
			// Every relayed chunk is received once, and the destinations
			// take the chunks of a relay's 3 senders in multi-receives.
			if tot.received != tot.messages || tot.receives*2 > tot.received {
				t.Errorf("relays sent %d network messages, destinations received %d in %d receives: want at least 2 per receive", tot.messages, tot.received, tot.receives)
			}
		}
	}
	if spine["1"]*100 >= payload {
		t.Errorf("PXN groups: the spine forwarded %d bytes of %d (>= 1%%)", spine["1"], payload)
	}
	if spine["0"] < payload*6/10 {
		t.Errorf("groups without PXN: the spine forwarded %d bytes of %d, want the cross-rail part (about 3/4)", spine["0"], payload)
	}
}

// TestGroupRelayKilled: rank 1, the relay of rail 1 on the first host,
// dies between two groups (the next one has 0 -> 5 and 2 -> 5 through
// rank 1, which is in no pair), and then 20 ms into a group of every pair
// (4 MiB per rank); each time the job ends with rank 1 named within 5 s,
// nothing left running and no shared memory left behind.
func TestGroupRelayKilled(t *testing.T) {
	need(t)
	for _, c := range []struct{ name, flag, size string }{{"between", "-kill-after", "262144"}, {"during", "-kill", "4194304"}} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			shmBefore := shmEntries(t)
			code, out, errs := jobEnv(t, []string{"FLEXLINK_PXN=2", "FLEXLINK_PXN_GROUP=1"}, 30*time.Second, "-groups", "1", "-size", c.size, c.flag, "1:0")
			checkKilled(t, "1", start, shmBefore, code, out, errs)
		})
	}
}

// TestUCX: the same all-to-alls and groups over the ucx provider (UCX's
// tcp transport on the rails): every element checked by the program, the
// relays carry the cross-rail part, the spine next to none of it.
func TestUCX(t *testing.T) {
	need(t)
	ucx := []string{"FLEXLINK_NET=ucx", "UCX_TLS=tcp", "UCX_NET_DEVICES=rail0,rail1,rail2,rail3", "FLEXLINK_PXN=2"}
	for _, args := range [][]string{{"-size", "262144", "-iters", "2"}, {"-groups", "1", "-size", "1048576"}} {
		before := spineBytes(t)
		code, out, errs := jobEnv(t, ucx, 60*time.Second, args...)
		if code != 0 {
			t.Fatalf("%v over ucx: flexrun exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
		spine := spineBytes(t) - before
		tot := parseCounters(t, out)
		t.Logf("%v over ucx: spine %d bytes, counters %+v", args, spine, tot)
		if tot.relayed == 0 || spine*100 >= tot.bytes {
			t.Errorf("%v over ucx: %d messages relayed, the spine forwarded %d bytes of %d", args, tot.relayed, spine, tot.bytes)
		}
	}
}
