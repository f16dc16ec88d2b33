package main

// cmdBench runs the benchmarks (issue 5; being written).
func (a *app) cmdBench(args []string) (int, error) {
	return 2, usagef("bench: not implemented yet")
}
