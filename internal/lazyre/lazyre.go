// Package lazyre is a regular expression compiled on its first use rather than at package
// init. The validation patterns of the packages the sidecar links (credentials, mount
// options, proxy settings, metric labels) cost ~10 ms of regexp compilation at every start
// of a process that may never match one (counted repetitions such as {1,253} compile to
// large programs), and a sidecar's start is on the path of every pod's first mount.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a regexp.Regexp compiled by its first method call. A bad expression panics
// there, as regexp.MustCompile would at init: each package's tests call its patterns.
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New returns expr, to be compiled at its first use.
func New(expr string) *Regexp { return &Regexp{expr: expr} }

func (r *Regexp) get() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
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
