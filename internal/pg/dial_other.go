//go:build !linux

package pg

import "time"

func setUserTimeout(uintptr, time.Duration) error { return nil }
