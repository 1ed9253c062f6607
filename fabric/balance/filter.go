package balance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/settings"
)

// knownKinds are the names FLEXLINK_LINKS accepts.
func knownKinds() []fabric.Kind {
	return []fabric.Kind{fabric.KindNVLink, fabric.KindPCIe, fabric.KindNet, fabric.KindShm, fabric.KindTCP, fabric.KindFake}
}

// FilterLinks keeps the links whose kind FLEXLINK_LINKS names (a comma
// list such as "nvlink,pcie"; empty keeps all). A name that is no link
// kind is an error rather than silently matching nothing, and so is a
// filter that leaves no link: a typo must not turn into a job that runs
// on the wrong links or none.
func FilterLinks(links []LinkSpec, env settings.Env) ([]LinkSpec, error) {
	return FilterLinksBy(links, env.String("FLEXLINK_LINKS"))
}

// FilterLinksBy is FilterLinks with FLEXLINK_LINKS's value already read.
func FilterLinksBy(links []LinkSpec, spec string) ([]LinkSpec, error) {
	v := strings.TrimSpace(spec)
	if v == "" {
		return slices.Clone(links), nil
	}
	var want []fabric.Kind
	for _, name := range strings.Split(v, ",") {
		k := fabric.Kind(strings.ToLower(strings.TrimSpace(name)))
		if k == "" {
			continue
		}
		if !slices.Contains(knownKinds(), k) {
			return nil, fmt.Errorf("FLEXLINK_LINKS=%q: unknown link kind %q (known: %v)", v, k, knownKinds())
		}
		want = append(want, k)
	}
	var out []LinkSpec
	var have []fabric.Kind
	for _, l := range links {
		have = append(have, l.Kind)
		if slices.Contains(want, l.Kind) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("FLEXLINK_LINKS=%q leaves no link (this pair has %v)", v, have)
	}
	return out, nil
}
