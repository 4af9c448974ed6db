//! One table of the dataset as it fills: its columns as Arrow builders (declared once with
//! [`table!`], which gives the schema too), and the Parquet file of one trace it streams to, a
//! batch of rows at a time, so memory stays bounded however long the trace.
//!
//! Files carry the Parquet types only (no embedded Arrow schema): what DuckDB, Spark and pyarrow
//! read is the Parquet schema, the contract `docs/data.md` states. Integers are signed 64-bit
//! (device and rank numbers 32-bit): unsigned Parquet types read as decimals in Spark.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::RecordBatch;
use arrow_schema::Schema;
use parquet::arrow::arrow_writer::{ArrowWriter, ArrowWriterOptions};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

/// Rows buffered in builders before they go to the file as one batch.
const BATCH_ROWS: usize = 64 * 1024;

/// Declares a table: a struct with one Arrow builder per column, in schema order, with
/// `new()`, `rows()`, `row_done()`, `schema()` and `batch()` (the rows so far, builders
/// emptied). Each column is `name: Builder = constructor, nullable;`.
macro_rules! table {
    ($(#[$m:meta])* $name:ident { $($(#[$cm:meta])* $col:ident: $builder:ty = $init:expr, $nullable:literal;)* }) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$cm])* pub $col: $builder,)*
            rows: usize,
        }

        impl $name {
            pub fn new() -> Self {
                $name { $($col: $init,)* rows: 0 }
            }
        }

        impl $crate::export::parquet::table::Table for $name {
            fn rows(&self) -> usize {
                self.rows
            }

            fn row_done(&mut self) {
                self.rows += 1;
            }

            fn batch(&mut self) -> arrow_array::RecordBatch {
                use arrow_array::builder::ArrayBuilder;
                self.rows = 0;
                let columns: Vec<(&str, arrow_array::ArrayRef, bool)> = vec![
                    $((stringify!($col), ArrayBuilder::finish(&mut self.$col), $nullable)),*
                ];
                arrow_array::RecordBatch::try_from_iter_with_nullable(columns)
                    .expect("a table's columns fill together")
            }
        }
    };
}
pub(crate) use table;

/// What every table declared with [`table!`] has.
pub trait Table {
    /// Rows filled since the last batch.
    fn rows(&self) -> usize;
    /// Ends the current row.
    fn row_done(&mut self);
    /// The rows filled so far, as one batch; the builders start again empty.
    fn batch(&mut self) -> RecordBatch;
}

/// Columns whose values rarely repeat (sequence numbers, times, addresses): no dictionary, and
/// sequence numbers and times, which grow, delta-encoded.
const UNIQUE: &[&str] = &["address", "communicator", "comm", "parent"];
const GROWING: &[&str] = &[
    "seq",
    "time_ns",
    "alloc_seq",
    "alloc_time_ns",
    "free_seq",
    "free_time_ns",
    "begin_seq",
    "begin_time_ns",
    "allocated_ns",
    "freed_ns",
];

/// The writer settings of every file: zstd at its fastest level (the data is small integers
/// and repeated strings, which the dictionary and delta encodings already shrink), statistics
/// per column chunk for the numbers (what DuckDB and Spark prune row groups with) and none for
/// strings, whose minimum and maximum cost a comparison per value and prune nothing.
fn properties(schema: &Schema, metadata: Vec<KeyValue>) -> Result<WriterProperties> {
    let mut p = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        // Lists as the Parquet specification names their parts (`list.element`), as Spark and
        // Hive expect.
        .set_coerce_types(true)
        .set_created_by(format!("vramtrace {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(metadata));
    for field in schema.fields() {
        let c = field.name().as_str();
        let path = ColumnPath::from(c);
        if !field.data_type().is_primitive() {
            p = p.set_column_statistics_enabled(path.clone(), EnabledStatistics::None);
        }
        if GROWING.contains(&c) {
            p = p
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        } else if UNIQUE.contains(&c) {
            p = p.set_column_dictionary_enabled(path, false);
        }
    }
    Ok(p.build())
}

/// One table of one trace, streaming to its Parquet file.
pub struct TableFile<T: Table> {
    pub rows: T,
    writer: ArrowWriter<File>,
    path: PathBuf,
    written: u64,
}

impl<T: Table> TableFile<T> {
    /// Creates `path` (and its directory) for the rows of `table`, with `metadata` in its
    /// footer.
    pub fn create(path: PathBuf, mut table: T, metadata: Vec<KeyValue>) -> Result<Self> {
        let schema = table.batch().schema();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let options = ArrowWriterOptions::new()
            .with_properties(properties(&schema, metadata)?)
            .with_skip_arrow_metadata(true);
        let writer = ArrowWriter::try_new_with_options(file, Arc::clone(&schema), options)?;
        Ok(TableFile {
            rows: table,
            writer,
            path,
            written: 0,
        })
    }

    /// Ends the current row; a full batch goes to the file.
    #[inline]
    pub fn row_done(&mut self) -> Result<()> {
        self.rows.row_done();
        if self.rows.rows() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let n = self.rows.rows();
        if n > 0 {
            let batch = self.rows.batch();
            self.writer
                .write(&batch)
                .with_context(|| format!("writing {}", self.path.display()))?;
            self.written += n as u64;
        }
        Ok(())
    }

    /// Writes what is left and the footer, with `more` metadata; returns the rows written.
    pub fn finish(mut self, more: Vec<KeyValue>) -> Result<u64> {
        self.flush()?;
        for kv in more {
            self.writer.append_key_value_metadata(kv);
        }
        self.writer
            .close()
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(self.written)
    }
}
