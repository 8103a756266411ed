package webhook

import "strings"

// patchOp is one RFC 6902 JSON Patch operation.
//
// The webhook emits small, targeted operations (insert one container, append one volume, set
// one annotation) rather than replacing whole lists: the pod is decoded with the API types
// this binary was built with, and re-serialising a whole container list would silently drop
// fields that a newer API server knows and we do not.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func addOp(path string, value any) patchOp { return patchOp{Op: "add", Path: path, Value: value} }

func replaceOp(path string, value any) patchOp {
	return patchOp{Op: "replace", Path: path, Value: value}
}

func removeOp(path string) patchOp { return patchOp{Op: "remove", Path: path} }

// escapePointer escapes one JSON Pointer reference token (RFC 6901), needed for annotation
// keys, which contain "/".
func escapePointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}
