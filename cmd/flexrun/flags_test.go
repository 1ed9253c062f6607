package main

import (
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/textdist"

	"github.com/urfave/cli/v2"
)

func TestDurationValue(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"2", 2 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{" 90 ", 90 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"0", 0, true},
		{"-1", 0, false},
		{"-5s", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"2 minutes", 0, false},
	}
	for _, tc := range tests {
		var v durationValue
		err := v.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && v.d != tc.want) {
			t.Errorf("Set(%q) = %v, %v; want %v (ok %v)", tc.in, v.d, err, tc.want, tc.ok)
		}
	}
}

func TestNearestFlag(t *testing.T) {
	known := []cli.Flag{
		&cli.StringFlag{Name: "bind-to"},
		&cli.BoolFlag{Name: "report-bindings"},
		&cli.IntFlag{Name: "np", Aliases: []string{"n"}},
		&cli.StringFlag{Name: "hostfile", Aliases: []string{"machinefile"}},
	}
	tests := []struct{ typed, want string }{
		{"bind-too", "--bind-to"},
		{"bindto", "--bind-to"},
		{"report-binding", "--report-bindings"},
		{"machinefil", "--machinefile"},
		{"nq", "--np"},
		{"m", "-n"},
		{"frobnicate", ""},
		{"gpus-per-node", ""},
	}
	for _, tc := range tests {
		if got := nearestFlag(tc.typed, known); got != tc.want {
			t.Errorf("nearestFlag(%q) = %q, want %q", tc.typed, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"bind-to", "bind-too", 1}, {"np", "pn", 2}} {
		if got := textdist.Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("textdist.Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
