//! What a lease asks for: `(mode, path)` pairs, the path arithmetic and checks the operations
//! need, and the notes that name them.
//!
//! Level 0: imports nothing of the crate.

use std::fmt;

/// The mode of one lock: `READ` is shared, `WRITE` is exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    /// The keyword the commands use.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "READ",
            Mode::Write => "WRITE",
        }
    }

    /// Parses a mode as the server reports it (case-insensitive, as its keywords are).
    pub(crate) fn parse(text: &[u8]) -> Option<Mode> {
        if text.eq_ignore_ascii_case(b"READ") {
            Some(Mode::Read)
        } else if text.eq_ignore_ascii_case(b"WRITE") {
            Some(Mode::Write)
        } else {
            None
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One requested lock: a mode on a path (which covers the path's whole subtree).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockRequest {
    pub mode: Mode,
    pub path: String,
}

impl LockRequest {
    pub fn read(path: impl Into<String>) -> LockRequest {
        LockRequest {
            mode: Mode::Read,
            path: path.into(),
        }
    }

    pub fn write(path: impl Into<String>) -> LockRequest {
        LockRequest {
            mode: Mode::Write,
            path: path.into(),
        }
    }
}

impl<P: Into<String>> From<(Mode, P)> for LockRequest {
    fn from((mode, path): (Mode, P)) -> LockRequest {
        LockRequest {
            mode,
            path: path.into(),
        }
    }
}

/// The path's segments as the server counts them: empty ones and `.` are dropped.
fn segments(path: &str) -> impl DoubleEndedIterator<Item = &str> {
    path.split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".")
}

/// `path` as an operation helper takes it: a file or folder, never the whole project. A helper
/// called with `""` or `/` most likely got a variable that was never set; locking the whole
/// project must be asked for in so many words, with `lock([(Mode::Write, "/")])`.
pub(crate) fn named<'a>(path: &'a str, what: &str) -> Result<&'a str, String> {
    if segments(path).next().is_none() {
        return Err(format!(
            "{what} {path:?} names the whole project, not a file or folder; to lock the whole \
             project, say so: lock([(Mode::Write, \"/\")]) or lock([(Mode::Read, \"/\")])"
        ));
    }
    Ok(path)
}

/// The segments of a path that an operation compares with another, `..` refused: the server
/// refuses it too, and it would make `/A/../A/C` look unrelated to `/A`.
fn normalised<'a>(path: &'a str, what: &str) -> Result<Vec<&'a str>, String> {
    let parts: Vec<&str> = segments(path).collect();
    if parts.contains(&"..") {
        return Err(format!(
            "{what} {path:?} has a '..' segment, which pathlock refuses"
        ));
    }
    Ok(parts)
}

/// The path that `path` gets inside `folder` when it is moved or copied there:
/// `folder/<last segment of path>`. Segments are split as the server splits them (empty ones and
/// `.` dropped), so `/A/C/` and `/A/./C` both end in `C`. Refused: the project root (it cannot
/// be moved or copied), an empty folder (the root is `/`), a folder that is `path` or inside it
/// (a folder into itself), and the folder `path` is already in (the target would be the source).
pub(crate) fn into_folder(path: &str, folder: &str, operation: &str) -> Result<String, String> {
    if folder.is_empty() {
        return Err("into_folder is empty: name a folder (\"/\" for the project root)".into());
    }
    let source = normalised(named(path, "path")?, "path")?;
    let target = normalised(folder, "into_folder")?;
    if target.starts_with(&source) {
        return Err(format!(
            "cannot {operation} {path} into {folder}: a folder cannot go into itself or its own \
             subtree"
        ));
    }
    if target == source[..source.len() - 1] {
        return Err(format!(
            "cannot {operation} {path} into {folder}: it is already in that folder (the target \
             would be the source itself)"
        ));
    }
    let last = source[source.len() - 1];
    Ok(format!(
        "/{}",
        [target.as_slice(), &[last]].concat().join("/")
    ))
}

/// Where `path` goes when it is renamed to `new_name`: the same folder, the new name. Anything
/// but one new name is refused: rename takes a name, and `move_into` changes folders.
pub(crate) fn sibling(path: &str, new_name: &str) -> Result<String, String> {
    let source = normalised(named(path, "path")?, "path")?;
    let current = source[source.len() - 1];
    if ["", ".", "..", current].contains(&new_name) || new_name.contains('/') {
        return Err(format!(
            "rename takes a name for {path} in the same folder, not {new_name:?}: a name has no \
             '/' and is not '', '.', '..' or the current name; to change folders, use move \
             (move_into)"
        ));
    }
    Ok(format!(
        "/{}",
        [&source[..source.len() - 1], &[new_name]]
            .concat()
            .join("/")
    ))
}

/// Checks the requests of `lock()`: at least one, and no empty path (the root is written `/`).
pub(crate) fn checked(requests: Vec<LockRequest>) -> Result<Vec<LockRequest>, String> {
    if requests.is_empty() {
        return Err("no locks requested".into());
    }
    if requests.iter().any(|request| request.path.is_empty()) {
        return Err("a lock path is empty; write \"/\" to lock the whole project".into());
    }
    Ok(requests)
}

/// The default note of `lock(requests)`.
pub(crate) fn described(requests: &[LockRequest]) -> String {
    let pairs: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r.mode, r.path))
        .collect();
    format!("lock {}", pairs.join(", "))
}

/// The longest default note, in bytes: well under the server's `pathlock.max-note-bytes` (256
/// by default), however long the paths it names.
pub(crate) const DEFAULT_NOTE_BYTES: usize = 100;

/// An operation's default note, `"move /A/C -> /B"`, cut to [`DEFAULT_NOTE_BYTES`].
pub(crate) fn default_note(mut words: String) -> String {
    if words.len() > DEFAULT_NOTE_BYTES {
        let mut end = DEFAULT_NOTE_BYTES - 3;
        while !words.is_char_boundary(end) {
            end -= 1;
        }
        words.truncate(end);
        words.push_str("...");
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_moved_into_a_folder_keeps_its_last_segment() {
        assert_eq!(into_folder("/A/C", "/B", "move").as_deref(), Ok("/B/C"));
        assert_eq!(into_folder("/A/C/", "/B/", "move").as_deref(), Ok("/B/C"));
        assert_eq!(into_folder("A/./C/.", "/", "move").as_deref(), Ok("/C"));
        assert!(into_folder("/a.txt", "", "move").is_err());
    }

    #[test]
    fn default_notes_are_cut_at_a_character_boundary() {
        assert_eq!(default_note("move /A -> /B".into()), "move /A -> /B");
        let long = default_note(format!("upload /{}", "é".repeat(300)));
        assert!(
            long.len() <= DEFAULT_NOTE_BYTES && long.ends_with("..."),
            "{long}"
        );
        assert!(long.starts_with("upload /éé"));
    }
}
