package watch_test

import "encoding/json"

var jsonUnmarshal, jsonMarshal = json.Unmarshal, json.Marshal
