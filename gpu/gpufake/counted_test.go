package gpufake

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"testing"

	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// TestEveryDriverCallCounted: countedAPI declares every method of cu.API
// itself. It embeds the API, so an entry point added to cu.API later
// would otherwise be forwarded uncounted, and the tests that pin a path's
// driver calls would not see it.
func TestEveryDriverCallCounted(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "counted.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
			continue
		}
		if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
			if id, ok := star.X.(*ast.Ident); ok && id.Name == "countedAPI" {
				declared = append(declared, fd.Name.Name)
			}
		}
	}
	api := reflect.TypeFor[cu.API]()
	if api.NumMethod() == 0 {
		t.Fatal("cu.API has no methods")
	}
	for i := range api.NumMethod() {
		if name := api.Method(i).Name; !slices.Contains(declared, name) {
			t.Errorf("cu.API.%s is not counted: declare it on countedAPI in counted.go", name)
		}
	}
}
