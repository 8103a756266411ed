package main

import (
	"strings"
)

// ---- Markdown -------------------------------------------------------------------------

// code is s as inline code in a table cell.
func code(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return fence + pad + strings.ReplaceAll(s, "|", `\|`) + pad + fence
}

func codeOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return code(s)
}

// md is prose for a table cell: Markdown's special characters are escaped outside its
// code spans, and a pipe everywhere.
func md(s string) string {
	var b strings.Builder
	inCode := false
	for _, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|':
			b.WriteString(`\`)
		case r == '\n':
			r = ' '
		case !inCode && strings.ContainsRune(`*<[]\~`, r):
			b.WriteString(`\`)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// codes is a list of names as code, "" for none.
func codes(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = code(n)
	}
	return strings.Join(out, ", ")
}
