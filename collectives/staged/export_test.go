package staged

import "github.com/flexlink/flexlink/collectives/plane"

// Piped is how many calls of kind k p (a staged plane) ran pipelined.
func Piped(p plane.Plane, k plane.Kind) int { return p.(*stagedPlane).piped[k] }
