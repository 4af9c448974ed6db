//! One column of a table written without `parquet`'s column writers: its values as they come,
//! a data page encoded and compressed every [`PAGE_ROWS`] rows, and at the row group's end the
//! column chunk — dictionary page first — handed to the file writer as bytes with their
//! metadata (`SerializedRowGroupWriter::append_column`). The file's framing (page headers, row
//! groups, footer) is still `parquet`'s.
//!
//! Why: `allocations` has a row per object, about half the trace's events, and the Arrow
//! writer spends 15 ns and more a value interning each in its dictionary with a hash and a
//! comparison. Here a dictionary is keyed by what the export already holds — a site's id, an
//! API's number, a module's id — so a value's index is a table lookup, and the words (a site's
//! label) are worked out once, when the key first comes.

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, Type as Physical, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::errors::Result;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;
use rustc_hash::FxHashMap;

use super::encode::{bit_pack32, bit_width, delta_binary_packed, rle_hybrid};

/// Rows in a data page.
pub const PAGE_ROWS: usize = 32 * 1024;

/// Entries after which a column of numbers gives up its dictionary and writes the rest of the
/// chunk's values as they are (a dictionary that large no longer makes the data smaller).
const MAX_NUMBER_ENTRIES: usize = 1 << 16;

/// Keys below this are looked up in a table, the others in a hash map.
const DENSE_KEYS: u64 = 1 << 16;

/// Where a value goes: a row of its own, or the first or a later element of a list in the
/// row (its repetition level).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    Row,
    First,
    Next,
}

impl At {
    /// The first element of a list, or the ones after.
    pub fn element(first: bool) -> At {
        if first {
            At::First
        } else {
            At::Next
        }
    }
}

/// A text as a PLAIN byte array: its length, then its bytes.
fn plain_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// How a column writes its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encode {
    /// As they are (numbers that rarely repeat: addresses).
    Plain,
    /// As differences from the one before (numbers that grow: sequence numbers, times).
    Delta,
    /// As indices into the column's dictionary (ids, names, small sets of numbers).
    Dictionary,
}

/// A dictionary: its entries PLAIN-encoded as the dictionary page holds them, and each key's
/// index.
#[derive(Default)]
struct Dictionary {
    plain: Vec<u8>,
    len: u32,
    dense: Vec<u32>,
    sparse: FxHashMap<u64, u32>,
    /// For a column of texts given as they are: each text's index.
    texts: FxHashMap<Box<str>, u32>,
    /// The last key found, and its index (a process, a device, a thread: runs of one key).
    last: (u64, u32),
}

impl Dictionary {
    const ABSENT: u32 = u32::MAX;

    #[inline]
    fn get(&mut self, key: u64) -> Option<u32> {
        if self.len > 0 && self.last.0 == key {
            return Some(self.last.1);
        }
        let i = if key < DENSE_KEYS {
            let i = *self.dense.get(key as usize)?;
            (i != Self::ABSENT).then_some(i)?
        } else {
            *self.sparse.get(&key)?
        };
        self.last = (key, i);
        Some(i)
    }

    fn insert(&mut self, key: u64, entry: impl FnOnce(&mut Vec<u8>)) -> u32 {
        let i = self.len;
        if key < DENSE_KEYS {
            let k = key as usize;
            if k >= self.dense.len() {
                self.dense.resize(k + 1, Self::ABSENT);
            }
            self.dense[k] = i;
        } else {
            self.sparse.insert(key, i);
        }
        entry(&mut self.plain);
        self.len += 1;
        self.last = (key, i);
        i
    }
}

/// The chunk of the current row group so far.
struct Chunk {
    pages: Vec<CompressedPage>,
    /// Level entries (values and nulls) written.
    levels: u64,
    nulls: u64,
    /// Smallest and largest number written (for a column of numbers; they mean something once
    /// a value is not null).
    min: i64,
    max: i64,
    /// Whether a page used the dictionary (the chunk then starts with its page).
    dictionary: bool,
}

impl Default for Chunk {
    fn default() -> Self {
        Chunk {
            pages: Vec::new(),
            levels: 0,
            nulls: 0,
            min: i64::MAX,
            max: i64::MIN,
            dictionary: false,
        }
    }
}

/// One column of a table being written.
pub struct Column {
    descr: ColumnDescPtr,
    /// How the column writes its values, and how the current chunk does (a dictionary of
    /// numbers that grew too large falls back to Plain until the chunk ends).
    wanted: Encode,
    encode: Encode,
    /// A column of numbers or booleans (its chunks carry statistics: minimum, maximum, nulls).
    numbers: bool,
    max_def: i16,
    max_rep: i16,
    /// The current page: numbers (Plain, Delta) or indices (Dictionary) of its values, and its
    /// levels.
    values: Vec<i64>,
    indices: Vec<u32>,
    defs: Vec<u32>,
    reps: Vec<u32>,
    dictionary: Dictionary,
    chunk: Chunk,
}

impl Column {
    pub fn new(descr: ColumnDescPtr, encode: Encode) -> Self {
        let numbers = matches!(
            descr.physical_type(),
            Physical::INT32 | Physical::INT64 | Physical::BOOLEAN
        );
        Column {
            max_def: descr.max_def_level(),
            max_rep: descr.max_rep_level(),
            descr,
            wanted: encode,
            encode,
            numbers,
            values: Vec::new(),
            indices: Vec::new(),
            defs: Vec::new(),
            reps: Vec::new(),
            dictionary: Dictionary::default(),
            chunk: Chunk::default(),
        }
    }

    fn is_int32(&self) -> bool {
        self.descr.physical_type() == Physical::INT32
    }

    /// The levels of a value at `at`: defined all the way down (`Some`), or up to the value
    /// itself (`None`: a null field, or a null element of a list).
    #[inline]
    fn levels_at(&mut self, at: At, defined: bool) {
        if self.max_def > 0 {
            let def = self.max_def as u32 - u32::from(!defined);
            self.defs.push(def);
        }
        if self.max_rep > 0 {
            self.reps.push(u32::from(at == At::Next));
        }
        if !defined {
            self.chunk.nulls += 1;
        }
    }

    /// Appends number `v`.
    #[inline]
    pub fn int(&mut self, v: impl Into<i64>) {
        self.int_at(At::Row, Some(v.into()));
    }

    /// Appends `v`, or a null.
    #[inline]
    pub fn opt_int<V: Into<i64>>(&mut self, v: Option<V>) {
        self.int_at(At::Row, v.map(Into::into));
    }

    /// Appends number `v`, or a null, at `at`.
    #[inline]
    pub fn int_at(&mut self, at: At, v: Option<i64>) {
        self.levels_at(at, v.is_some());
        if let Some(v) = v {
            self.number(v);
        }
    }

    /// The chunk's minimum and maximum are not kept here, value by value, but worked out when a
    /// page is encoded (over its numbers) and when the chunk ends (over its dictionary, whose
    /// entries are all values of the chunk): a row of `allocations` stores a dozen numbers.
    #[inline(always)]
    fn number(&mut self, v: i64) {
        if self.encode == Encode::Dictionary {
            match self.dictionary.get(v as u64) {
                Some(i) => self.indices.push(i),
                None => self.new_number(v),
            }
        } else {
            self.values.push(v);
        }
    }

    /// Appends `v`, which the dictionary does not hold yet.
    #[cold]
    #[inline(never)]
    fn new_number(&mut self, v: i64) {
        if self.dictionary.len as usize >= MAX_NUMBER_ENTRIES {
            // Too many entries: numbers as they are from here on.
            self.fall_back();
            self.values.push(v);
            return;
        }
        let int32 = self.is_int32();
        let i = self.dictionary.insert(v as u64, |p| {
            if int32 {
                p.extend_from_slice(&(v as i32).to_le_bytes());
            } else {
                p.extend_from_slice(&v.to_le_bytes());
            }
        });
        self.indices.push(i);
    }

    /// Appends `v`, or a null (a column of doubles, written PLAIN: their bits, as they are;
    /// the chunk carries no minimum or maximum for them).
    #[inline]
    pub fn opt_real(&mut self, v: Option<f64>) {
        debug_assert!(
            self.descr.physical_type() == Physical::DOUBLE && self.wanted == Encode::Plain
        );
        self.levels_at(At::Row, v.is_some());
        if let Some(v) = v {
            self.values.push(v.to_bits() as i64);
        }
    }

    /// Appends `v` (a column of booleans).
    #[inline]
    pub fn boolean(&mut self, v: bool) {
        self.bool_at(At::Row, Some(v));
    }

    /// Appends `v`, or a null, at `at`.
    #[inline]
    pub fn bool_at(&mut self, at: At, v: Option<bool>) {
        self.levels_at(at, v.is_some());
        if let Some(v) = v {
            self.values.push(i64::from(v));
        }
    }

    /// Appends a null, or an empty list for a list column (not even the list's repeated group
    /// is defined).
    #[inline]
    pub fn null(&mut self) {
        self.defs.push(0);
        if self.max_rep > 0 {
            self.reps.push(0);
        }
        self.chunk.nulls += 1;
    }

    /// Appends the word of `key`: `word()`'s, the first time the column meets the key.
    #[inline]
    pub fn word<S: AsRef<str>>(&mut self, key: u64, word: impl FnOnce() -> S) {
        self.levels_at(At::Row, true);
        self.index(key, word);
    }

    #[inline]
    fn index<S: AsRef<str>>(&mut self, key: u64, word: impl FnOnce() -> S) {
        let i = match self.dictionary.get(key) {
            Some(i) => i,
            None => self
                .dictionary
                .insert(key, |p| plain_text(p, word().as_ref())),
        };
        self.indices.push(i);
    }

    /// Appends a list of words (each `(key, word)`) as one row of a list column.
    pub fn words<S: AsRef<str>>(&mut self, words: impl Iterator<Item = (u64, S)>) {
        let mut at = At::First;
        for (key, w) in words {
            self.levels_at(at, true);
            at = At::Next;
            self.index(key, || w);
        }
        if at == At::First {
            self.null();
        }
    }

    /// Appends text `v` (the dictionary is keyed by the text itself).
    #[inline]
    pub fn text(&mut self, v: impl AsRef<str>) {
        self.text_at(At::Row, Some(v.as_ref()));
    }

    /// Appends text `v`, or a null.
    #[inline]
    pub fn opt_text<V: AsRef<str>>(&mut self, v: Option<V>) {
        self.text_at(At::Row, v.as_ref().map(AsRef::as_ref));
    }

    /// Appends text `v`, or a null, at `at`.
    pub fn text_at(&mut self, at: At, v: Option<&str>) {
        self.levels_at(at, v.is_some());
        if let Some(v) = v {
            let i = match self.dictionary.texts.get(v) {
                Some(&i) => i,
                None => {
                    let i = self.dictionary.len;
                    self.dictionary.texts.insert(v.into(), i);
                    plain_text(&mut self.dictionary.plain, v);
                    self.dictionary.len += 1;
                    i
                }
            };
            self.indices.push(i);
        }
    }

    /// Appends a list of texts as one row of a list column.
    pub fn texts<'a>(&mut self, texts: impl Iterator<Item = &'a str>) {
        let mut at = At::First;
        for t in texts {
            self.text_at(at, Some(t));
            at = At::Next;
        }
        if at == At::First {
            self.null();
        }
    }

    /// Gives up the dictionary: the current page's values go back to numbers (earlier pages
    /// of the chunk keep their indices, and the chunk its dictionary page).
    fn fall_back(&mut self) {
        let values: Vec<i64> = (self.indices.iter())
            .map(|&i| self.number_entry(i))
            .collect();
        self.values = values;
        self.indices.clear();
        self.encode = Encode::Plain;
    }

    /// Entry `i` of a dictionary of numbers.
    fn number_entry(&self, i: u32) -> i64 {
        let width = if self.is_int32() { 4 } else { 8 };
        let at = i as usize * width;
        let mut b = [0u8; 8];
        b[..width].copy_from_slice(&self.dictionary.plain[at..at + width]);
        if width == 4 {
            i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        } else {
            i64::from_le_bytes(b)
        }
    }

    /// Takes `values` into the chunk's minimum and maximum.
    fn bounds(&mut self, values: impl Iterator<Item = i64>) {
        let (min, max) = values.fold((self.chunk.min, self.chunk.max), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        self.chunk.min = min;
        self.chunk.max = max;
    }

    /// Level entries in the current page.
    fn levels(&self) -> usize {
        if self.max_def > 0 {
            self.defs.len()
        } else {
            self.values.len() + self.indices.len()
        }
    }

    /// Encodes and compresses the current page.
    pub fn page(&mut self, zstd: &mut Zstd) -> Result<()> {
        let levels = self.levels();
        if levels == 0 {
            return Ok(());
        }
        if self.numbers {
            let values = std::mem::take(&mut self.values);
            self.bounds(values.iter().copied());
            self.values = values;
        }
        let mut buf = Vec::with_capacity(levels * 2 + 64);
        for (max, levels) in [(self.max_rep, &self.reps), (self.max_def, &self.defs)] {
            if max > 0 {
                let at = buf.len();
                buf.extend_from_slice(&[0; 4]);
                rle_hybrid(levels, bit_width(max as u64), &mut buf);
                let len = (buf.len() - at - 4) as u32;
                buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
            }
        }
        let encoding = match self.encode {
            Encode::Dictionary => {
                let width = bit_width(u64::from(self.dictionary.len.saturating_sub(1)));
                buf.push(width as u8);
                rle_hybrid(&self.indices, width, &mut buf);
                self.chunk.dictionary = true;
                Encoding::RLE_DICTIONARY
            }
            Encode::Plain => {
                if self.descr.physical_type() == Physical::BOOLEAN {
                    let bits: Vec<u32> = self.values.iter().map(|&v| v as u32).collect();
                    bit_pack32(&bits, 1, &mut buf);
                } else if self.is_int32() {
                    buf.extend(self.values.iter().flat_map(|v| (*v as i32).to_le_bytes()));
                } else {
                    buf.extend(self.values.iter().flat_map(|v| v.to_le_bytes()));
                }
                Encoding::PLAIN
            }
            Encode::Delta => {
                delta_binary_packed(&self.values, &mut buf);
                Encoding::DELTA_BINARY_PACKED
            }
        };
        let page = Page::DataPage {
            buf: zstd.compress(&buf)?,
            num_values: levels as u32,
            encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        self.chunk.pages.push(CompressedPage::new(page, buf.len()));
        self.chunk.levels += levels as u64;
        self.values.clear();
        self.indices.clear();
        self.defs.clear();
        self.reps.clear();
        Ok(())
    }

    /// The column chunk of a row group of `rows` rows: its bytes and what the file's footer
    /// says of it.
    pub fn chunk(&mut self, rows: u64, zstd: &mut Zstd) -> Result<(Bytes, ColumnCloseResult)> {
        self.page(zstd)?;
        if self.numbers {
            let entries = (0..self.dictionary.len).map(|i| self.number_entry(i));
            let entries: Vec<i64> = entries.collect();
            self.bounds(entries.into_iter());
        }
        let chunk = std::mem::take(&mut self.chunk);
        // Each chunk has a dictionary of its own: what the next one holds and how wide its
        // indices are depend on its rows only.
        let dictionary = std::mem::take(&mut self.dictionary);
        self.encode = self.wanted;
        let mut sink = TrackedWrite::new(Vec::new());
        let mut encodings = Vec::new();
        let (mut compressed, mut uncompressed) = (0, 0);
        let mut dictionary_at = None;
        let mut data_at = None;
        {
            let mut writer = SerializedPageWriter::new(&mut sink);
            if chunk.dictionary {
                let page = Page::DictionaryPage {
                    buf: zstd.compress(&dictionary.plain)?,
                    num_values: dictionary.len,
                    encoding: Encoding::PLAIN,
                    is_sorted: false,
                };
                let page = CompressedPage::new(page, dictionary.plain.len());
                let spec = writer.write_page(page)?;
                dictionary_at = Some(spec.offset as i64);
                compressed += spec.compressed_size;
                uncompressed += spec.uncompressed_size;
                encodings.extend([Encoding::PLAIN, Encoding::RLE_DICTIONARY]);
            }
            for page in chunk.pages {
                if !encodings.contains(&page.encoding()) {
                    encodings.push(page.encoding());
                }
                let spec = writer.write_page(page)?;
                data_at.get_or_insert(spec.offset as i64);
                compressed += spec.compressed_size;
                uncompressed += spec.uncompressed_size;
            }
            writer.close()?;
        }
        if self.max_def > 0 || self.max_rep > 0 {
            encodings.push(Encoding::RLE);
        }
        let mut metadata = ColumnChunkMetaData::builder(self.descr.clone())
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(LEVEL)?))
            .set_encodings(encodings)
            .set_total_compressed_size(compressed as i64)
            .set_total_uncompressed_size(uncompressed as i64)
            .set_num_values(chunk.levels as i64)
            .set_data_page_offset(data_at.unwrap_or(0))
            .set_dictionary_page_offset(dictionary_at);
        if self.numbers {
            let (min, max) = if chunk.levels > chunk.nulls {
                (Some(chunk.min), Some(chunk.max))
            } else {
                (None, None)
            };
            let nulls = Some(chunk.nulls);
            let stats = if self.descr.physical_type() == Physical::BOOLEAN {
                let b = |v: Option<i64>| v.map(|v| v != 0);
                Statistics::Boolean(ValueStatistics::new(b(min), b(max), None, nulls, false))
            } else if self.is_int32() {
                let i32 = |v: Option<i64>| v.map(|v| v as i32);
                let v = ValueStatistics::new(i32(min), i32(max), None, nulls, false);
                Statistics::Int32(v.with_backwards_compatible_min_max(true))
            } else {
                let v = ValueStatistics::new(min, max, None, nulls, false);
                Statistics::Int64(v.with_backwards_compatible_min_max(true))
            };
            metadata = metadata.set_statistics(stats);
        }
        let bytes = Bytes::from(sink.into_inner()?);
        let close = ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: rows,
            metadata: metadata.build()?,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        };
        Ok((bytes, close))
    }
}

/// zstd's level for every page: its fastest (the encodings have already made the data small).
pub const LEVEL: i32 = 1;

/// A zstd compressor kept across pages (its context is costly to make).
pub struct Zstd(zstd::bulk::Compressor<'static>);

impl Zstd {
    pub fn new() -> Result<Self> {
        let c = zstd::bulk::Compressor::new(LEVEL).map_err(external)?;
        Ok(Zstd(c))
    }

    fn compress(&mut self, data: &[u8]) -> Result<Bytes> {
        Ok(Bytes::from(self.0.compress(data).map_err(external)?))
    }
}

fn external(e: std::io::Error) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(e))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::SerializedFileWriter;
    use parquet::record::{Field, ListAccessor, RowAccessor};
    use parquet::schema::parser::parse_message_type;
    use parquet::schema::types::SchemaDescriptor;

    use super::*;

    const ROWS: usize = 100_000;
    const GROUP: usize = 70_000;

    fn numbers(i: usize) -> (i64, i64, Option<i64>, i32) {
        // More distinct values than a dictionary keeps, with keys over the dense table's.
        let d = ((i * 7919) % 80_000) as i64 * 1000;
        // Differences that wrap around i64.
        let g = if i.is_multiple_of(3) {
            i64::MIN + i as i64
        } else {
            i64::MAX - i as i64
        };
        let o = (!i.is_multiple_of(5)).then_some(i as i64);
        (d, g, o, (i % 7) as i32 - 3)
    }

    fn words(i: usize) -> Vec<String> {
        (0..i % 4).map(|k| format!("w{k}")).collect()
    }

    /// What `parquet`'s own reader reads back is what was written: dictionaries that fall back
    /// mid-page, differences that wrap, nulls, 32-bit numbers, lists (empty ones too), pages
    /// and row groups cut mid-way.
    #[test]
    fn the_parquet_crates_reader_reads_back_what_the_columns_wrote() {
        let schema = "message t { required int64 d; required int64 g; optional int64 o; \
                      required int32 s; required group l (LIST) { repeated group list { \
                      optional binary element (STRING); } } }";
        let schema = Arc::new(parse_message_type(schema).unwrap());
        let descr = SchemaDescriptor::new(Arc::clone(&schema));
        let encodes = [
            Encode::Dictionary,
            Encode::Delta,
            Encode::Plain,
            Encode::Dictionary,
            Encode::Dictionary,
        ];
        let mut columns: Vec<Column> = (encodes.iter().enumerate())
            .map(|(i, e)| Column::new(descr.column(i), *e))
            .collect();
        let props = Arc::new(WriterProperties::builder().build());
        let mut file = SerializedFileWriter::new(Vec::new(), schema, props).unwrap();
        let mut zstd = Zstd::new().unwrap();
        let mut in_group: usize = 0;
        for i in 0..ROWS {
            let (d, g, o, s) = numbers(i);
            columns[0].int(d);
            columns[1].int(g);
            columns[2].opt_int(o);
            columns[3].int(i64::from(s));
            let w = words(i);
            columns[4].words(w.iter().enumerate().map(|(k, w)| (k as u64, w.as_str())));
            in_group += 1;
            if in_group.is_multiple_of(PAGE_ROWS) {
                columns.iter_mut().for_each(|c| c.page(&mut zstd).unwrap());
            }
            if in_group == GROUP || i == ROWS - 1 {
                let mut group = file.next_row_group().unwrap();
                for c in &mut columns {
                    let (bytes, close) = c.chunk(in_group as u64, &mut zstd).unwrap();
                    group.append_column(&bytes, close).unwrap();
                }
                group.close().unwrap();
                in_group = 0;
            }
        }
        let bytes = Bytes::from(file.into_inner().unwrap());
        let reader = SerializedFileReader::new(bytes).unwrap();
        // Statistics of the first row group, which readers skip row groups by.
        let group = reader.metadata().row_group(0);
        let rows = (0..GROUP).map(numbers);
        let d = rows.clone().map(|r| r.0);
        let want = (d.clone().min(), d.max(), Some(0));
        let stats = group.column(0).statistics().unwrap();
        let Statistics::Int64(got) = stats else {
            panic!("{stats:?}")
        };
        let got = (
            got.min_opt().copied(),
            got.max_opt().copied(),
            stats.null_count_opt(),
        );
        assert_eq!(got, want);
        let nulls = rows.filter(|r| r.2.is_none()).count() as u64;
        let stats = group.column(2).statistics().unwrap();
        assert_eq!(stats.null_count_opt(), Some(nulls));
        assert_eq!(
            group.column(4).statistics(),
            None,
            "no statistics for words"
        );
        let mut i = 0;
        for row in reader.get_row_iter(None).unwrap() {
            let row = row.unwrap();
            let (wd, wg, wo, ws) = numbers(i);
            assert_eq!(row.get_long(0).unwrap(), wd, "d, row {i}");
            assert_eq!(row.get_long(1).unwrap(), wg, "g, row {i}");
            let o = row.get_column_iter().nth(2).unwrap().1;
            assert_eq!(o, &wo.map_or(Field::Null, Field::Long), "o, row {i}");
            assert_eq!(row.get_int(3).unwrap(), ws, "s, row {i}");
            let list = row.get_list(4).unwrap();
            let got: Vec<String> = (0..list.len())
                .map(|k| list.get_string(k).unwrap().clone())
                .collect();
            assert_eq!(got, words(i), "l, row {i}");
            i += 1;
        }
        assert_eq!(i, ROWS);
    }
}
