package strata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MalformedJSON describes why data is not JSON and where, for a client to find it:
// "malformed JSON at line 3, column 7 (byte 42): invalid character '}' looking for
// beginning of object key string". err is what encoding/json answered for data; one
// without a position is described as it is.
func MalformedJSON(data []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return "malformed JSON: " + err.Error()
	}
	at := int(min(max(se.Offset-1, 0), int64(len(data))))
	before := data[:at]
	line := bytes.Count(before, []byte("\n")) + 1
	col := at - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return fmt.Sprintf("malformed JSON at line %d, column %d (byte %d): %s", line, col, se.Offset, se.Error())
}
