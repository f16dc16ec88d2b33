package pgschema

import "testing"

// The old-style names, as the old makers produced them (git history:
// internal/pgtest uniqueName, bench uniqueSchema, cmd/deliverysim
// schemaName), and near misses that are not the project's.
func TestParseLegacy(t *testing.T) {
	for name, want := range map[string]string{
		"t_testpostgresconformance_contract_4242_17_0a1b2c": "legacy-test",
		"t__99_1_ffffff":                 "legacy-test", // an empty test name
		"bench_4242_0a1b2c3d":            "legacy-bench",
		"dsim_42_4242_3_0a1b2c":          "legacy-run",
		"t_orders":                       "",
		"t_orders_2024_01_archive":       "",
		"t_x_1_2_0a1b2g":                 "",
		"t_x_1_2_0a1b2c3d":               "",
		"bench_baseline":                 "",
		"bench_4242_0a1b2c":              "",
		"dsim_run_1795473721_1_2_abcdef": "", // a current name: Parse's, not legacy
		"dsim_42_4242_3_0a1b2c_extra":    "",
		"T_X_1_2_0A1B2C":                 "",
		"public":                         "",
	} {
		kind, ok := ParseLegacy(name)
		if kind != want || ok != (want != "") {
			t.Errorf("ParseLegacy(%q) = %q, %v; want %q", name, kind, ok, want)
		}
	}
}
