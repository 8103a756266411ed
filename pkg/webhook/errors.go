package webhook

import "fmt"

// badRequestError is a mistake in the pod the user submitted. The handler turns it into a
// denial with HTTP-level code 400 so that kubectl shows the user what to fix, instead of the
// webhook silently ignoring the value or failing closed with an opaque 500.
type badRequestError struct {
	msg string
	// forbidden: the pod is well-formed, but asks for what its namespace may not have
	// (HTTP 403 instead of 400).
	forbidden bool
}

func (e *badRequestError) Error() string { return e.msg }

// httpCode is the denial's HTTP-level code.
func (e *badRequestError) httpCode() int32 {
	if e.forbidden {
		return 403
	}
	return 400
}

// forbidden is a badRequestError for a pod that asks for what its namespace may not have.
func forbidden(msg string) error {
	return &badRequestError{msg: msg, forbidden: true}
}

// badRequest formats a badRequestError.
func badRequest(format string, args ...any) error {
	return &badRequestError{msg: fmt.Sprintf(format, args...)}
}

// badAnnotation reports a bad value of one of our annotations. The message always names the
// annotation and quotes the value, which is what the user needs to find the typo.
func badAnnotation(annotation, value, reason string) error {
	return badRequest("annotation %s: invalid value %q: %s", annotation, value, reason)
}
