package testenv

import (
	"reflect"
	"strings"
	"testing"
)

// WantErr fails the test unless err is nil and want is "", or err's text
// contains want.
func WantErr(t testing.TB, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

// WantResult is WantErr, and then, when no error was wanted, fails the
// test unless got equals want (reflect.DeepEqual).
func WantResult[T any](t testing.TB, got T, err error, want T, wantErr string) {
	t.Helper()
	WantErr(t, err, wantErr)
	if wantErr == "" && !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
