//! Writing results: stdout tables, CSV and JSON files (or `-` for stdout).
//!
//! Everything the commands print goes through [`stdout`] (or the [`out!`] and
//! [`outln!`] macros over it), never `print!`: Rust ignores SIGPIPE, so a
//! closed stdout (`cairn sim | head -1`) makes `print!` panic, where these
//! return the `BrokenPipe` error. `main` turns that error into a quiet exit 0,
//! as ripgrep does ([`stdout_closed`] says the error was ours).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};

/// Where an output goes: a file, or stdout for `-`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Standard output.
    Stdout,
    /// A file, created or truncated.
    File(PathBuf),
}

impl Destination {
    /// `-` is stdout, anything else a path.
    pub fn parse(path: &Path) -> Self {
        if path.as_os_str() == "-" {
            Destination::Stdout
        } else {
            Destination::File(path.to_path_buf())
        }
    }

    /// Writes through `body`, naming the file in any error.
    pub fn write(
        &self,
        what: &str,
        body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        match self {
            Destination::Stdout => {
                let mut lock = stdout();
                body(&mut lock)
                    .and_then(|()| lock.flush())
                    .with_context(|| format!("writing {what} to stdout"))
            }
            Destination::File(path) => {
                let file = File::create(path)
                    .with_context(|| format!("creating {what} file {}", path.display()))?;
                let mut out = BufWriter::new(file);
                body(&mut out)
                    .and_then(|()| out.flush())
                    .with_context(|| format!("writing {what} to {}", path.display()))
            }
        }
    }
}

/// Checks, before any work, that `path` (given to `flag`) can be created:
/// stdout (`-`), or a name in an existing directory that is not itself a
/// directory.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    if path.is_dir() {
        anyhow::bail!("{flag} {}: a directory; name a file in it", path.display());
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(parent).with_context(|| {
        format!(
            "{flag} {}: directory {} does not exist; create it first",
            path.display(),
            parent.display()
        )
    })?;
    if !meta.is_dir() {
        anyhow::bail!(
            "{flag} {}: {} is not a directory",
            path.display(),
            parent.display()
        );
    }
    if meta.permissions().readonly() {
        anyhow::bail!(
            "{flag} {}: directory {} is read-only",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

/// Set when a write to stdout failed with `BrokenPipe`: the reader went away.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write to stdout found it closed (the reader of the pipe went
/// away); `main` then exits 0 without a message.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Locked stdout whose writes return their errors (never panic) and note a
/// closed pipe for [`stdout_closed`].
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

/// See [`stdout`].
pub struct Stdout(std::io::StdoutLock<'static>);

impl Stdout {
    fn note<T>(result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
        result
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Self::note(self.0.write(buf))
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        Self::note(self.0.write_all(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Self::note(self.0.flush())
    }
}

/// `print!` that returns `std::io::Result<()>` instead of panicking on a
/// closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(&mut $crate::output::stdout(), format_args!($($arg)*))
    };
}

/// `println!` that returns `std::io::Result<()>` instead of panicking on a
/// closed stdout.
macro_rules! outln {
    () => {
        std::io::Write::write_all(&mut $crate::output::stdout(), b"\n")
    };
    ($($arg:tt)*) => {{
        let mut stdout = $crate::output::stdout();
        std::io::Write::write_fmt(&mut stdout, format_args!($($arg)*))
            .and_then(|()| std::io::Write::write_all(&mut stdout, b"\n"))
    }};
}

pub(crate) use {out, outln};

/// A text table: first column left-aligned, the rest right-aligned, columns as
/// wide as their widest cell, two spaces apart.
pub fn table(out: &mut dyn Write, header: &[String], rows: &[Vec<String>]) -> std::io::Result<()> {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(String::len).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.len());
        }
    }
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate().take(columns) {
            if i == 0 {
                let _ = write!(line, "{cell:<w$}", w = widths[i]);
            } else {
                let _ = write!(line, "  {cell:>w$}", w = widths[i]);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Quotes a CSV field when it holds a comma, a quote or a line break.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("lru"), "lru");
        assert_eq!(csv_field("s3fifo:a=1,b=2"), "\"s3fifo:a=1,b=2\"");
        assert_eq!(csv_field("say \"hi\", ok"), "\"say \"\"hi\"\", ok\"");
    }

    #[test]
    fn tables_align_columns() {
        let mut out = Vec::new();
        let header = vec!["policy".to_owned(), "1%".to_owned()];
        table(&mut out, &header, &[vec!["lru".into(), "0.5000".into()]]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "policy      1%\nlru     0.5000\n"
        );
    }
}
