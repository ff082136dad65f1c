package working

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzMergePatch checks RFC 7386 merge patches on arbitrary JSON: no panic, the result is
// encodable, applying the same patch twice changes nothing more, a null member is gone,
// and any other non-object member is taken as it is. applyPatch (what PATCH .../state
// runs) agrees with MergePatch and refuses non-objects instead of panicking.
func FuzzMergePatch(f *testing.F) {
	f.Add([]byte(`{"a":"b","c":{"d":"e","f":"g"}}`), []byte(`{"a":"z","c":{"f":null}}`))
	f.Add([]byte(`{"a":[1,2]}`), []byte(`{"a":{"b":null}}`))
	f.Add([]byte(`[1,2]`), []byte(`{"a":null}`))
	f.Add([]byte(`{}`), []byte(`{"a":{"bb":{"ccc":null}}}`))
	f.Add([]byte(`{"e":null}`), []byte(`"x"`))
	f.Fuzz(func(t *testing.T, target, patch []byte) {
		var tv, pv any
		if json.Unmarshal(target, &tv) != nil || json.Unmarshal(patch, &pv) != nil {
			return
		}
		once := MergePatch(deepCopy(tv), deepCopy(pv))
		b, err := json.Marshal(once)
		if err != nil {
			t.Fatalf("result not encodable: %v", err)
		}
		var again any
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatal(err)
		}
		twice := MergePatch(deepCopy(again), deepCopy(pv))
		if !reflect.DeepEqual(normalize(once), normalize(twice)) {
			t.Fatalf("not idempotent: %v then %v", once, twice)
		}
		if pm, ok := pv.(map[string]any); ok {
			rm := once.(map[string]any)
			for k, v := range pm {
				if v == nil {
					if _, there := rm[k]; there {
						t.Fatalf("member %q was patched with null but is still there", k)
					}
				} else if _, isObj := v.(map[string]any); !isObj && !reflect.DeepEqual(rm[k], v) {
					t.Fatalf("member %q = %v, patch said %v", k, rm[k], v)
				}
			}
		} else if !reflect.DeepEqual(once, pv) {
			t.Fatalf("a non-object patch replaces the target")
		}
		// The store's path: objects only, errors instead of panics.
		out, err := applyPatch(target, patch)
		_, tObj := tv.(map[string]any)
		_, pObj := pv.(map[string]any)
		if tObj && pObj && err == nil {
			var got any
			if json.Unmarshal(out, &got) != nil || !reflect.DeepEqual(normalize(got), normalize(once)) {
				t.Fatalf("applyPatch %s disagrees with MergePatch %v", out, once)
			}
		}
		if !pObj && err == nil {
			t.Fatalf("applyPatch accepted a non-object patch %s", patch)
		}
	})
}

func deepCopy(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func normalize(v any) any { return deepCopy(v) }
