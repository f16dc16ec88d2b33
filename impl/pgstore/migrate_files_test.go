package pgstore

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/deliverysim/deliverysim/migrations"
)

// TestMigrationFilesAreAtomic keeps every migration file runnable as one
// implicit transaction, which repairDirty relies on to tell a committed
// migration from one that left no trace. Explicit transaction control
// and statements Postgres refuses inside a transaction block would each
// let a migration stop halfway.
func TestMigrationFilesAreAtomic(t *testing.T) {
	forbidden := regexp.MustCompile(`(?im)^\s*(BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION|SAVEPOINT|VACUUM)\b|\bCONCURRENTLY\b|\bALTER\s+TYPE\b.*\bADD\s+VALUE\b`)
	comment := regexp.MustCompile(`--[^\n]*`)
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no embedded migrations (%v)", err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		if m := forbidden.Find(comment.ReplaceAll(b, nil)); m != nil {
			t.Errorf("%s: %q cannot run inside one implicit transaction; a crash mid-migration would leave a half-applied schema that Migrate cannot repair", f, m)
		}
	}
}
