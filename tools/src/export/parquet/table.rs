//! One table of the dataset as it fills: its columns (declared once with [`table!`], which
//! gives the Parquet schema too), and the Parquet file of one trace it streams to — a page per
//! column every [`PAGE_ROWS`] rows, a row group every [`GROUP_ROWS`] — so memory stays bounded
//! however long the trace.
//!
//! Files carry the Parquet types only: what DuckDB, Spark and pyarrow read is the Parquet
//! schema, the contract `docs/data.md` states. Integers are signed 64-bit (device and rank
//! numbers 32-bit): unsigned Parquet types read as decimals in Spark.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;

use super::column::{Column, Zstd, PAGE_ROWS};

/// Rows in a row group (what DuckDB and Spark skip by, with each chunk's statistics).
const GROUP_ROWS: usize = 1024 * 1024;

/// Declares a table: a struct with one [`Column`] per column, in schema order, each
/// `name: "type" ["rest"] => Encode;` — the Parquet type before the name and, after it, what
/// follows (`" (STRING);"`, a list's group; `;` when left out).
macro_rules! table {
    (@tail) => { ";" };
    (@tail $tail:literal) => { $tail };
    ($(#[$m:meta])* $name:ident {
        $($col:ident: $ty:literal $($tail:literal)? => $encode:ident;)*
    }) => {
        $(#[$m])*
        pub struct $name {
            $(pub $col: $crate::export::parquet::column::Column,)*
        }

        impl $crate::export::parquet::table::Table for $name {
            const SCHEMA: &'static str = concat!(
                "message ", stringify!($name), " {\n",
                $($ty, " ", stringify!($col), table!(@tail $($tail)?), "\n",)*
                "}"
            );

            fn new(schema: &parquet::schema::types::SchemaDescriptor) -> Self {
                use $crate::export::parquet::column::{Column, Encode};
                let mut leaf = 0;
                let mut next = |encode| {
                    leaf += 1;
                    Column::new(schema.column(leaf - 1), encode)
                };
                $name { $($col: next(Encode::$encode),)* }
            }

            fn each(
                &mut self,
                f: &mut dyn FnMut(&mut $crate::export::parquet::column::Column) -> anyhow::Result<()>,
            ) -> anyhow::Result<()> {
                $(f(&mut self.$col)?;)*
                Ok(())
            }
        }
    };
}
pub(crate) use table;

/// What every table has.
pub trait Table: Sized {
    /// Its Parquet schema, as a message type.
    const SCHEMA: &'static str;
    /// Its columns, empty, for the leaves of `schema` (its [`Self::SCHEMA`]).
    fn new(schema: &SchemaDescriptor) -> Self;
    /// Calls `f` with each leaf column, in schema order.
    fn each(&mut self, f: &mut dyn FnMut(&mut Column) -> Result<()>) -> Result<()>;

    /// The names of its columns (the schema's top-level fields), in order.
    #[cfg(test)]
    fn column_names() -> Result<Vec<String>> {
        let schema = parse_message_type(Self::SCHEMA)?;
        Ok((schema.get_fields().iter())
            .map(|f| f.name().to_string())
            .collect())
    }
}

/// One table of one trace, streaming to its Parquet file.
pub struct TableFile<T: Table> {
    pub rows: T,
    writer: SerializedFileWriter<File>,
    zstd: Zstd,
    path: PathBuf,
    /// Rows in the current page, and in the current row group before it.
    page_rows: usize,
    group_rows: usize,
    written: u64,
}

impl<T: Table> TableFile<T> {
    /// Creates `path` (and its directory) for a table, with `metadata` in its footer.
    pub fn create(path: PathBuf, metadata: Vec<KeyValue>) -> Result<Self> {
        let schema = Arc::new(parse_message_type(T::SCHEMA)?);
        let rows = T::new(&SchemaDescriptor::new(Arc::clone(&schema)));
        if let Some(dir) = path.parent() {
            // An interrupt removing the staging directory: making this one would bring it back.
            if crate::output::interrupt::stopping() {
                anyhow::bail!("interrupted");
            }
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // A new file, never the old one truncated: a reading begun again with other steps makes
        // its tables before it drops those of the reading before, whose writer then flushes
        // what it holds to the file it opened.
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("replacing {}", path.display()))
            }
            _ => {}
        }
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let properties = WriterProperties::builder()
            .set_created_by(format!("vramtrace {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(metadata))
            .build();
        Ok(TableFile {
            rows,
            writer: SerializedFileWriter::new(file, schema, Arc::new(properties))?,
            zstd: Zstd::new()?,
            path,
            page_rows: 0,
            group_rows: 0,
            written: 0,
        })
    }

    /// Ends the current row: a full page is encoded, a full row group written.
    #[inline]
    pub fn row_done(&mut self) -> Result<()> {
        self.page_rows += 1;
        if self.page_rows == PAGE_ROWS {
            let zstd = &mut self.zstd;
            self.rows.each(&mut |c| Ok(c.page(zstd)?))?;
            self.group_rows += self.page_rows;
            self.page_rows = 0;
            if self.group_rows == GROUP_ROWS {
                self.row_group()
                    .with_context(|| format!("writing {}", self.path.display()))?;
            }
        }
        Ok(())
    }

    /// Writes the row group filled so far.
    fn row_group(&mut self) -> Result<()> {
        let rows = (self.group_rows + self.page_rows) as u64;
        if rows == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        let zstd = &mut self.zstd;
        self.rows.each(&mut |c| {
            let (bytes, close) = c.chunk(rows, zstd)?;
            Ok(group.append_column(&bytes, close)?)
        })?;
        group.close()?;
        self.written += rows;
        self.group_rows = 0;
        self.page_rows = 0;
        Ok(())
    }

    /// Writes what is left and the footer, with `more` metadata; returns the rows written.
    pub fn finish(mut self, more: Vec<KeyValue>) -> Result<u64> {
        let path = self.path.clone();
        let written = (|| -> Result<u64> {
            self.row_group()?;
            for kv in more {
                self.writer.append_key_value_metadata(kv);
            }
            self.writer.close()?;
            Ok(self.written)
        })();
        written.with_context(|| format!("writing {}", path.display()))
    }
}
