package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/launcher"
)

func TestFirstNodes(t *testing.T) {
	three := []launcher.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}, {Name: "c", Slots: 2}}
	for _, tc := range []struct {
		name  string
		hosts []launcher.Host
		n     int
		slurm string
		want  []launcher.Host
		err   string
	}{
		{"first two of three", three, 2, "", three[:2], ""},
		{"all", three, 3, "", three, ""},
		{"too few hosts", three, 4, "", nil, "only 3 host(s)"},
		{"zero", three, 0, "", nil, "want 1 or more"},
		{"this machine", nil, 1, "", nil, ""},
		{"two without hosts", nil, 2, "", nil, "give the hosts with -H"},
		{"slurm agrees", nil, 2, "2", nil, ""},
		{"slurm disagrees", nil, 2, "4", nil, "has 4 node(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := firstNodes(tc.hosts, tc.n, tc.slurm)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
