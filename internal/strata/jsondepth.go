package strata

// JSONDepth returns the deepest nesting of objects and arrays in a JSON text, scanning
// bytes (strings and their escapes skipped) without decoding, so a limit can be checked
// before a decoder recurses. Malformed input returns the deepest nesting it saw.
func JSONDepth(b []byte) int {
	depth, deepest := 0, 0
	inStr, esc := false, false
	for _, c := range b {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
