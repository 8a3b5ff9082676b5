#include "textflag.h"

// func prefetch2(a, b unsafe.Pointer)
TEXT ·prefetch2(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ	a+0(FP), AX
	MOVQ	b+8(FP), BX
	PREFETCHT0	(AX)
	PREFETCHT0	(BX)
	RET

// func prefetch4(a, b, c, d unsafe.Pointer)
TEXT ·prefetch4(SB), NOSPLIT|NOFRAME, $0-32
	MOVQ	a+0(FP), AX
	MOVQ	b+8(FP), BX
	MOVQ	c+16(FP), CX
	MOVQ	d+24(FP), DX
	PREFETCHT0	(AX)
	PREFETCHT0	(BX)
	PREFETCHT0	(CX)
	PREFETCHT0	(DX)
	RET
