//! What a lease asks for: `(mode, path)` pairs, and the path arithmetic the operations need.

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

/// The path that `path` gets inside `folder` when it is moved or copied there:
/// `folder/<last segment of path>`. `None` when `path` names the project root, which has no
/// last segment. Segments are split as the server splits them (empty ones and `.` dropped), so
/// `/A/C/` and `/A/./C` both end in `C`; the server normalises the joined result.
pub(crate) fn into_folder(path: &str, folder: &str) -> Option<String> {
    let last = path
        .split('/')
        .rfind(|segment| !segment.is_empty() && *segment != ".")?;
    Some(format!("{}/{}", folder.trim_end_matches('/'), last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_moved_into_a_folder_keeps_its_last_segment() {
        assert_eq!(into_folder("/A/C", "/B").as_deref(), Some("/B/C"));
        assert_eq!(into_folder("/A/C/", "/B/").as_deref(), Some("/B/C"));
        assert_eq!(into_folder("A/./C/.", "/").as_deref(), Some("/C"));
        assert_eq!(into_folder("/a.txt", "").as_deref(), Some("/a.txt"));
        assert_eq!(into_folder("/", "/B"), None);
        assert_eq!(into_folder("", "/B"), None);
    }
}
