package answercap

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	openai "github.com/sashabaranov/go-openai"
)

// ProviderError is a failed call to the model or the embedder described by what happened:
// the HTTP status, the provider's error type and code when they are short tokens, or the
// rule its answer broke. Never the answer's body or message: a provider's error message
// may quote the request (turn content, memory text) back (issue 57).
type ProviderError struct {
	What   string // "model", "embedder"
	Status int    // the HTTP status the provider answered; 0 when it answered none
	Type   string // the provider's error type ("invalid_request_error"), if a short token
	Code   string // the provider's error code, if a short token
	Rule   string // what was wrong with a 200 answer ("is not valid JSON"), else ""
}

func (e *ProviderError) Error() string {
	what := e.What
	if what == "" {
		what = "model"
	}
	if e.Rule != "" {
		return "the " + what + "'s answer " + e.Rule
	}
	s := "the " + what + " answered HTTP " + strconv.Itoa(e.Status)
	switch {
	case e.Type != "" && e.Code != "":
		s += " (" + e.Type + ", " + e.Code + ")"
	case e.Type != "":
		s += " (" + e.Type + ")"
	case e.Code != "":
		s += " (" + e.Code + ")"
	}
	return s
}

// Transient reports a failure worth retrying later: rate limited, or the provider's own
// trouble (5xx, 408).
func (e *ProviderError) Transient() bool {
	return e.Rule == "" && (e.Status == 429 || e.Status == 408 || e.Status >= 500)
}

var token = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

func shortToken(s string) string {
	if token.MatchString(s) {
		return s
	}
	return ""
}

// Describe returns err with a go-openai error (whose text carries the provider's message
// or whole body) or a JSON decoding failure of the answer replaced by a *ProviderError;
// what names the provider ("model", "embedder"). Other errors (transport failures,
// deadlines, *TooLargeError) are returned as they are: they carry no answer text.
func Describe(what string, err error) error {
	if err == nil {
		return nil
	}
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return err
	}
	var ae *openai.APIError
	if errors.As(err, &ae) {
		pe := &ProviderError{What: what, Status: ae.HTTPStatusCode, Type: shortToken(ae.Type)}
		switch c := ae.Code.(type) {
		case string:
			pe.Code = shortToken(c)
		case float64:
			pe.Code = strconv.FormatFloat(c, 'f', -1, 64)
		}
		return pe
	}
	var re *openai.RequestError
	if errors.As(err, &re) {
		return &ProviderError{What: what, Status: re.HTTPStatusCode}
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		return &ProviderError{What: what, Status: 200, Rule: "is not valid JSON of the expected shape"}
	}
	return err
}

// Malformed is a *ProviderError for an answer that broke rule (formatted like Sprintf).
func Malformed(what, rule string, args ...any) error {
	return &ProviderError{What: what, Status: 200, Rule: fmt.Sprintf(rule, args...)}
}
