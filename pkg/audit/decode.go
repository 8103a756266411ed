package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Object is one object of a manifest.
type Object struct {
	// Source is "<name>:<line>", the line its YAML document (or JSON value) starts on.
	Source string
	// Ref names it.
	Ref Ref
	// Value is the typed object (one of the types Inventory.Add takes), nil for a kind the
	// audit does not read.
	Value any
}

// readKinds are the kinds the audit reads, by "group/Kind", each with its type.
var readKinds = map[string]func() any{
	"/Pod":                        func() any { return &corev1.Pod{} },
	"/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"/PersistentVolume":           func() any { return &corev1.PersistentVolume{} },
	"/PersistentVolumeClaim":      func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/Deployment":             func() any { return &appsv1.Deployment{} },
	"apps/StatefulSet":            func() any { return &appsv1.StatefulSet{} },
	"apps/DaemonSet":              func() any { return &appsv1.DaemonSet{} },
	"apps/ReplicaSet":             func() any { return &appsv1.ReplicaSet{} },
	"batch/Job":                   func() any { return &batchv1.Job{} },
	"batch/CronJob":               func() any { return &batchv1.CronJob{} },
	"storage.k8s.io/StorageClass": func() any { return &storagev1.StorageClass{} },
}

// maxManifestBytes bounds one input: manifests are small, and a stray binary or log file
// should be an error, not a slow read of gigabytes.
const maxManifestBytes = 64 << 20

// ReadManifest reads one input of at most maxManifestBytes from r.
func ReadManifest(name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB: not a manifest", name, maxManifestBytes>>20)
	}
	return data, nil
}

// Decode reads the objects of one manifest: multi-document YAML, or JSON (one or more
// values, each an object or an array of objects); a v1 List's items are read as objects.
// An error names the input and, where the parser says, the line.
func Decode(name string, data []byte) ([]Object, error) {
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB: not a manifest", name, maxManifestBytes>>20)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return decodeJSON(name, data)
	}
	var out []Object
	for _, d := range splitYAML(data) {
		js, err := yaml.YAMLToJSON(d.text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: not YAML: %s", name, yamlErrorLine(err, d.line), yamlErrorText(err))
		}
		if t := bytes.TrimSpace(js); bytes.Equal(t, []byte("null")) || len(t) == 0 {
			continue // an empty document: comments only
		}
		objs, err := decodeObject(fmt.Sprintf("%s:%d", name, d.line), js)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// document is one YAML document and the line (from 1) it starts on.
type document struct {
	text []byte
	line int
}

// splitYAML splits a multi-document YAML stream on its "---" lines, keeping each
// document's first line for messages. A "---" line's content after the marker ("--- {a:
// 1}") belongs to the next document; "..." (document end) lines are dropped.
func splitYAML(data []byte) []document {
	var docs []document
	cur := document{line: 1}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for i, l := range lines {
		s := strings.TrimRight(string(l), "\r\n")
		switch {
		case s == "---" || strings.HasPrefix(s, "--- ") || strings.HasPrefix(s, "---\t"):
			docs = append(docs, cur)
			cur = document{line: i + 1, text: []byte(strings.TrimLeft(strings.TrimPrefix(s, "---"), " \t") + "\n")}
			if strings.TrimSpace(string(cur.text)) == "" {
				cur = document{line: i + 2}
			}
		case s == "...":
		default:
			cur.text = append(cur.text, l...)
		}
	}
	return append(docs, cur)
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlErrorLine is the line of the input a YAML error points to (the parser counts from
// the document's first line), or the document's first line.
func yamlErrorLine(err error, docLine int) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n > 0 {
			return docLine + n - 1
		}
	}
	return docLine
}

// yamlErrorText is the parser's message without its prefixes and line (which the caller
// puts in front).
func yamlErrorText(err error) string {
	s := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	s = strings.TrimPrefix(s, "yaml: ")
	return yamlLine.ReplaceAllString(strings.TrimPrefix(s, "unmarshal errors:\n  "), "")
}

// decodeJSON reads a stream of JSON values.
func decodeJSON(name string, data []byte) ([]Object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []Object
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			line := lineAt(data, dec.InputOffset())
			var se *json.SyntaxError
			if errors.As(err, &se) {
				line = lineAt(data, se.Offset)
			}
			return nil, fmt.Errorf("%s:%d: not JSON: %v", name, line, err)
		}
		// The value ends at the decoder's offset.
		start := lineAt(data, dec.InputOffset()-int64(len(raw)))
		values := []json.RawMessage{raw}
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
			if err := json.Unmarshal(raw, &values); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, start, err)
			}
		}
		for _, v := range values {
			objs, err := decodeObject(fmt.Sprintf("%s:%d", name, start), v)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
	}
}

// lineAt is the line (from 1) of byte offset off of data.
func lineAt(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// decodeObject reads one object (JSON) read at source: a kind the audit reads into its
// type, a v1 List item by item, any other kind as a skipped object.
func decodeObject(source string, js []byte) ([]Object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := utiljson.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("%s: not a Kubernetes object: %v", source, err)
	}
	if head.Kind == "" || head.APIVersion == "" {
		return nil, fmt.Errorf("%s: not a Kubernetes object: no kind or apiVersion", source)
	}
	group, _, _ := strings.Cut(head.APIVersion, "/")
	if !strings.Contains(head.APIVersion, "/") {
		group = ""
	}
	if group == "" && head.Kind == "List" {
		var out []Object
		for _, item := range head.Items {
			objs, err := decodeObject(source, item)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	ref := Ref{Kind: head.Kind, Namespace: head.Metadata.Namespace, Name: head.Metadata.Name}
	newObj := readKinds[group+"/"+head.Kind]
	if newObj == nil {
		return []Object{{Source: source, Ref: ref}}, nil
	}
	obj := newObj()
	if err := utiljson.Unmarshal(js, obj); err != nil {
		return nil, fmt.Errorf("%s: %s %s: %v", source, head.Kind, head.Metadata.Name, err)
	}
	return []Object{{Source: source, Ref: ref, Value: obj}}, nil
}

// AddManifest decodes one manifest (Decode) and adds its objects.
func (inv *Inventory) AddManifest(name string, data []byte) error {
	objs, err := Decode(name, data)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.Value == nil {
			inv.AddSkipped(o.Source, o.Ref)
			continue
		}
		if err := inv.Add(o.Source, o.Value); err != nil {
			return err
		}
	}
	return nil
}
