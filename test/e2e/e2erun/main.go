// Command e2erun prints the variables of one of CI's e2e runs (e2econfig.CI), one NAME=value
// per line, for hack/test.sh to pass to hack/e2e.sh:
//
//	go run ./test/e2e/e2erun release
//
// An unknown run, or one that does not validate, exits 2 with the reason.
package main

import (
	"fmt"
	"os"

	"github.com/gcsfuse-csi/gcsfuse-csi/test/e2e/e2econfig"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: e2erun NAME (one of CI's e2e runs, test/e2e/e2econfig)")
		os.Exit(2)
	}
	r, err := e2econfig.CIRun(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2erun:", err)
		os.Exit(2)
	}
	for _, kv := range r.Env() {
		fmt.Println(kv)
	}
}
