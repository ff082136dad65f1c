// Package readme holds the test that runs README.md's curl examples (the fenced blocks
// marked `sh curl-test`, in order) with bash against a live server, so the walkthrough a
// newcomer copies is known to work.
package readme
