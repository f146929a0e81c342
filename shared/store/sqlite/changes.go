package sqlite

import (
	"os"
	"path/filepath"
	"time"
)

// Change markers let another process learn that a container changed without
// querying the database: after every successful write this store sets the
// modification time of <db>.changes/<container>. The local Functions host
// emulator watches the jobs marker to read the change feed only when jobs
// changed, so an idle fleet costs no store reads, and a heartbeat (a write
// to fleet_factories) does not wake the dispatch trigger.

// ChangeMarker is the file whose modification time moves whenever container
// changes. It exists once the store has been opened.
func (s *Store) ChangeMarker(container string) string {
	return filepath.Join(s.path+".changes", container)
}

// createMarkers makes the marker files of every table.
func (s *Store) createMarkers() error {
	if err := os.MkdirAll(s.path+".changes", 0o700); err != nil {
		return err
	}
	for name := range s.tables {
		f, err := os.OpenFile(s.ChangeMarker(name), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// changed moves t's marker. It is a wake-up hint, not the data: were a touch
// lost, the change would be seen at the next write or by the redispatch
// sweep, so a failure is ignored.
func (s *Store) changed(t *table) {
	now := time.Now()
	_ = os.Chtimes(s.ChangeMarker(t.name), now, now)
}
