package bpfasm

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

func TestAddKeepsTheOrderOfInstructionsAndSequences(t *testing.T) {
	var p Program
	p.Add(asm.Mov.Imm(asm.R0, 1), asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Mov.Imm(asm.R0, 3)})
	p.Add(asm.Return())
	want := asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Mov.Imm(asm.R0, 2), asm.Mov.Imm(asm.R0, 3), asm.Return()}
	if len(p.Instructions) != len(want) {
		t.Fatalf("%d instructions, want %d:\n%v", len(p.Instructions), len(want), p.Instructions)
	}
	for i := range want {
		if p.Instructions[i].OpCode != want[i].OpCode || p.Instructions[i].Constant != want[i].Constant {
			t.Errorf("instruction %d: %v, want %v", i, p.Instructions[i], want[i])
		}
	}
}

func TestAddPanicsOnAnythingElse(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("adding an int: no panic")
		}
	}()
	var p Program
	p.Add(42)
}
