// Package secretscan helps tests prove that no secret reached a log, an Event or a flag.
package secretscan

import "strings"

// minPartLen is the shortest PEM line checked: shorter ones could match by chance.
const minPartLen = 20

// Parts splits a secret into what must never appear: a PEM private key into its base64
// lines (any one leaking is a leak), any other secret whole.
func Parts(s string) []string {
	if !strings.Contains(s, "PRIVATE KEY") {
		return []string{s}
	}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if len(l) > minPartLen && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}
