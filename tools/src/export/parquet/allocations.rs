//! The `allocations` table: one row per object the trace made (pointer allocations, physical
//! handles, mappings, reservations, pinned and registered host memory, arrays, IPC mappings,
//! NCCL buffers, registrations and windows), with where and when it was made and, once it
//! ended, when and by what call. A leak is `free_seq IS NULL`; growth is a `GROUP BY` of the
//! rows still live.
//!
//! Rows come in the order objects ended (as the replay's endings say, event by event), then the
//! objects still live at the end of the trace in the order the live set lists them.
//!
//! The table is as long as half the trace, so its columns are encoded here ([`super::column`])
//! rather than through Arrow builders and the Arrow writer, which the other tables use: each
//! word column's dictionary is keyed by the id the row already has (site, API, category,
//! module, flag).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;
use vramtrace_collector::live::{Accounting, Category, Ended, LiveObject, LiveState};

use super::column::{Column, Encode, Zstd, PAGE_ROWS};
use super::names::Names;

/// Rows in a row group (the Arrow writer's default, which the other tables keep).
const GROUP_ROWS: usize = 1024 * 1024;

/// Declares the table's columns, in schema order, each with how it is written; gives the
/// Parquet schema (`docs/data.md`'s contract: integers signed 64-bit, the device 32-bit).
macro_rules! columns {
    (@tail) => { ";" };
    (@tail $tail:literal) => { $tail };
    ($($col:ident: $ty:literal $($tail:literal)? => $encode:ident;)*) => {
        struct Columns {
            $($col: Column,)*
        }

        const SCHEMA: &str = concat!(
            "message allocations {\n",
            $($ty, " ", stringify!($col), columns!(@tail $($tail)?), "\n",)*
            "}"
        );

        impl Columns {
            fn new(schema: &SchemaDescriptor) -> Self {
                let mut i = 0;
                let mut next = |encode| {
                    i += 1;
                    Column::new(schema.column(i - 1), encode)
                };
                Columns { $($col: next(Encode::$encode),)* }
            }

            fn all(&mut self) -> [&mut Column; [$(stringify!($col)),*].len()] {
                [$(&mut self.$col),*]
            }
        }
    };
}

columns! {
    pid: "required int64" => Dictionary;
    category: "required binary" " (STRING);" => Dictionary;
    accounting: "required binary" " (STRING);" => Dictionary;
    api: "required binary" " (STRING);" => Dictionary;
    device: "required int32" => Dictionary;
    address: "required int64" => Plain;
    bytes: "required int64" => Dictionary;
    handle: "optional int64" => Plain;
    pool: "optional int64" => Dictionary;
    communicator: "optional int64" => Plain;
    thread: "required int64" => Dictionary;
    alloc_seq: "required int64" => Delta;
    alloc_time_ns: "required int64" => Delta;
    alloc_step: "required int64" => Delta;
    free_seq: "optional int64" => Delta;
    free_time_ns: "optional int64" => Delta;
    free_step: "optional int64" => Delta;
    free_api: "optional binary" " (STRING);" => Dictionary;
    site: "required int64" => Dictionary;
    label: "required binary" " (STRING);" => Dictionary;
    module: "optional binary" " (STRING);" => Dictionary;
    flags: "required group" " (LIST) { repeated group list { optional binary element (STRING); } }"
        => Dictionary;
}

/// The column names, in order.
#[cfg(test)]
pub fn column_names() -> Vec<String> {
    let schema = parse_message_type(SCHEMA).expect("the schema parses");
    schema
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect()
}

/// The `allocations` file of one trace, as it fills.
pub struct AllocationsFile {
    columns: Columns,
    writer: SerializedFileWriter<File>,
    zstd: Zstd,
    path: PathBuf,
    /// Rows in the current page, and in the current row group before it.
    page_rows: usize,
    group_rows: usize,
    written: u64,
}

impl AllocationsFile {
    /// Creates `path` (and its directory), with `metadata` in its footer.
    pub fn create(path: PathBuf, metadata: Vec<KeyValue>) -> Result<Self> {
        let schema = Arc::new(parse_message_type(SCHEMA)?);
        let columns = Columns::new(&SchemaDescriptor::new(Arc::clone(&schema)));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let properties = WriterProperties::builder()
            .set_created_by(format!("vramtrace {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(metadata))
            .build();
        Ok(AllocationsFile {
            columns,
            writer: SerializedFileWriter::new(file, schema, Arc::new(properties))?,
            zstd: Zstd::new()?,
            path,
            page_rows: 0,
            group_rows: 0,
            written: 0,
        })
    }

    /// A row for an object that ended.
    pub fn ended(
        &mut self,
        state: &LiveState,
        names: &mut Names,
        pid: i64,
        e: &Ended,
    ) -> Result<()> {
        self.made(pid, &e.object);
        let c = &mut self.columns;
        c.free_seq.int(bits(e.seq));
        match e.by {
            Some(by) => {
                c.free_time_ns.int(bits(by.time_ns));
                c.free_step.int(bits(by.step));
                c.free_api.word(by.api as u64, || by.api.name());
            }
            None => {
                c.free_time_ns.null();
                c.free_step.null();
                c.free_api.null();
            }
        }
        self.named(state, names, &e.object)
    }

    /// A row for an object live at the end of the trace.
    pub fn live(
        &mut self,
        state: &LiveState,
        names: &mut Names,
        pid: i64,
        o: &LiveObject<'_>,
    ) -> Result<()> {
        self.made(pid, o);
        let c = &mut self.columns;
        c.free_seq.null();
        c.free_time_ns.null();
        c.free_step.null();
        c.free_api.null();
        self.named(state, names, o)
    }

    /// The columns up to the end columns.
    #[inline]
    fn made(&mut self, pid: i64, o: &LiveObject<'_>) {
        let c = &mut self.columns;
        let origin = &o.origin;
        c.pid.int(pid);
        c.category.word(o.category as u64, || o.category.name());
        let accounting = o.category.accounting();
        c.accounting
            .word(accounting as u64, || accounting_name(accounting));
        c.api.word(origin.api as u64, || origin.api.name());
        c.device.int(i64::from(o.device));
        c.address.int(bits(o.address));
        c.bytes.int(bits(o.bytes));
        c.handle.opt_int(o.handle.map(bits));
        let pooled = o.category == Category::Async;
        c.pool.opt_int(pooled.then_some(bits(origin.pool)));
        c.communicator.opt_int(origin.communicator.map(bits));
        c.thread.int(i64::from(origin.thread));
        c.alloc_seq.int(bits(origin.seq));
        c.alloc_time_ns.int(bits(origin.time_ns));
        c.alloc_step.int(bits(origin.step));
    }

    /// The columns after the end columns; ends the row.
    #[inline]
    fn named(&mut self, state: &LiveState, names: &mut Names, o: &LiveObject<'_>) -> Result<()> {
        let c = &mut self.columns;
        let site = o.origin.site;
        c.site.int(i64::from(site));
        c.label
            .word(u64::from(site), || names.site(state, site).to_string());
        let module = o.origin.module;
        c.module.opt_word(module.map(u64::from), || {
            names.module(state, module).unwrap_or_default().to_string()
        });
        c.flags.words(o.flags.iter().map(|f| (f as u64, f.name())));
        self.row_done()
    }

    fn row_done(&mut self) -> Result<()> {
        self.page_rows += 1;
        if self.page_rows == PAGE_ROWS {
            for c in self.columns.all() {
                c.page(&mut self.zstd)?;
            }
            self.group_rows += self.page_rows;
            self.page_rows = 0;
            if self.group_rows == GROUP_ROWS {
                self.row_group()?;
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
        for c in self.columns.all() {
            let (bytes, close) = c.chunk(rows, &mut self.zstd)?;
            group.append_column(&bytes, close)?;
        }
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

/// A 64-bit address, handle or id with its bits unchanged (user-space addresses stay
/// positive).
pub fn bits(v: u64) -> i64 {
    v as i64
}

fn accounting_name(a: Accounting) -> &'static str {
    match a {
        Accounting::Device => "device",
        Accounting::Host => "host",
        Accounting::VirtualAddress => "virtual-address",
        Accounting::None => "none",
    }
}
