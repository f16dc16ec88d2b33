package main

import (
	"bytes"
	"os"
	"sync"
)

// selfCommand is how printed reproduce lines invoke this program: `go run
// ./cmd/deliverysim` inside a checkout of the project (where the source
// is what the user is changing), and plain `deliverysim` anywhere else,
// where only an installed binary (go install ./cmd/deliverysim) works.
var selfCommand = sync.OnceValue(func() string {
	mod, err := os.ReadFile("go.mod")
	if err == nil && bytes.HasPrefix(mod, []byte("module github.com/deliverysim/deliverysim\n")) {
		if _, err := os.Stat("cmd/deliverysim/main.go"); err == nil {
			return "go run ./cmd/deliverysim"
		}
	}
	return "deliverysim"
})
