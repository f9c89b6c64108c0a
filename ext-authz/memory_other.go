//go:build !linux

package main

// releaseStartupPages is a no-op outside Linux.
func releaseStartupPages() (int, error) { return 0, nil }
