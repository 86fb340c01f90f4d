//go:build !amd64 || noasm

package simd

func philox16(*[64]uint32, uint32, uint32, uint32, uint32, uint32, uint32) bool { return false }

func philox32(*[128]uint32, uint32, uint32, uint32, uint32, uint32, uint32) bool { return false }

func splitHalves([]uint32, []uint32) bool { return false }
