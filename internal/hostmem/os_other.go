//go:build !linux

package hostmem

// osBudgets adds nothing outside Linux: only the Go memory limit applies.
func osBudgets(string, *budget) {}
