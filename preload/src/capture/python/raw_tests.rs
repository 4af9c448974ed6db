//! The raw walk over interpreter memory laid out by hand (the 3.12 layout): what it shows, what
//! it skips, where it stops, and how it names code objects that die and are replaced.

use std::ffi::c_void;

use super::*;
use crate::capture::python::layout::V3_12;

unsafe extern "C" fn no_thread_state() -> *mut c_void {
    std::ptr::null_mut()
}

unsafe extern "C" fn no_interp(_: *mut c_void) -> *mut c_void {
    std::ptr::null_mut()
}

/// Stand-ins for the three type objects: only their addresses matter.
static TYPES: [u64; 3] = [0; 3];

fn runtime() -> Runtime {
    Runtime {
        layout: &V3_12,
        code_type: &TYPES[0] as *const u64 as usize,
        unicode_type: &TYPES[1] as *const u64 as usize,
        bytes_type: &TYPES[2] as *const u64 as usize,
        this_thread_state: no_thread_state,
        thread_interp: no_interp,
    }
}

/// Hand-made objects, kept alive (and at fixed addresses) for the test.
#[derive(Default)]
struct Heap(Vec<(*mut u64, usize)>);

impl Drop for Heap {
    fn drop(&mut self) {
        for &(p, words) in &self.0 {
            // SAFETY: made by `Box::into_raw` of a boxed slice of `words` words in `block`.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, words)) });
        }
    }
}

impl Heap {
    /// A zeroed, 8-aligned block of `bytes` bytes.
    fn block(&mut self, bytes: usize) -> usize {
        let words = bytes.div_ceil(8);
        let p = Box::into_raw(vec![0u64; words].into_boxed_slice()) as *mut u64;
        self.0.push((p, words));
        p as usize
    }

    fn put<T>(&self, addr: usize, value: T) {
        // SAFETY: `addr` lies inside a block of this heap (the tests write inside their
        // objects only), aligned for `T`; blocks are only reached through raw pointers.
        unsafe { std::ptr::write(addr as *mut T, value) }
    }

    /// A compact `str` holding `text`, ASCII or in the narrowest kind that fits (1, 2 or 4 bytes
    /// per code point), with cached hash `hash`.
    fn string(&mut self, rt: &Runtime, text: &str, hash: isize) -> usize {
        let l = rt.layout;
        let points: Vec<u32> = text.chars().map(|c| c as u32).collect();
        let ascii = text.is_ascii();
        let kind = match points.iter().max().copied().unwrap_or(0) {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        };
        let data = if ascii { l.ascii_data } else { l.compact_data };
        let s = self.block(data + (points.len() + 1) * kind);
        self.put(s + layout::OB_TYPE, rt.unicode_type);
        self.put(s + layout::STR_LENGTH, points.len() as isize);
        self.put(s + layout::STR_HASH, hash);
        let state = layout::STATE_COMPACT
            | if ascii { layout::STATE_ASCII } else { 0 }
            | (kind as u32) << layout::STATE_KIND_SHIFT;
        self.put(s + layout::STR_STATE, state);
        for (i, &p) in points.iter().enumerate() {
            match kind {
                1 => self.put(s + data + i, p as u8),
                2 => self.put(s + data + 2 * i, p as u16),
                _ => self.put(s + data + 4 * i, p),
            }
        }
        s
    }

    /// A code object of 16 code units: units 0–7 on `first_line`, 8–15 on the next line; the
    /// first two units are set-up code (`_co_firsttraceable` = 2).
    fn code(&mut self, rt: &Runtime, file: usize, qualname: usize, first_line: i32) -> usize {
        let l = rt.layout;
        let table = self.block(layout::BYTES_SVAL + 8);
        self.put(table + layout::OB_TYPE, rt.bytes_type);
        self.put(table + layout::OB_SIZE, 2isize);
        // Two one-line entries of 8 units: line + 0, then line + 1.
        self.put(table + layout::BYTES_SVAL, [0xd7u8, 0xdf]);
        let c = self.block(l.code_adaptive + 32);
        self.put(c + layout::OB_TYPE, rt.code_type);
        self.put(c + layout::OB_SIZE, 16isize);
        self.put(c + l.code_firstlineno, first_line);
        self.put(c + l.code_filename, file);
        self.put(c + l.code_name, qualname);
        self.put(c + l.code_qualname, qualname);
        self.put(c + l.code_linetable, table);
        self.put(c + l.code_firsttraceable, 2i32);
        c
    }

    /// A frame running `code` at code unit `index`, owned by `owner`, called from `previous`.
    fn frame(
        &mut self,
        rt: &Runtime,
        code: usize,
        index: usize,
        owner: u8,
        previous: usize,
    ) -> usize {
        let l = rt.layout;
        let f = self.block(80);
        self.put(f + l.frame_code, code);
        self.put(f + l.frame_previous, previous);
        self.put(f + l.frame_instr, code + l.code_adaptive + 2 * index);
        self.put(f + l.frame_owner, owner);
        f
    }
}

fn codes() -> Box<Codes> {
    Box::new(Codes {
        ids: None,
        by_name: None,
        defs: Vec::new(),
        raw: RawNames::new(),
    })
}

/// Walks from `frame` with room for `depth` frames: (function, line) innermost first.
fn walk_names(rt: &Runtime, codes: &mut Codes, frame: usize, depth: usize) -> Vec<(String, u32)> {
    let mut out = vec![MaybeUninit::uninit(); depth];
    // SAFETY: every frame reachable from `frame` was laid out by the test's heap.
    let n = unsafe { walk(rt, codes, frame, &mut out) };
    out[..n]
        .iter()
        // SAFETY: `walk` initialised the first `n`.
        .map(|f| unsafe { f.assume_init() })
        .map(|f| (codes.defs[f.code as usize - 1].function.clone(), f.line))
        .collect()
}

#[test]
fn shows_complete_frames_and_skips_entry_and_incomplete_ones() {
    let rt = runtime();
    let mut heap = Heap::default();
    let file = heap.string(&rt, "train.py", 11);
    let (step, loss) = (
        heap.string(&rt, "step", 12),
        heap.string(&rt, "Model.loss", 13),
    );
    let (step, loss) = (
        heap.code(&rt, file, step, 40),
        heap.code(&rt, file, loss, 80),
    );
    let outer = heap.frame(&rt, step, 3, 0, 0);
    // A frame still setting up its cells (before its first traceable instruction).
    let incomplete = heap.frame(&rt, loss, 1, 0, outer);
    let entry = heap.frame(&rt, loss, 0, 3, incomplete);
    // A generator's frame is never incomplete.
    let generator = heap.frame(&rt, step, 0, 1, entry);
    let inner = heap.frame(&rt, loss, 9, 0, generator);
    let mut c = codes();
    assert_eq!(
        walk_names(&rt, &mut c, inner, 32),
        [
            ("Model.loss".into(), 81),
            ("step".into(), 40),
            ("step".into(), 40)
        ]
    );
    // Again, from the call-site cache: the same.
    assert_eq!(walk_names(&rt, &mut c, inner, 32).len(), 3);
    assert_eq!(walk_names(&rt, &mut c, inner, 2).len(), 2);
    assert_eq!(c.defs.len(), 2);
}

#[test]
fn stops_at_what_is_not_a_frame_of_code() {
    let rt = runtime();
    let mut heap = Heap::default();
    let file = heap.string(&rt, "a.py", 1);
    let name = heap.string(&rt, "f", 2);
    let code = heap.code(&rt, file, name, 1);
    let mut c = codes();

    // A code object whose type is not `code`.
    let fake = heap.code(&rt, file, name, 1);
    heap.put(fake + layout::OB_TYPE, rt.unicode_type);
    let f = heap.frame(&rt, fake, 3, 0, 0);
    let f = heap.frame(&rt, code, 3, 0, f);
    assert_eq!(walk_names(&rt, &mut c, f, 32).len(), 1);

    // An instruction pointer outside the code, a misaligned link, a name that is not a string,
    // a line table that is not bytes.
    let f = heap.frame(&rt, code, 16, 0, 0);
    let f = heap.frame(&rt, code, 3, 0, f);
    assert_eq!(walk_names(&rt, &mut c, f, 32).len(), 1);
    let f = heap.frame(&rt, code, 3, 0, 0x1001);
    assert_eq!(walk_names(&rt, &mut c, f, 32).len(), 1);
    let unnamed = heap.code(&rt, file, code, 1);
    let f = heap.frame(&rt, unnamed, 3, 0, 0);
    assert_eq!(walk_names(&rt, &mut c, f, 32).len(), 0);
    let untabled = heap.code(&rt, file, name, 1);
    heap.put(untabled + rt.layout.code_linetable, file);
    let f = heap.frame(&rt, untabled, 3, 0, 0);
    assert_eq!(walk_names(&rt, &mut c, f, 32).len(), 0);

    // A chain that loops on itself ends at the depth; one of entry frames only, within bounds.
    let f = heap.frame(&rt, code, 3, 0, 0);
    heap.put(f + rt.layout.frame_previous, f);
    assert_eq!(walk_names(&rt, &mut c, f, 8).len(), 8);
    let e = heap.frame(&rt, code, 3, 3, 0);
    heap.put(e + rt.layout.frame_previous, e);
    assert_eq!(walk_names(&rt, &mut c, e, 8).len(), 0);
}

#[test]
fn a_code_object_replaced_at_the_same_address_gets_its_own_name() {
    let rt = runtime();
    let mut heap = Heap::default();
    let file = heap.string(&rt, "gen.py", 5);
    let first = heap.string(&rt, "first", 6);
    let second = heap.string(&rt, "second", 7);
    let code = heap.code(&rt, file, first, 10);
    let f = heap.frame(&rt, code, 9, 0, 0);
    let mut c = codes();
    assert_eq!(walk_names(&rt, &mut c, f, 4), [("first".into(), 11)]);
    // The same address now holds another function: another name, another first line.
    heap.put(code + rt.layout.code_qualname, second);
    assert_eq!(walk_names(&rt, &mut c, f, 4), [("second".into(), 11)]);
    heap.put(code + rt.layout.code_firstlineno, 20i32);
    assert_eq!(walk_names(&rt, &mut c, f, 4), [("second".into(), 21)]);
    // A string at the same address with other contents (its hash tells).
    heap.put(second + layout::STR_HASH, 8isize);
    heap.put(second + rt.layout.ascii_data, *b"secant");
    assert_eq!(walk_names(&rt, &mut c, f, 4), [("secant".into(), 21)]);
    // And back: names are shared by content.
    heap.put(code + rt.layout.code_qualname, first);
    heap.put(code + rt.layout.code_firstlineno, 10i32);
    assert_eq!(walk_names(&rt, &mut c, f, 4), [("first".into(), 11)]);
    assert_eq!(c.defs.len(), 4);
}

#[test]
fn strings_of_every_kind_are_read() {
    let rt = runtime();
    let mut heap = Heap::default();
    for text in ["plain", "größe", "分配", "f_𝔘", ""] {
        let s = heap.string(&rt, text, -1);
        // SAFETY: a compact string laid out above.
        assert_eq!(unsafe { read_str(rt.layout, s) }, text);
    }
    let legacy = heap.string(&rt, "x", -1);
    heap.put(legacy + layout::STR_STATE, 0u32);
    // SAFETY: as above.
    assert_eq!(unsafe { read_str(rt.layout, legacy) }, "<?>");
}
