package console

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOverdueAndTimes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Hour).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)
	require.True(t, overdue(map[string]any{"status": "running", "deadline": past}, now))
	require.True(t, overdue(map[string]any{"status": "failed", "deadline": past}, now))
	require.False(t, overdue(map[string]any{"status": "completed", "deadline": past}, now))
	require.False(t, overdue(map[string]any{"status": "pending", "deadline": future}, now))
	h := string(when("2026-12-02T07:15:06.5+01:00"))
	require.Equal(t, `<time datetime="2026-12-02T06:15:06.5Z" title="2026-12-02 06:15:06 UTC">2026-12-02 06:15:06 UTC</time>`, h)
	require.Equal(t, "&lt;b&gt;", string(when("<b>")), "not a time: escaped text")
	require.Equal(t, "—", string(when(nil)))
}

func TestDiffJSON(t *testing.T) {
	t.Parallel()
	d := diffJSON(map[string]any{"version": 1.0, "state": map[string]any{"a": 1.0, "b": "x"}},
		map[string]any{"version": 2.0, "state": map[string]any{"a": 2.0, "c": true}})
	var lines []string
	for _, c := range d {
		lines = append(lines, c.Path+" "+c.Kind+" "+c.Before+" "+c.After)
	}
	require.Equal(t, "state.a changed 1 2|state.b removed \"x\" |state.c added  true", strings.Join(lines, "|"))
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"/console/jobs?x=1": "/console/jobs?x=1", "https://evil/": "",
		"//evil/console/": "", "/console/..\\evil": "", "/consolex": "", "": ""} {
		require.Equal(t, want, safeNext(in), in)
	}
}

// TestNoHandBuiltHTML: stored text reaches a page only through html/template's contextual
// escaping. A template.HTML conversion (or HTMLAttr, JS, CSS, URL…) bypasses it, so the only
// one allowed is when's, which converts what the engine itself rendered.
func TestNoHandBuiltHTML(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			ast.Inspect(d, func(n ast.Node) bool {
				sel, isSel := n.(*ast.SelectorExpr)
				if !isSel {
					return true
				}
				if x, isIdent := sel.X.(*ast.Ident); isIdent && x.Name == "template" &&
					slices.Contains([]string{"HTML", "HTMLAttr", "JS", "JSStr", "CSS", "URL", "Srcset"}, sel.Sel.Name) {
					inWhen := ok && fn.Name.Name == "when" && sel.Sel.Name == "HTML"
					require.True(t, inWhen, "%s: template.%s outside when(): render stored text through a template instead",
						fset.Position(sel.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
}

func TestJSONShownAsWritten(t *testing.T) {
	t.Parallel()
	p := `<img src=x onerror="alert(1)">`
	require.Contains(t, prettyJSON(map[string]any{"q": p}), `"<img src=x onerror=\"alert(1)\">"`, "the template escapes it, not JSON")
	require.Equal(t, `{"q":"<b>&"}`, compact(map[string]any{"q": "<b>&"}))
	require.Equal(t, `<time datetime="2026-12-02T06:15:06Z" title="2026-12-02 06:15:06 UTC">2026-12-02 06:15:06 UTC</time>`,
		string(when("2026-12-02T06:15:06Z")))
}

func TestReceiptInPlainWords(t *testing.T) {
	t.Parallel()
	e := map[string]any{
		"counts": map[string]any{
			"semantic":    map[string]any{"memories": 1.0, "versions": 2.0, "scope_indexes": 1.0},
			"working":     map[string]any{"redis_keys": 4.0, "turns": 3.0},
			"idempotency": map[string]any{"records": 0.0},
			"future":      map[string]any{"things": 5.0},
		},
		"verification": map[string]any{"clean": false, "remaining": map[string]any{
			"semantic.memories": 0.0, "working.redis_sessions": 1.0, "keyvalue.kv_entries": 0.0}},
	}
	r := receipt(e)
	require.Equal(t, []receiptRow{
		{Tier: "Memories", Removed: "1 memory, 2 earlier versions", Verified: "nothing left", Clean: true},
		{Tier: "Conversations and working state", Removed: "3 conversation turns", Verified: "1 left", Clean: false},
	}, r.Rows)
	require.Equal(t, []string{"future.things: 5", "semantic.scope_indexes: 1", "working.redis_keys: 4"}, r.Internal)
	delete(e, "verification")
	require.Equal(t, "", receipt(e).Rows[0].Verified, "before verification")
}
