//! A pickle writer for the few value shapes a PyTorch memory snapshot holds (dicts with string
//! keys, lists, strings, integers, booleans, pairs), with one thing general serializers lack:
//! an object written once and referred to again through the pickle memo. PyTorch's own
//! snapshots share each stack's frame list between every entry made there; written out again
//! at every entry, the frames made a snapshot of 20,000 entries 36 MiB instead of a few. Dict
//! keys are written once too, as Python's pickler does.
//!
//! The opcodes are protocol 3's, and only those the two readers that matter understand:
//! Python's `pickle` and the unpickler of PyTorch's JavaScript viewer (MemoryViz.js), which
//! reads integers wider than 8 bytes as `BigInt` — so integers are written as at most 8 bytes,
//! signed — and spreads each `APPENDS` batch into a call — so lists go in batches of 1,000, as
//! Python's pickler writes them.

use std::collections::HashMap;
use std::io::{self, Write};
use std::rc::Rc;

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const MARK: u8 = b'(';
const SETITEMS: u8 = b'u';
const APPENDS: u8 = b'e';
const BINUNICODE: u8 = b'X';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const TUPLE2: u8 = 0x86;
const LONG_BINPUT: u8 = b'r';
const LONG_BINGET: u8 = b'j';

/// Items per `SETITEMS` / `APPENDS` batch.
const BATCH: usize = 1000;

/// A value to pickle.
#[derive(Debug, Clone)]
pub enum Value {
    Dict(Vec<(&'static str, Value)>),
    List(Vec<Value>),
    Str(String),
    Int(i64),
    Bool(bool),
    Pair(Box<Value>, Box<Value>),
    /// Written in full the first time, referred to by its memo slot after: every `Shared` with
    /// the same `id` must hold the same value. Ids are dense from 0.
    Shared(u32, Rc<Value>),
}

impl Value {
    /// An integer; values above `i64::MAX` (none in a snapshot) saturate.
    pub fn uint(v: u64) -> Value {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

/// Writes `value` as a protocol-3 pickle.
pub fn write(out: &mut dyn Write, value: &Value) -> io::Result<()> {
    let mut w = Pickler {
        out,
        shared: Vec::new(),
        keys: HashMap::new(),
        slots: 0,
    };
    w.out.write_all(&[PROTO, 3])?;
    w.value(value)?;
    w.out.write_all(&[STOP])
}

struct Pickler<'w> {
    out: &'w mut dyn Write,
    /// The memo slot of each shared id written already.
    shared: Vec<Option<u32>>,
    /// The memo slot of each dict key written already.
    keys: HashMap<&'static str, u32>,
    /// Memo slots taken.
    slots: u32,
}

impl Pickler<'_> {
    /// Stores the value on top of the stack in the next memo slot.
    fn put(&mut self) -> io::Result<u32> {
        let slot = self.slots;
        self.slots += 1;
        self.out.write_all(&[LONG_BINPUT])?;
        self.out.write_all(&slot.to_le_bytes())?;
        Ok(slot)
    }

    fn get(&mut self, slot: u32) -> io::Result<()> {
        self.out.write_all(&[LONG_BINGET])?;
        self.out.write_all(&slot.to_le_bytes())
    }

    fn key(&mut self, k: &'static str) -> io::Result<()> {
        if let Some(&slot) = self.keys.get(k) {
            return self.get(slot);
        }
        self.str(k)?;
        let slot = self.put()?;
        self.keys.insert(k, slot);
        Ok(())
    }

    fn str(&mut self, s: &str) -> io::Result<()> {
        self.out.write_all(&[BINUNICODE])?;
        let len = u32::try_from(s.len()).map_err(|_| io::Error::other("string over 4 GiB"))?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(s.as_bytes())
    }

    fn value(&mut self, v: &Value) -> io::Result<()> {
        match v {
            Value::Dict(items) => {
                self.out.write_all(&[EMPTY_DICT])?;
                for batch in items.chunks(BATCH) {
                    self.out.write_all(&[MARK])?;
                    for (k, v) in batch {
                        self.key(k)?;
                        self.value(v)?;
                    }
                    self.out.write_all(&[SETITEMS])?;
                }
                Ok(())
            }
            Value::List(items) => {
                self.out.write_all(&[EMPTY_LIST])?;
                for batch in items.chunks(BATCH) {
                    self.out.write_all(&[MARK])?;
                    for v in batch {
                        self.value(v)?;
                    }
                    self.out.write_all(&[APPENDS])?;
                }
                Ok(())
            }
            Value::Str(s) => self.str(s),
            &Value::Int(i) => match i32::try_from(i) {
                Ok(small) => {
                    self.out.write_all(&[BININT])?;
                    self.out.write_all(&small.to_le_bytes())
                }
                Err(_) => {
                    self.out.write_all(&[LONG1, 8])?;
                    self.out.write_all(&i.to_le_bytes())
                }
            },
            &Value::Bool(b) => self.out.write_all(&[if b { NEWTRUE } else { NEWFALSE }]),
            Value::Pair(a, b) => {
                self.value(a)?;
                self.value(b)?;
                self.out.write_all(&[TUPLE2])
            }
            Value::Shared(id, v) => {
                let i = *id as usize;
                if let Some(&Some(slot)) = self.shared.get(i) {
                    return self.get(slot);
                }
                self.value(v)?;
                let slot = self.put()?;
                if self.shared.len() <= i {
                    self.shared.resize(i + 1, None);
                }
                self.shared[i] = Some(slot);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pickled(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out, v).unwrap();
        out
    }

    #[test]
    fn integers_take_at_most_eight_bytes() {
        assert_eq!(pickled(&Value::Int(5)), [0x80, 3, b'J', 5, 0, 0, 0, b'.']);
        let big = pickled(&Value::uint(0x7f00_0000_0000));
        assert_eq!(&big[2..4], &[0x8a, 8]);
        assert_eq!(big.len(), 2 + 2 + 8 + 1);
    }

    #[test]
    fn a_shared_value_is_written_once() {
        let frames = Rc::new(Value::List(vec![Value::Str("forward".into())]));
        let v = Value::List(vec![
            Value::Shared(0, frames.clone()),
            Value::Shared(0, frames),
        ]);
        let p = pickled(&v);
        assert_eq!(p.windows(7).filter(|w| w == b"forward").count(), 1);
        assert!(p.ends_with(&[b'j', 0, 0, 0, 0, b'e', b'.']));
        // Keys are memoized as well.
        let d = Value::Dict(vec![("addr", Value::Int(1))]);
        let p = pickled(&Value::List(vec![d.clone(), d]));
        assert_eq!(p.windows(4).filter(|w| w == b"addr").count(), 1);
    }
}
