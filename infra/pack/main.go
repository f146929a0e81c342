// Command pack builds the Functions deployment zip: host.json, the handler
// binary and one folder per function with its function.json, all at the zip
// root, which is the layout the Functions host expects.
package main

import (
	"archive/zip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	root := flag.String("root", ".", "repository root (holds host.json and functions/)")
	handler := flag.String("handler", "dist/handler", "the linux/amd64 handler binary")
	out := flag.String("o", "dist/fleet-functions.zip", "zip to write")
	dir := flag.String("dir", "", "write the same layout into this directory instead of a zip (for `func start`)")
	flag.Parse()
	var err error
	if *dir != "" {
		err = stage(*root, *handler, *dir)
		*out = *dir
	} else {
		err = pack(*root, *handler, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
	fmt.Println("pack: wrote", *out)
}

// stage copies the app layout into dir, where Azure Functions Core Tools
// can run it with `func start`.
func stage(root, handler, dir string) error {
	es, err := Entries(root, handler)
	if err != nil {
		return err
	}
	for _, e := range es {
		dst := filepath.Join(dir, filepath.FromSlash(e.dst))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyFile(e.src, dst, e.mode); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// entry is one file of the zip: where it comes from, where it goes, its mode.
type entry struct {
	src, dst string
	mode     os.FileMode
}

// Entries lists the zip's content in a stable order.
func Entries(root, handler string) ([]entry, error) {
	es := []entry{
		{filepath.Join(root, "host.json"), "host.json", 0o644},
		{handler, "handler", 0o755},
	}
	fns, err := filepath.Glob(filepath.Join(root, "functions", "*", "function.json"))
	if err != nil {
		return nil, err
	}
	if len(fns) == 0 {
		return nil, errors.New("no functions/*/function.json found")
	}
	sort.Strings(fns)
	for _, f := range fns {
		name := filepath.Base(filepath.Dir(f))
		es = append(es, entry{f, name + "/function.json", 0o644})
	}
	return es, nil
}

func pack(root, handler, out string) error {
	es, err := Entries(root, handler)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	for _, e := range es {
		if err := add(zw, e); err != nil {
			f.Close()
			os.Remove(tmp)
			return err
		}
	}
	if err := errors.Join(zw.Close(), f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	// Rename last, so a failed run never leaves a half-written zip behind.
	return os.Rename(tmp, out)
}

func add(zw *zip.Writer, e entry) error {
	src, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer src.Close()
	h := &zip.FileHeader{Name: e.dst, Method: zip.Deflate}
	h.SetMode(e.mode)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, src)
	return err
}
