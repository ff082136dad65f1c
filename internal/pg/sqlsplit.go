package pg

import "strings"

// SplitStatements splits SQL text into its statements at the semicolons outside string
// literals ('…', E'…'), quoted identifiers, dollar-quoted bodies ($$…$$, $tag$…$tag$) and
// comments. Statements are returned trimmed, without the semicolon; blank and comment-only
// ones are dropped. It is what runs a no-transaction migration one statement at a time
// (Postgres runs a multi-statement string as one implicit transaction) and what the
// migration lint reads; BEGIN ATOMIC bodies are not understood.
func SplitStatements(sql string) []string {
	var out []string
	start := 0
	code := false // the current statement has something besides comments
	emit := func(end int) {
		if s := strings.TrimSpace(sql[start:end]); s != "" && code {
			out = append(out, s)
		}
		code = false
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(sql)
			}
			continue
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			depth := 0
			for i < len(sql) {
				if strings.HasPrefix(sql[i:], "/*") {
					depth++
					i += 2
				} else if strings.HasPrefix(sql[i:], "*/") {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			continue
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !isIdent(sql[i-2]))
			i++
			for i < len(sql) {
				if escapes && sql[i] == '\\' {
					i += 2
					continue
				}
				if sql[i] == '\'' {
					if i+1 < len(sql) && sql[i+1] == '\'' {
						i += 2
						continue
					}
					break
				}
				i++
			}
			i++
		case c == '"':
			j := strings.IndexByte(sql[i+1:], '"')
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 2
			}
		case c == '$' && (i == 0 || !isIdent(sql[i-1])):
			j := i + 1
			for j < len(sql) && isIdent(sql[j]) && !(j == i+1 && sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			if j < len(sql) && sql[j] == '$' {
				tag := sql[i : j+1]
				if k := strings.Index(sql[j+1:], tag); k >= 0 {
					i = j + 1 + k + len(tag)
				} else {
					i = len(sql)
				}
			} else {
				i = j
			}
		case c == ';':
			emit(i)
			i++
			start = i
			continue
		default:
			i++
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			code = true
		}
	}
	emit(len(sql))
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
