//go:build !noasm

#include "textflag.h"

// func splitHalvesAVX2(dst *uint32, words *uint32, chunks int)
//
// Sixteen draws per chunk: the eight words at words, each split into its
// low and its high 16 bits (little-endian memory order, so the halves lie
// in draw order), zero-extended to 32 bits by VPMOVZXWD, eight at a time.
TEXT ·splitHalvesAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ words+8(FP), SI
	MOVQ chunks+16(FP), CX
	TESTQ CX, CX
	JLE done

loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER

done:
	RET
