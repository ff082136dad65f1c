package episodic

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxExponent bounds the decimal exponent of a JSON number (after normalisation): numbers
// beyond ±1e1000 are refused, so a tiny body cannot ask Postgres for a million-digit numeric.
const MaxExponent = 1000

// DefaultMaxDepth is the nesting limit Canonicalize applies when given 0.
const DefaultMaxDepth = 64

// JSONError is a JSON text that cannot be canonicalised: malformed, or outside what Strata
// stores (duplicate keys, NUL characters, lone surrogates, invalid UTF-8, numbers out of
// range, nesting too deep). Offset is the byte offset in the input.
type JSONError struct {
	Offset int
	Msg    string
}

func (e *JSONError) Error() string { return fmt.Sprintf("%s (at byte %d)", e.Msg, e.Offset) }

// Canonicalize returns the canonical form of the JSON text data (docs/episodic.md):
//
//   - no insignificant whitespace;
//   - object members sorted by key, comparing keys as UTF-16 code units (RFC 8785);
//     duplicate keys are an error;
//   - strings NFC-normalised (keys too), written as UTF-8 with only `"`, `\` and control
//     characters escaped (\b \t \n \f \r, else \u00xx): "\u00e9", "é" and "e\u0301" are one
//     string;
//   - numbers by exact decimal value, written like ECMAScript's Number.prototype.toString
//     (RFC 8785) but without rounding to float64: 1, 1.0, 1e0 and 10e-1 are all "1";
//     -0 is "0"; 1e21 is "1e+21"; 0.000001 is "0.000001"; 1e-7 is "1e-7";
//   - true, false, null as they are.
//
// maxDepth bounds nesting (0 means DefaultMaxDepth).
func Canonicalize(data []byte, maxDepth int) ([]byte, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	c := &canon{in: data, maxDepth: maxDepth, out: make([]byte, 0, len(data))}
	c.ws()
	if err := c.value(); err != nil {
		return nil, err
	}
	c.ws()
	if c.pos != len(c.in) {
		return nil, c.fail("unexpected data after the JSON value")
	}
	return c.out, nil
}

// Fingerprint is the op fingerprint: the hex SHA-256 of the NFC-normalised op, a newline,
// and the canonical JSON of params. Absent or null params count as {}.
func Fingerprint(op string, params []byte) (string, error) {
	sum, err := fingerprint(op, params, 0)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum), nil
}

func fingerprint(op string, params []byte, maxDepth int) ([]byte, error) {
	if isNullOrAbsent(params) {
		params = []byte("{}")
	}
	cp, err := Canonicalize(params, maxDepth)
	if err != nil {
		return nil, err
	}
	return fingerprintCanonical(op, cp), nil
}

func fingerprintCanonical(op string, canonicalParams []byte) []byte {
	h := sha256.New()
	h.Write([]byte(norm.NFC.String(op)))
	h.Write([]byte{'\n'})
	h.Write(canonicalParams)
	return h.Sum(nil)
}

func isNullOrAbsent(b []byte) bool {
	s := strings.TrimSpace(string(b))
	return s == "" || s == "null"
}

type canon struct {
	in       []byte
	pos      int
	out      []byte
	depth    int
	maxDepth int
}

func (c *canon) fail(format string, args ...any) error {
	return &JSONError{Offset: c.pos, Msg: fmt.Sprintf(format, args...)}
}

func (c *canon) ws() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value() error {
	if c.pos >= len(c.in) {
		return c.fail("unexpected end of JSON")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		return c.array()
	case ch == '"':
		s, err := c.str()
		if err != nil {
			return err
		}
		c.out = appendString(c.out, s)
		return nil
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	default:
		return c.fail("invalid character %q looking for a JSON value", ch)
	}
}

func (c *canon) literal(lit string) error {
	if !strings.HasPrefix(string(c.in[c.pos:min(len(c.in), c.pos+len(lit))]), lit) {
		return c.fail("invalid literal (expected %s)", lit)
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

func (c *canon) enter() error {
	c.depth++
	if c.depth > c.maxDepth {
		return c.fail("nested deeper than %d levels", c.maxDepth)
	}
	return nil
}

func (c *canon) array() error {
	if err := c.enter(); err != nil {
		return err
	}
	c.pos++ // [
	c.out = append(c.out, '[')
	c.ws()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		c.depth--
		return nil
	}
	for i := 0; ; i++ {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.ws()
		if err := c.value(); err != nil {
			return err
		}
		c.ws()
		if c.pos >= len(c.in) {
			return c.fail("unexpected end of JSON in an array")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			c.depth--
			return nil
		default:
			return c.fail("expected , or ] in an array")
		}
	}
}

type member struct {
	key string
	val []byte
}

func (c *canon) object() error {
	if err := c.enter(); err != nil {
		return err
	}
	c.pos++ // {
	c.ws()
	var members []member
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '{', '}')
		c.depth--
		return nil
	}
	for {
		c.ws()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.fail("expected a string key in an object")
		}
		key, err := c.str()
		if err != nil {
			return err
		}
		c.ws()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.fail("expected : after an object key")
		}
		c.pos++
		c.ws()
		// Canonicalise the value into its own buffer, then sort the members.
		saved := c.out
		c.out = nil
		if err := c.value(); err != nil {
			return err
		}
		members = append(members, member{key: key, val: c.out})
		c.out = saved
		c.ws()
		if c.pos >= len(c.in) {
			return c.fail("unexpected end of JSON in an object")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] != '}' {
			return c.fail("expected , or } in an object")
		}
		c.pos++
		break
	}
	slices.SortFunc(members, func(a, b member) int { return compareUTF16(a.key, b.key) })
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return c.fail("duplicate object key %q", members[i].key)
		}
	}
	c.out = append(c.out, '{')
	for i, m := range members {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = appendString(c.out, m.key)
		c.out = append(c.out, ':')
		c.out = append(c.out, m.val...)
	}
	c.out = append(c.out, '}')
	c.depth--
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units (RFC 8785 §3.2.3).
func compareUTF16(a, b string) int {
	var ab, bb [2]uint16
	for len(a) > 0 && len(b) > 0 {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		a, b = a[na:], b[nb:]
		ua, ub := encodeUTF16(ra, &ab), encodeUTF16(rb, &bb)
		for i := 0; i < len(ua) && i < len(ub); i++ {
			if ua[i] != ub[i] {
				return int(ua[i]) - int(ub[i])
			}
		}
		if len(ua) != len(ub) {
			return len(ua) - len(ub)
		}
	}
	return len(a) - len(b)
}

func encodeUTF16(r rune, buf *[2]uint16) []uint16 {
	if r >= 0x10000 {
		r1, r2 := utf16.EncodeRune(r)
		buf[0], buf[1] = uint16(r1), uint16(r2)
		return buf[:2]
	}
	buf[0] = uint16(r)
	return buf[:1]
}

// str reads a JSON string at c.pos and returns its NFC-normalised value.
func (c *canon) str() (string, error) {
	c.pos++ // opening quote
	var sb strings.Builder
	for {
		if c.pos >= len(c.in) {
			return "", c.fail("unterminated string")
		}
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			c.pos++
			s := sb.String()
			if !norm.NFC.IsNormalString(s) {
				s = norm.NFC.String(s)
			}
			return s, nil
		case ch == '\\':
			r, err := c.escape()
			if err != nil {
				return "", err
			}
			sb.WriteRune(r)
		case ch < 0x20:
			if ch == 0 {
				return "", c.fail("NUL characters are not allowed")
			}
			return "", c.fail("control character %#x in a string must be escaped", ch)
		case ch < utf8.RuneSelf:
			sb.WriteByte(ch)
			c.pos++
		default:
			r, n := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError && n <= 1 {
				return "", c.fail("invalid UTF-8")
			}
			sb.WriteRune(r)
			c.pos += n
		}
	}
}

func (c *canon) escape() (rune, error) {
	if c.pos+1 >= len(c.in) {
		return 0, c.fail("unterminated escape")
	}
	e := c.in[c.pos+1]
	c.pos += 2
	switch e {
	case '"', '\\', '/':
		return rune(e), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r1, err := c.hex4()
		if err != nil {
			return 0, err
		}
		switch {
		case r1 == 0:
			c.pos -= 6
			return 0, c.fail(`NUL characters (\u0000) are not allowed`)
		case utf16.IsSurrogate(r1):
			if r1 >= 0xDC00 || c.pos+1 >= len(c.in) || c.in[c.pos] != '\\' || c.in[c.pos+1] != 'u' {
				return 0, c.fail("lone UTF-16 surrogate in \\u escape")
			}
			c.pos += 2
			r2, err := c.hex4()
			if err != nil {
				return 0, err
			}
			r := utf16.DecodeRune(r1, r2)
			if r == utf8.RuneError {
				return 0, c.fail("lone UTF-16 surrogate in \\u escape")
			}
			return r, nil
		}
		return r1, nil
	}
	c.pos -= 2
	return 0, c.fail("invalid escape \\%c", e)
}

func (c *canon) hex4() (rune, error) {
	if c.pos+4 > len(c.in) {
		return 0, c.fail("short \\u escape")
	}
	v, err := strconv.ParseUint(string(c.in[c.pos:c.pos+4]), 16, 32)
	if err != nil {
		return 0, c.fail("invalid \\u escape")
	}
	c.pos += 4
	return rune(v), nil
}

// appendString writes s as a canonical JSON string.
func appendString(out []byte, s string) []byte {
	const hexdigits = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '"':
			out = append(out, '\\', '"')
		case ch == '\\':
			out = append(out, '\\', '\\')
		case ch == '\b':
			out = append(out, '\\', 'b')
		case ch == '\f':
			out = append(out, '\\', 'f')
		case ch == '\n':
			out = append(out, '\\', 'n')
		case ch == '\r':
			out = append(out, '\\', 'r')
		case ch == '\t':
			out = append(out, '\\', 't')
		case ch < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexdigits[ch>>4], hexdigits[ch&0xF])
		default:
			out = append(out, ch)
		}
	}
	return append(out, '"')
}

// number reads a JSON number and writes its canonical form.
func (c *canon) number() error {
	start := c.pos
	neg := false
	if c.in[c.pos] == '-' {
		neg = true
		c.pos++
	}
	digitsFrom := func() string {
		s := c.pos
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
		return string(c.in[s:c.pos])
	}
	intPart := digitsFrom()
	if intPart == "" {
		return c.fail("invalid number")
	}
	if len(intPart) > 1 && intPart[0] == '0' {
		c.pos = start
		return c.fail("invalid number (leading zero)")
	}
	var frac string
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		c.pos++
		frac = digitsFrom()
		if frac == "" {
			return c.fail("invalid number (no digits after the decimal point)")
		}
	}
	exp := 0
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		c.pos++
		esign := 1
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			if c.in[c.pos] == '-' {
				esign = -1
			}
			c.pos++
		}
		ed := digitsFrom()
		if ed == "" {
			return c.fail("invalid number (no digits in the exponent)")
		}
		ed = strings.TrimLeft(ed, "0")
		if len(ed) > 7 {
			c.pos = start
			return c.fail("number out of range (|exponent| > %d)", MaxExponent)
		}
		if ed != "" {
			v, _ := strconv.Atoi(ed)
			exp = esign * v
		}
	}
	// value = digits × 10^e
	digits := strings.TrimLeft(intPart+frac, "0")
	e := exp - len(frac)
	if digits == "" {
		c.out = append(c.out, '0')
		return nil
	}
	trimmed := strings.TrimRight(digits, "0")
	e += len(digits) - len(trimmed)
	digits = trimmed
	k := len(digits)
	n := e + k // the decimal point sits after n digits: value = 0.digits × 10^n
	if n-1 > MaxExponent || n-1 < -MaxExponent {
		c.pos = start
		return c.fail("number out of range (|exponent| > %d)", MaxExponent)
	}
	if neg {
		c.out = append(c.out, '-')
	}
	switch {
	case k <= n && n <= 21:
		c.out = append(c.out, digits...)
		for i := 0; i < n-k; i++ {
			c.out = append(c.out, '0')
		}
	case 0 < n && n <= 21:
		c.out = append(c.out, digits[:n]...)
		c.out = append(c.out, '.')
		c.out = append(c.out, digits[n:]...)
	case -6 < n && n <= 0:
		c.out = append(c.out, '0', '.')
		for i := 0; i < -n; i++ {
			c.out = append(c.out, '0')
		}
		c.out = append(c.out, digits...)
	default:
		c.out = append(c.out, digits[0])
		if k > 1 {
			c.out = append(c.out, '.')
			c.out = append(c.out, digits[1:]...)
		}
		c.out = append(c.out, 'e')
		if n-1 >= 0 {
			c.out = append(c.out, '+')
		}
		c.out = strconv.AppendInt(c.out, int64(n-1), 10)
	}
	return nil
}
