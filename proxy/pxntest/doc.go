// Package pxntest runs PXN all-to-all on an emulated rail-optimised
// cluster (scripts/testcluster up 2 --rails 4 --spine ..., network
// namespaces, needs root): results, the bytes the spine forwards with PXN
// on and off, the receives posted, and killed ranks. Its tests only.
package pxntest
