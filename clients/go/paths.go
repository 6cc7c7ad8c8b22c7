package pathlock

import (
	"strings"
	"unicode/utf8"
)

// segments are the path's segments as the module counts them: split on "/", empty ones and "."
// dropped. ok is false when a segment is "..", which the module refuses.
func segments(path string) (segs []string, ok bool) {
	for _, s := range strings.Split(path, "/") {
		switch s {
		case "", ".":
		case "..":
			return nil, false
		default:
			segs = append(segs, s)
		}
	}
	return segs, true
}

func joined(segs []string) string {
	return "/" + strings.Join(segs, "/")
}

// named checks a path given to an operation helper: a file or folder, never the whole project.
// A helper called with "" or "/" most likely got a variable that was never set; locking the
// whole project is asked for in so many words, with Lock and "/".
func named(what, path string) ([]string, error) {
	segs, ok := segments(path)
	if !ok {
		return nil, invalid("%s %q has a '..' segment, which the server refuses; name the path without it", what, path)
	}
	if len(segs) == 0 {
		return nil, invalid("%s %q names the whole project, not a file or folder; to lock the whole "+
			`project, say so: Lock(ctx, []pathlock.Request{{Mode: pathlock.Write, Path: "/"}})`, what, path)
	}
	return segs, nil
}

// into is where path lands when it is moved or copied into folder: folder/<last segment of
// path>. Refused before anything is sent (the contract's operations): an empty or root path, an
// empty folder, a folder equal to the path or inside it (into itself), and the path's own
// parent (the target would be the source itself). Paths are compared segment by segment, so
// /A/CD is not inside /A/C.
func into(operation, path, folder string) (string, error) {
	from, err := named("path", path)
	if err != nil {
		return "", err
	}
	if folder == "" {
		return "", invalid(`%s: the folder is empty: name a folder ("/" for the project root)`, operation)
	}
	to, ok := segments(folder)
	if !ok {
		return "", invalid("%s: folder %q has a '..' segment, which the server refuses", operation, folder)
	}
	if len(to) >= len(from) && equal(to[:len(from)], from) {
		return "", invalid("%s of %q into %q: a folder cannot go into itself or its own subtree", operation, path, folder)
	}
	if equal(to, from[:len(from)-1]) {
		return "", invalid("%s of %q into %q: it is already in that folder (the target would be the source itself)", operation, path, folder)
	}
	return joined(append(to, from[len(from)-1])), nil
}

// renamed is where path goes when renamed to newName in the same folder. newName is one segment
// (the contract's operations): containing "/", empty, ".", "..", or the current name, it is
// refused, with a message that says rename takes a name and Move changes folders.
func renamed(path, newName string) (string, error) {
	from, err := named("path", path)
	if err != nil {
		return "", err
	}
	if newName == "" || newName == "." || newName == ".." || strings.Contains(newName, "/") ||
		newName == from[len(from)-1] {
		return "", invalid("rename takes a name: the new name of %q in its own folder, one segment "+
			"other than its name now, not %q; to change folders, move it (Move)", path, newName)
	}
	return joined(append(from[:len(from)-1:len(from)-1], newName)), nil
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checked checks Lock's requests: at least one, modes READ or WRITE (any case), no empty path
// (the root is written "/"), no "..". The root is allowed when it is written out.
func checked(requests []Request) ([]Request, error) {
	if len(requests) == 0 {
		return nil, invalid("no locks requested")
	}
	out := make([]Request, len(requests))
	for i, r := range requests {
		mode := Mode(strings.ToUpper(string(r.Mode)))
		if mode != Read && mode != Write {
			return nil, invalid("lock mode must be READ or WRITE, not %q", string(r.Mode))
		}
		if r.Path == "" {
			return nil, invalid(`lock path is empty; write "/" to lock the whole project`)
		}
		if _, ok := segments(r.Path); !ok {
			return nil, invalid("lock path %q has a '..' segment, which the server refuses", r.Path)
		}
		out[i] = Request{Mode: mode, Path: r.Path}
	}
	return out, nil
}

// described is the default note of Lock: "lock READ /X, WRITE /X/y".
func described(requests []Request) string {
	words := make([]string, len(requests))
	for i, r := range requests {
		words[i] = r.String()
	}
	return "lock " + strings.Join(words, ", ")
}

// defaultNoteBytes is the longest default note: well under the server's
// pathlock.max-note-bytes (256 by default), however long the paths it names.
const defaultNoteBytes = 100

// defaultNote is an operation's own note, "move /A/C -> /B", cut to defaultNoteBytes at a
// character boundary.
func defaultNote(words string) string {
	if len(words) <= defaultNoteBytes {
		return words
	}
	end := defaultNoteBytes - len("...")
	for end > 0 && !utf8.RuneStart(words[end]) {
		end--
	}
	return words[:end] + "..."
}
