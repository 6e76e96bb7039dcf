// A Go program that writes a heap profile with known live allocations:
// 3 x 1 MiB from allocA and 5 x 64 KiB from allocB (every allocation sampled).

package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

var keep [][]byte

//go:noinline
func allocA() { keep = append(keep, make([]byte, 1<<20)) }

//go:noinline
func allocB() { keep = append(keep, make([]byte, 64<<10)) }

func main() {
	runtime.MemProfileRate = 1
	for i := 0; i < 3; i++ {
		allocA()
	}
	for i := 0; i < 5; i++ {
		allocB()
	}
	runtime.GC()
	f, _ := os.Create(os.Args[1])
	pprof.WriteHeapProfile(f)
	f.Close()
}
