//! Writing results: stdout tables, CSV and JSON files (or `-` for stdout).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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
                let stdout = std::io::stdout();
                let mut lock = stdout.lock();
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
