// Package strata holds the nouns every tier shares: the tenant scope, the roles, the
// validation rules for client-chosen ids and text, and the sentinel errors that stores
// return and the HTTP layer maps to problems. It imports nothing of ours, so every package
// can depend on it without cycles (River's rivertype, WTF's root package).
package strata
