package main

import (
	"os"
	"strings"
	"testing"
)

// TestTheREADMEShowsThisProgram keeps the README's library example true: it
// must be this program, word for word.
func TestTheREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), "```go\n// Command leader")
	if start < 0 {
		t.Fatal("the README has no ```go block starting with // Command leader")
	}
	block := string(readme[start+len("```go\n"):])
	block = block[:strings.Index(block, "```")]
	if block != string(program) {
		t.Errorf("the README's program differs from examples/leader/main.go; copy main.go into the README")
	}
}
