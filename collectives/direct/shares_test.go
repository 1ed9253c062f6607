package direct

import (
	"github.com/flexlink/flexlink/fabric/netshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
)

// The tests reach the plane's two shares by their types (the plane itself
// knows only fabric/linkshare.Share).

// px is the plane's PCIe share.
func (p *directPlane) px() *pcieshare.Share {
	for _, sh := range p.sh {
		if x, ok := sh.(*pcieshare.Share); ok {
			return x
		}
	}
	return nil
}

// nx is the plane's net share (nil: off).
func (p *directPlane) nx() *netshare.Share {
	for _, sh := range p.sh {
		if x, ok := sh.(*netshare.Share); ok {
			return x
		}
	}
	return nil
}

// The planners' link ids (fabric/pcieshare) and the staging's constants
// (fabric/pcie), as the tests name them.
const (
	linkPCIe    = pcieshare.LinkPCIe
	linkNet     = pcieshare.LinkRider
	pcieMinSlot = pcie.MinSlot
	pcieAlign   = pcie.Align
	pcieMaxSegs = pcie.MaxSegs
)
