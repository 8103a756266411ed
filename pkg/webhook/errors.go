package webhook

import "fmt"

// badRequestError is a mistake in the pod the user submitted. The handler turns it into a
// denial with HTTP-level code 400 so that kubectl shows the user what to fix, instead of the
// webhook silently ignoring the value or failing closed with an opaque 500.
type badRequestError struct {
	msg string
}

func (e *badRequestError) Error() string { return e.msg }

// badRequest formats a badRequestError.
func badRequest(format string, args ...any) error {
	return &badRequestError{msg: fmt.Sprintf(format, args...)}
}

// badAnnotation reports a bad value of one of our annotations. The message always names the
// annotation and quotes the value, which is what the user needs to find the typo.
func badAnnotation(annotation, value, reason string) error {
	return badRequest("annotation %s: invalid value %q: %s", annotation, value, reason)
}
