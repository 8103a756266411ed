// Package lazyre is a regular expression compiled on its first use rather than at package
// init. The validation patterns of the packages the sidecar links (credentials, mount
// options, proxy settings, metric labels) cost ~10 ms of regexp compilation at every start
// of a process that may never match one (counted repetitions such as {1,253} compile to
// large programs), and a sidecar's start is on the path of every pod's first mount.
//
// What init no longer checks, CompileAll does: every expression made with New in the
// process, for a test that imports the packages which hold them (test/layout).
package lazyre

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// Regexp is a regexp.Regexp compiled by its first method call. A bad expression panics
// there, and at every later call, naming the expression.
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
	err  error
}

var (
	allMu sync.Mutex
	all   []*Regexp
)

// New returns expr, to be compiled at its first use, and records it for CompileAll.
func New(expr string) *Regexp {
	r := &Regexp{expr: expr}
	allMu.Lock()
	all = append(all, r)
	allMu.Unlock()
	return r
}

// CompileAll compiles every expression made with New so far and returns their errors.
func CompileAll() (int, error) {
	allMu.Lock()
	rs := append([]*Regexp(nil), all...)
	allMu.Unlock()
	var errs []error
	for _, r := range rs {
		if err := r.compile(); err != nil {
			errs = append(errs, err)
		}
	}
	return len(rs), errors.Join(errs...)
}

func (r *Regexp) compile() error {
	r.once.Do(func() {
		r.re, r.err = regexp.Compile(r.expr)
		if r.err != nil {
			r.err = fmt.Errorf("lazyre: %q: %w", r.expr, r.err)
		}
	})
	return r.err
}

func (r *Regexp) get() *regexp.Regexp {
	if err := r.compile(); err != nil {
		panic(err)
	}
	return r.re
}

// String is the expression, without compiling it.
func (r *Regexp) String() string { return r.expr }

// MatchString is regexp.Regexp's.
func (r *Regexp) MatchString(s string) bool { return r.get().MatchString(s) }

// Match is regexp.Regexp's.
func (r *Regexp) Match(b []byte) bool { return r.get().Match(b) }

// FindStringSubmatch is regexp.Regexp's.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.get().FindStringSubmatch(s) }
