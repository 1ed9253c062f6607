module example.com/external

go 1.26.0

require github.com/flexlink/flexlink v0.0.0

require (
	github.com/NVIDIA/go-nvml v0.13.0-1 // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	github.com/sbromberger/gompi v0.2.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

// Until github.com/flexlink/flexlink is published, build against a
// checkout: this example sits two directories below the repository root.
// When flexlink's own requirements change, run `go mod tidy` here
// (tests/readme builds this module and fails on a stale go.sum).
replace github.com/flexlink/flexlink => ../..
