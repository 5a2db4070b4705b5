package all_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGettingStartedSnippetBuilds: the Go program of docs/getting-started.md
// §3 ("Use it in your code") is complete, imports included, and vets
// against this module. It is built from a temporary directory inside the
// module (testdata, which ./... skips), so that it resolves the module's own
// packages.
func TestGettingStartedSnippetBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go tool")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "## 3. Use it in your code\n\n```go\n")
	if !ok {
		t.Fatal(`docs/getting-started.md has no "## 3. Use it in your code" Go block`)
	}
	src, _, _ := strings.Cut(after, "```")
	if !strings.HasPrefix(src, "package main\n") {
		t.Fatalf("the snippet is not a whole program (it must start with package main):\n%s", src)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("testdata", "snippet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove("testdata") // only when empty: the directory is not tracked
	})
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "vet", "./"+filepath.ToSlash(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the getting-started snippet: %v\n%s\nsnippet:\n%s", err, out, src)
	}
}
