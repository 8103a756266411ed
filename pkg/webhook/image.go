package webhook

import (
	"fmt"
	"regexp"
	"strings"
)

// The grammar of an image reference, as the container runtimes and the distribution project
// define it (github.com/distribution/reference). It is repeated here rather than imported
// because that module is not in our module graph, and a strict check at admission time gives
// the user a clear 400 instead of a pod stuck in InvalidImageName.
const (
	refAlphanumeric  = `[a-z0-9]+`
	refSeparator     = `(?:[._]|__|[-]+)`
	refPathComponent = refAlphanumeric + `(?:` + refSeparator + refAlphanumeric + `)*`
	refDomainLabel   = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	refDomainName    = refDomainLabel + `(?:\.` + refDomainLabel + `)*`
	refIPv6          = `\[[a-fA-F0-9:]+\]`
	refDomain        = `(?:` + refDomainName + `|` + refIPv6 + `)(?::[0-9]+)?`
	refName          = `(?:` + refDomain + `/)?` + refPathComponent + `(?:/` + refPathComponent + `)*`
	refTag           = `[\w][\w.-]{0,127}`
	refDigest        = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[[:xdigit:]]{32,}`
)

var imageReferenceRE = regexp.MustCompile(`^(` + refName + `)(?::` + refTag + `)?(?:@` + refDigest + `)?$`)

// maxImageNameLength is the distribution limit on the name part (without tag and digest).
const maxImageNameLength = 255

// validateImageReference checks that ref is a well-formed image reference such as
// "gcr.io/project/gcsfuse:v1" or "registry:5000/img@sha256:<hex>".
func validateImageReference(ref string) error {
	if ref == "" {
		return fmt.Errorf("image reference is empty")
	}
	if strings.TrimSpace(ref) != ref {
		return fmt.Errorf("image reference has leading or trailing spaces")
	}
	m := imageReferenceRE.FindStringSubmatch(ref)
	if m == nil {
		return fmt.Errorf("not a valid image reference (expected [registry[:port]/]name[:tag][@digest], lower-case name)")
	}
	if len(m[1]) > maxImageNameLength {
		return fmt.Errorf("image name is longer than %d characters", maxImageNameLength)
	}
	return nil
}
