#include "textflag.h"

// func prefetch2(a, b unsafe.Pointer)
TEXT ·prefetch2(SB), NOSPLIT|NOFRAME, $0-16
	MOVD	a+0(FP), R0
	MOVD	b+8(FP), R1
	PRFM	(R0), PLDL1KEEP
	PRFM	(R1), PLDL1KEEP
	RET

// func prefetch4(a, b, c, d unsafe.Pointer)
TEXT ·prefetch4(SB), NOSPLIT|NOFRAME, $0-32
	MOVD	a+0(FP), R0
	MOVD	b+8(FP), R1
	MOVD	c+16(FP), R2
	MOVD	d+24(FP), R3
	PRFM	(R0), PLDL1KEEP
	PRFM	(R1), PLDL1KEEP
	PRFM	(R2), PLDL1KEEP
	PRFM	(R3), PLDL1KEEP
	RET
