package gdpr

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// Rectification is a correction made on a data subject's behalf (GDPR Art. 16).
type Rectification struct {
	Type            string            `json:"type" enum:"memory,kv"`
	UserID          string            `json:"user_id"`
	PreviousVersion int64             `json:"previous_version"`
	Memory          *semantic.Memory  `json:"memory,omitempty" doc:"The new version; the old one stays in the history, superseded."`
	KV              *keyvalue.KVEntry `json:"kv,omitempty" doc:"The entry; its history records op rectify."`
}

// RectifyRequest is what to correct: exactly one of Memory, KV.
type RectifyRequest struct {
	OrgID, UserID string
	Reason        string // kept on the corrected record, never in the audit log
	Memory        *MemoryCorrection
	KV            *KVCorrection
	// Who asks: the API key, its role and the request, for the record and the audit log.
	KeyID, Role, RequestID string
	At                     time.Time
}

// MemoryCorrection corrects a memory's current version: its text and/or metadata.
type MemoryCorrection struct {
	ID       string
	Text     *string
	Metadata map[string]any
}

// KVCorrection corrects the entry at namespace/key at the subject's user level, or at the
// agent or session level given (an entry written for the subject).
type KVCorrection struct {
	Namespace, Key     string
	AgentID, SessionID string
	Value              json.RawMessage
}

// Rectifier corrects memories and key-value entries on a data subject's behalf.
type Rectifier struct {
	Memories *semantic.Store
	KV       *keyvalue.Store
	// Embed embeds a corrected memory text (the rectifier never calls an embedder itself).
	Embed func(ctx context.Context, text string) ([]float32, error)
	Space semantic.Space
	// Pseudo pseudonymises the subject in the audit log.
	Pseudo *audit.Pseudonymizer
}

// Rectify corrects one record of the subject in tx (the request's transaction; the
// key-value cache is updated through afterCommit). A memory gets a new version whose
// metadata.rectification records when, by which key and why, and whose provenance agent
// is gdpr:rectification; a key-value entry gets a new version with history op rectify.
// The record must be the subject's (a FieldError otherwise). An audit record
// (action rectification) names the corrected entity with the subject's pseudonym.
func (rf *Rectifier) Rectify(ctx context.Context, tx pgx.Tx, afterCommit func(func()), in RectifyRequest) (Rectification, error) {
	out := Rectification{UserID: in.UserID}
	if (in.Memory == nil) == (in.KV == nil) { // the transport checks its body first
		return out, strata.Invalid("memory", "give exactly one of memory, kv")
	}
	if err := strata.CheckText("reason", in.Reason); err != nil {
		return out, err
	}
	var entityType, entityID string
	var newVersion int64
	if m := in.Memory; m != nil {
		nm, prev, err := rf.rectifyMemory(ctx, tx, in, m)
		if err != nil {
			return out, err
		}
		out.Type, out.PreviousVersion, out.Memory = "memory", prev, &nm
		entityType, entityID, newVersion = "memory", nm.RootID.String(), int64(nm.Version)
	} else {
		k := in.KV
		sc := strata.Scope{OrgID: in.OrgID, UserID: in.UserID, AgentID: k.AgentID, SessionID: k.SessionID}
		e, prev, err := rf.KV.Rectify(ctx, tx, afterCommit, keyvalue.WriteInput{Namespace: k.Namespace, Key: k.Key,
			Scope: sc, Value: k.Value, Actor: in.KeyID})
		if err != nil {
			return out, err
		}
		out.Type, out.PreviousVersion, out.KV = "kv", prev, &e
		entityType, entityID, newVersion = "kv", k.Namespace+"/"+k.Key+"@"+string(e.Level), e.Version
	}
	// The request itself is audited as action "rectify" by the unit of work; this record
	// names the corrected entity, so the entity's audit trail shows the rectification.
	if err := audit.Append(ctx, tx, audit.Entry{OrgID: in.OrgID, ActorKeyID: in.KeyID, ActorRole: in.Role,
		Action: "rectification", EntityType: entityType, EntityID: entityID, RequestID: in.RequestID,
		Subject: rf.Pseudo.Subject(in.OrgID, in.UserID), Status: 200,
		Details: map[string]any{"previous_version": out.PreviousVersion, "version": newVersion, "reason_given": in.Reason != ""}}); err != nil {
		return out, err
	}
	return out, nil
}

// rectifyMemory supersedes the subject's memory m.ID with the correction.
func (rf *Rectifier) rectifyMemory(ctx context.Context, tx pgx.Tx, in RectifyRequest, m *MemoryCorrection) (semantic.Memory, int64, error) {
	id, err := uuid.Parse(m.ID)
	if err != nil {
		return semantic.Memory{}, 0, strata.Invalid("memory.id", "must be a UUID")
	}
	cur, err := rf.Memories.Get(ctx, tx, in.OrgID, id)
	if err != nil {
		return semantic.Memory{}, 0, err
	}
	if cur.UserID != in.UserID {
		return semantic.Memory{}, 0, strata.Invalid("memory.id", "is not a memory of this data subject")
	}
	if m.Text == nil && m.Metadata == nil {
		return semantic.Memory{}, 0, strata.Invalid("memory", "give text and/or metadata to correct")
	}
	if m.Text != nil {
		if err := semantic.CheckText("memory.text", *m.Text); err != nil {
			return semantic.Memory{}, 0, err
		}
	}
	if err := semantic.CheckMetadata("memory.metadata", m.Metadata); err != nil {
		return semantic.Memory{}, 0, err
	}
	meta := map[string]any{}
	src := cur.Metadata
	if m.Metadata != nil {
		src = m.Metadata
	}
	for k, v := range src {
		meta[k] = v
	}
	meta["rectification"] = map[string]any{"at": in.At.UTC().Format(time.RFC3339Nano), "key_id": in.KeyID,
		"request_id": in.RequestID, "reason": in.Reason}
	patch := semantic.Patch{Text: m.Text, Metadata: meta,
		Provenance: semantic.Provenance{KeyID: in.KeyID, AgentID: "gdpr:rectification"}, Space: rf.Space}
	if patch.TextChanged(cur) {
		if patch.Vector, err = rf.Embed(ctx, *m.Text); err != nil {
			return semantic.Memory{}, 0, err
		}
	}
	nm, err := rf.Memories.Supersede(ctx, tx, in.OrgID, id, patch)
	if err != nil {
		return semantic.Memory{}, 0, err
	}
	return nm, int64(cur.Version), nil
}
