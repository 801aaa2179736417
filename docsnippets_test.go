package election_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Go snippets of README.md and docs/*.md must compile. The rule a page
// follows:
//
//   - A ```go block with a package clause is a whole file: it compiles as
//     a package of its own (a main package as a plain one).
//   - Any other ```go block is a fragment of a function that returns an error
//     and has ctx (context.Context), nc (*nats.Conn), js (jetstream.JetStream)
//     and kv (jetstream.KeyValue, an election bucket) in scope, as do the work
//     functions the pages pass around: relay and compact (func(ctx
//     context.Context) error, a fleet daemon's Run), runScheduler (func(ctx
//     context.Context, token uint64)), scheduler and compactor (func(ctx
//     context.Context), an OnWon callback). A page reads top to bottom: each
//     fragment also sees what the fragments above it on the page declared
//     (each is nested in the block of the one before, so it may declare a
//     name again). Everything the packages import in docSnippetImports may
//     be used; nothing else. A fragment may start with import declarations
//     of these paths, to show where a name comes from.
//   - A block that cannot compile says why in an HTML comment on the line
//     before it: <!-- snippet: no compile, because ... -->.
//
// The test hands the snippets to go build through an overlay: nothing is
// written into the module.

var docSnippetImports = map[string]string{
	"context":                             "context.Background",
	"errors":                              "errors.New",
	"fmt":                                 "fmt.Sprint",
	"log":                                 "log.Println",
	"log/slog":                            "slog.Default",
	"net/http":                            "http.Handle",
	"os":                                  "os.Exit",
	"time":                                "time.Now",
	"github.com/kvelect/election":         "election.NewElection",
	"github.com/kvelect/election/fleet":   "fleet.Join",
	"github.com/kvelect/election/history": "history.Open",
	"github.com/kvelect/election/promelection":                "promelection.NewCollector",
	"github.com/nats-io/nats.go":                              "nats.Connect",
	"github.com/nats-io/nats.go/jetstream":                    "jetstream.New",
	"github.com/prometheus/client_golang/prometheus":          "prometheus.NewRegistry",
	"github.com/prometheus/client_golang/prometheus/promhttp": "promhttp.HandlerFor",
}

const docSnippetHelpers = `
func relay(ctx context.Context) error   { <-ctx.Done(); return nil }
func compact(ctx context.Context) error { <-ctx.Done(); return nil }
func runScheduler(ctx context.Context, token uint64) {}
func scheduler(ctx context.Context)     {}
func compactor(ctx context.Context)     {}
`

type docSnippet struct {
	page string
	line int
	code string
}

var (
	goFence   = regexp.MustCompile("^\\s*```go\\s*$")
	endFence  = regexp.MustCompile("^\\s*```\\s*$")
	noCompile = regexp.MustCompile(`^\s*<!-- snippet: no compile, because .+-->\s*$`)
)

// docSnippets returns the ```go blocks of a page, less those marked as not
// compiling, dedented to their fence.
func docSnippets(t *testing.T, page string) []docSnippet {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	var out []docSnippet
	for i := 0; i < len(lines); i++ {
		if !goFence.MatchString(lines[i]) {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " \t"))]
		start := i
		var body []string
		for i++; i < len(lines) && !endFence.MatchString(lines[i]); i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: a ```go block without its closing fence", page, start+1)
		}
		if start > 0 && noCompile.MatchString(lines[start-1]) {
			continue
		}
		out = append(out, docSnippet{page: page, line: start + 2, code: strings.Join(body, "\n") + "\n"})
	}
	return out
}

var importLine = regexp.MustCompile(`^import\s+(?:\w+\s+)?"([^"]+)"\s*$`)

// stripImports removes the import declarations a fragment starts with,
// checking that each is one the wrapper imports.
func stripImports(t *testing.T, s docSnippet) docSnippet {
	t.Helper()
	lines := strings.Split(s.code, "\n")
	n := 0
	for ; n < len(lines); n++ {
		line := strings.TrimSpace(lines[n])
		if line == "" {
			continue
		}
		m := importLine.FindStringSubmatch(line)
		if m == nil {
			break
		}
		if _, ok := docSnippetImports[m[1]]; !ok {
			t.Errorf("%s:%d: import %q is none of the snippet test's docSnippetImports: add it there", s.page, s.line+n, m[1])
		}
	}
	s.line += n
	s.code = strings.Join(lines[n:], "\n")
	return s
}

// declared returns the names a fragment's top-level statements declare, so
// that the wrapper can use each once (a fragment need not use what it shows).
func declared(t *testing.T, s docSnippet) []string {
	t.Helper()
	src := "package p\nfunc _() {\n" + s.code + "\n}\n"
	f, err := parser.ParseFile(token.NewFileSet(), s.page, src, 0)
	if err != nil {
		t.Errorf("%s:%d: the snippet does not parse as statements: %v", s.page, s.line, err)
		return nil
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" {
			names = append(names, id.Name)
		}
	}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					add(e.(*ast.Ident))
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, spec := range g.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names
}

// fragmentsFile wraps a page's fragments into one function, each nested in
// the block of the one before.
func fragmentsFile(t *testing.T, pkg string, frags []docSnippet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport (\n", pkg)
	for path := range docSnippetImports {
		fmt.Fprintf(&b, "\t%q\n", path)
	}
	b.WriteString(")\n\n")
	for _, use := range docSnippetImports {
		fmt.Fprintf(&b, "var _ = %s\n", use)
	}
	b.WriteString(docSnippetHelpers)
	b.WriteString("\nfunc _(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, kv jetstream.KeyValue) error {\n")
	for _, s := range frags {
		s = stripImports(t, s)
		fmt.Fprintf(&b, "{\n//line %s:%d\n%s", s.page, s.line, s.code)
		for _, name := range declared(t, s) {
			fmt.Fprintf(&b, "_ = %s\n", name)
		}
	}
	b.WriteString(strings.Repeat("}\n", len(frags)))
	b.WriteString("return nil\n}\n")
	return b.String()
}

var packageClause = regexp.MustCompile(`(?m)^package \w+`)

func TestDocSnippetsCompile(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md"}, pages...)

	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	addFile := func(pkg, src string) {
		real := filepath.Join(tmp, pkg+".go")
		if err := os.WriteFile(real, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(root, "zz_docsnippets", pkg, "snippet.go")] = real
		pkgs = append(pkgs, "./zz_docsnippets/"+pkg)
	}
	count := 0
	for i, page := range pages {
		var frags []docSnippet
		for j, s := range docSnippets(t, page) {
			count++
			if packageClause.MatchString(s.code) {
				pkg := fmt.Sprintf("file%d_%d", i, j)
				src := packageClause.ReplaceAllString(s.code, "package "+pkg)
				addFile(pkg, fmt.Sprintf("//line %s:%d\n%s", s.page, s.line, src))
				continue
			}
			frags = append(frags, s)
		}
		if len(frags) > 0 {
			addFile(fmt.Sprintf("page%d", i), fragmentsFile(t, fmt.Sprintf("page%d", i), frags))
		}
	}
	if count == 0 {
		t.Fatal("no ```go blocks found in README.md or docs/*.md")
	}
	if t.Failed() {
		return
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, js, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("the documentation's Go snippets do not compile (%v); positions are page:line:\n%s", err, out.String())
	}
}
