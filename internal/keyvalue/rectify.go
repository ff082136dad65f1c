package keyvalue

import "context"

// Rectify writes a corrected value for an entry on the data subject's behalf (GDPR Art. 16):
// exactly a put, except that the history records op "rectify", so the correction is told
// apart from the agent's own writes. The same cache protocol and If-Match rules apply.
func (s *Store) Rectify(ctx context.Context, in WriteInput) (KVEntry, bool, error) {
	if err := s.checkTarget(in.Namespace, in.Key, in.Scope); err != nil {
		return KVEntry{}, false, err
	}
	if err := s.CheckValue("body.value", in.Value); err != nil {
		return KVEntry{}, false, err
	}
	return s.write(ctx, in, "rectify")
}
