// Package migrations holds the PostgreSQL schema of deliverysim as numbered
// golang-migrate files, embedded so that the binary can migrate a database
// without the source tree.
package migrations

import "embed"

// FS holds every NNNNNN_name.{up,down}.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS
