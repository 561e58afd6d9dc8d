// Package bpfasm builds the instruction list of a hand-assembled BPF
// program (earlydrop's and steer's socket filters) from pieces: single
// instructions and the sequences the program's helpers return.
package bpfasm

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// Program is an instruction list built in order.
type Program struct {
	asm.Instructions
}

// Add appends each piece, an asm.Instruction or asm.Instructions, in
// order. Any other type is a mistake in the assembler code and panics.
func (p *Program) Add(pieces ...any) {
	for _, piece := range pieces {
		switch v := piece.(type) {
		case asm.Instruction:
			p.Instructions = append(p.Instructions, v)
		case asm.Instructions:
			p.Instructions = append(p.Instructions, v...)
		default:
			panic(fmt.Sprintf("bpfasm: %T is not an instruction", piece))
		}
	}
}
