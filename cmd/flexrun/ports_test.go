package main

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/ports"
)

// TestPortRangeFlag: --port-range puts flexrun's bootstrap server and
// MASTER_PORT in the range and hands FLEXLINK_PORT_RANGE to every rank
// (the flag wins over the environment's); a bad range stops flexrun
// before any rank starts, naming the flag; a bad FLEXLINK_PORT_RANGE, the
// variable.
func TestPortRangeFlag(t *testing.T) {
	r := ports.Range{First: 31070, Last: 31079}
	res := flexrun(t, runOpts{env: []string{"FLEXLINK_PORT_RANGE=31000-31001"}}, "-np", "3", "--oversubscribe", "--port-range", r.String(), bins.probe, "env")
	for rank, p := range reports(t, res, 3) {
		if v := p.Env["FLEXLINK_PORT_RANGE"]; v != r.String() {
			t.Errorf("rank %d: FLEXLINK_PORT_RANGE=%q, want %q", rank, v, r)
		}
		_, bport, _ := net.SplitHostPort(p.Env["FLEXLINK_BOOTSTRAP"])
		for name, v := range map[string]string{"the bootstrap's port": bport, "MASTER_PORT": p.Env["MASTER_PORT"]} {
			if port, err := strconv.Atoi(v); err != nil || !r.Contains(port) {
				t.Errorf("rank %d: %s %q, want one in %v", rank, name, v, r)
			}
		}
	}
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--port-range", "31079-31070"}, nil, "--port-range"},
		{[]string{"--port-range", "many"}, nil, "--port-range"},
		{nil, []string{"FLEXLINK_PORT_RANGE=0-10"}, "FLEXLINK_PORT_RANGE"},
	} {
		res := flexrun(t, runOpts{env: c.env}, append(append([]string{"-np", "1"}, c.args...), bins.probe, "env")...)
		if res.code != 1 || !strings.Contains(res.stderr, c.want) || res.stdout != "" {
			t.Errorf("%v %v: exit %d, stdout %q, stderr %q; want exit 1 naming %s, no rank started", c.args, c.env, res.code, res.stdout, res.stderr, c.want)
		}
	}
}

// TestPortRangeRemote: ranks started over ssh get the range too, from
// the flag or from flexrun's FLEXLINK_PORT_RANGE, and dial a bootstrap
// listening in it.
func TestPortRangeRemote(t *testing.T) {
	r := ports.Range{First: 31080, Last: 31089}
	for _, c := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flag", []string{"--port-range", r.String()}, nil},
		{"environment", nil, []string{"FLEXLINK_PORT_RANGE=" + r.String()}},
	} {
		args := append(append(remoteArgs(t, "192.0.2.77:1,192.0.2.78:1"), c.args...), bins.probe, "env")
		for rank, p := range reports(t, flexrun(t, runOpts{env: c.env}, args...), 2) {
			_, bport, _ := net.SplitHostPort(p.Env["FLEXLINK_BOOTSTRAP"])
			port, _ := strconv.Atoi(bport)
			if p.Env["FLEXLINK_PORT_RANGE"] != r.String() || !r.Contains(port) {
				t.Errorf("%s: rank %d: FLEXLINK_PORT_RANGE=%q, bootstrap port %q; want %v and a port in it", c.name, rank, p.Env["FLEXLINK_PORT_RANGE"], bport, r)
			}
		}
	}
}
