// maskTable<> holds 64 bytes of ones followed by 64 bytes of zeros. The
// 32 bytes at maskTable<>+64-t (0 ≤ t ≤ 32) form a VMASKMOVPS/VMASKMOVPD mask
// that selects the first t bytes of a vector, and the 32 bytes after them
// select the next max(t-32, 0) bytes. Including files each get their own copy
// (the symbol is file-local).
DATA maskTable<>+0(SB)/8, $-1
DATA maskTable<>+8(SB)/8, $-1
DATA maskTable<>+16(SB)/8, $-1
DATA maskTable<>+24(SB)/8, $-1
DATA maskTable<>+32(SB)/8, $-1
DATA maskTable<>+40(SB)/8, $-1
DATA maskTable<>+48(SB)/8, $-1
DATA maskTable<>+56(SB)/8, $-1
DATA maskTable<>+64(SB)/8, $0
DATA maskTable<>+72(SB)/8, $0
DATA maskTable<>+80(SB)/8, $0
DATA maskTable<>+88(SB)/8, $0
DATA maskTable<>+96(SB)/8, $0
DATA maskTable<>+104(SB)/8, $0
DATA maskTable<>+112(SB)/8, $0
DATA maskTable<>+120(SB)/8, $0
GLOBL maskTable<>(SB), RODATA|NOPTR, $128
