// Package service holds the one start/stop pattern every background service of Strata
// follows (the audit chainer, the erasure sweeper, the access-log flusher, the LISTEN
// loops), and the test signals those services fire so tests wait for an event instead of
// sleeping. It is a leaf: it imports nothing of ours. River's rivershared/startstop and
// testsignal are the model.
package service
