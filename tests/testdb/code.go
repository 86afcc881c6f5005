package testdb

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"switchboard/db"
)

// ChangedCode is a copy of the code package (db.Code) with, in one file, each old string of
// the old/new pairs replaced by its new one (once): a package that differs from the installed
// one, for the tests of the in-place install. The test fails if an old string is missing.
func ChangedCode(t testing.TB, file string, oldNew ...string) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(db.Code(), ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(db.Code(), path)
		if err != nil {
			return err
		}
		s := string(b)
		if path == file {
			for i := 0; i+1 < len(oldNew); i += 2 {
				if !strings.Contains(s, oldNew[i]) {
					t.Fatalf("%s has no %q", file, oldNew[i])
				}
				s = strings.Replace(s, oldNew[i], oldNew[i+1], 1)
			}
		}
		out[path] = &fstest.MapFile{Data: []byte(s)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
