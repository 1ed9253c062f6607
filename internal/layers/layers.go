// Package layers holds the one test that keeps flexlink's imports flowing
// one way (see docs/ARCHITECTURE.md): programs → the C boundary and the
// launcher → rank (public API) → the communicator core → algorithms and the
// proxy → link packages → the link interfaces → gpu → bootstrap → the
// leaves. It has no code of its own.
package layers
