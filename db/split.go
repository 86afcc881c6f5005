package db

import "strings"

// splitStatements cuts SQL text into its statements at the semicolons outside quotes, dollar
// quotes and comments, so the install can run the code package one statement at a time. Each
// statement keeps its leading comments; empty ones are left out. SQL-standard bodies
// (BEGIN ATOMIC ... END) are not recognised: the package writes its bodies in dollar quotes.
func splitStatements(sql string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if s := strings.TrimSpace(sql[start:end]); s != "" && strings.TrimSpace(stripComments(s)) != "" {
			out = append(out, s)
		}
		start = end + 1
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == ';':
			emit(i)
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			// Block comments nest in PostgreSQL.
			depth := 0
			for ; i < len(sql); i++ {
				if strings.HasPrefix(sql[i:], "/*") {
					depth++
					i++
				} else if strings.HasPrefix(sql[i:], "*/") {
					depth--
					i++
					if depth == 0 {
						break
					}
				}
			}
		case c == '\'' || c == '"':
			// '' and "" inside are two quotes in a row: the loop closes and reopens.
			escapes := c == '\'' && i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !isIdent(sql[i-2]))
			for i++; i < len(sql) && sql[i] != c; i++ {
				if escapes && sql[i] == '\\' {
					i++
				}
			}
		case c == '$' && (i == 0 || !isIdent(sql[i-1])):
			// $tag$ ... $tag$ (a $1 parameter is not a tag: no closing $ after digits).
			j := i + 1
			for j < len(sql) && isIdent(sql[j]) && !(j == i+1 && sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			if j < len(sql) && sql[j] == '$' {
				tag := sql[i : j+1]
				if k := strings.Index(sql[j+1:], tag); k >= 0 {
					i = j + 1 + k + len(tag) - 1
				} else {
					i = len(sql)
				}
			}
		}
	}
	emit(len(sql))
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// stripComments removes the leading -- and /* */ comments of a statement (to classify it).
func stripComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "--"):
			if j := strings.IndexByte(s, '\n'); j >= 0 {
				s = s[j+1:]
			} else {
				return ""
			}
		case strings.HasPrefix(s, "/*"):
			depth, i := 0, 0
			for ; i < len(s); i++ {
				if strings.HasPrefix(s[i:], "/*") {
					depth++
					i++
				} else if strings.HasPrefix(s[i:], "*/") {
					depth--
					i++
					if depth == 0 {
						break
					}
				}
			}
			if i >= len(s) {
				return ""
			}
			s = s[i+1:]
		default:
			return s
		}
	}
}
