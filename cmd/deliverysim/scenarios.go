package main

// cmdScenarios lists the scenario files (issue 4; being written).
func (a *app) cmdScenarios(args []string) (int, error) {
	return 2, usagef("scenarios: not implemented yet")
}

// cmdMutants runs every known-bug variant (issue 4; being written).
func (a *app) cmdMutants(args []string) (int, error) {
	return 2, usagef("mutants: not implemented yet")
}
