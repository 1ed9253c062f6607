package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// docPending are methods whose doc comment has not moved to rank yet:
// "package.Type.Method" -> the file that holds it. An entry whose method
// now says "see rank." is simply no longer needed.
var docPending = map[string]string{
	"plane.DeviceComm.AllToAllv": "collectives/plane/alltoallv.go",
}

// TestPublicDocsInRank: public doc comments live in rank/ only. A method
// of internal/comm.Comm or collectives/plane.DeviceComm that rank exposes
// under the same name says "see rank." instead of documenting it again.
func TestPublicDocsInRank(t *testing.T) {
	for _, c := range []struct{ rankType, dir, typ string }{
		{"Comm", "../comm", "Comm"},
		{"DeviceComm", "../../collectives/plane", "DeviceComm"},
	} {
		public := methodDocs(t, "../../rank", c.rankType)
		if len(public) < 10 {
			t.Fatalf("rank.%s has %d exported methods: the parse found too few", c.rankType, len(public))
		}
		inner := methodDocs(t, c.dir, c.typ)
		pkg := filepath.Base(c.dir)
		for name, doc := range inner {
			if _, ok := public[name]; !ok {
				continue
			}
			key := pkg + "." + c.typ + "." + name
			if !strings.Contains(strings.Join(strings.Fields(doc.text), " "), "see rank.") {
				if _, ok := docPending[key]; !ok {
					t.Errorf("%s (%s) documents what rank.%s.%s does: say \"see rank.%s.%s\" there", key, doc.file, c.rankType, name, c.rankType, name)
				}
			}
		}
	}
}

type methodDoc struct{ file, text string }

// methodDocs parses dir's non-test files and returns the exported methods
// of typ (value or pointer receiver) with their doc comments.
func methodDocs(t *testing.T, dir, typ string) map[string]methodDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]methodDoc{}
	fs := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fs, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			rt := fd.Recv.List[0].Type
			if s, ok := rt.(*ast.StarExpr); ok {
				rt = s.X
			}
			if id, ok := rt.(*ast.Ident); ok && id.Name == typ {
				out[fd.Name.Name] = methodDoc{file: filepath.Base(f), text: fd.Doc.Text()}
			}
		}
	}
	return out
}
