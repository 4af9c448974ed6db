//! The loaded objects as the unwinder sees them: for each object with unwind information, its
//! code range and its `.eh_frame_hdr` / `.eh_frame`, read in place from the process's own memory.
//!
//! The list is an immutable snapshot behind an [`AtomicPtr`] (read-copy-update): a capture loads
//! the pointer and uses the list without any lock, a capture that finds the list out of date
//! builds a new one and publishes it. Old lists are never freed — a capture on another thread may
//! still be walking one — so each change of the loaded set that a capture sees costs one leaked
//! list, about 70 bytes per loaded object (the unwind data itself is never copied).
//!
//! Whether the list is current is decided by the loader's own counters of objects added and
//! removed (`dlpi_adds`, `dlpi_subs`): one `dl_iterate_phdr` call stopped at the first object
//! (about 10 ns, but it takes the loader's lock, so it is not done on every capture: see
//! `rules`). It is done before every use of framehop, and it matters for safety, not only for
//! coverage: the list points into each object's mapped memory, so after a `dlclose` it must not be
//! used again, or a return address that lands where the closed object was would make framehop
//! read unmapped memory. Nothing new is ever missed either: every object with a frame on the
//! calling thread's stack was loaded before the capture began.
//!
//! A forked child inherits the current list, and the mappings it points into, unchanged.

use std::ops::Range;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use libc::{c_int, c_void, dl_phdr_info, size_t};

/// Section data: a slice of a loaded object's mapped memory (valid while the object is loaded,
/// which the loader counters in [`ModuleList`] vouch for).
pub type Mapped = &'static [u8];

/// One snapshot of the loaded objects.
pub struct ModuleList {
    pub unwinder: UnwinderX86_64<Mapped>,
    /// The loader's (adds, subs) counters when the snapshot was taken.
    generation: (u64, u64),
    /// How many objects it describes.
    len: usize,
}

static CURRENT: AtomicPtr<ModuleList> = AtomicPtr::new(ptr::null_mut());

/// The module list for the process as it is loaded now, building a new one if objects were
/// loaded or unloaded since the last. `None` only if the loader reports no objects at all.
pub fn current() -> Option<&'static ModuleList> {
    let generation = loader_generation()?;
    let seen = CURRENT.load(Ordering::Acquire);
    // SAFETY: CURRENT only ever holds null or a pointer from Box::leak, never freed.
    if let Some(list) = unsafe { seen.as_ref() } {
        if list.generation == generation {
            return Some(list);
        }
    }
    Some(refresh(seen))
}

/// Builds a new list and publishes it, unless another thread published one for the same
/// generation meanwhile. No lock: two threads may build at once, and the loser's unpublished
/// list is simply dropped.
fn refresh(seen: *mut ModuleList) -> &'static ModuleList {
    // SAFETY: as in `current`.
    let hint = unsafe { seen.as_ref() }.map_or(0, |l| l.len);
    let fresh = Box::new(build(hint));
    let fresh = Box::into_raw(fresh);
    match CURRENT.compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // The old list is leaked on purpose: other threads may still be walking it.
        // SAFETY: `fresh` is the pointer just leaked from a Box; it now lives forever.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `other` is a published list (never freed); `fresh` was never published,
            // so this thread owns it alone.
            let (other_ref, fresh_ref) = unsafe { (&*other, &*fresh) };
            if other_ref.generation == fresh_ref.generation {
                // SAFETY: never published: no other reference to it exists.
                drop(unsafe { Box::from_raw(fresh) });
                other_ref
            } else {
                // Another thread published a different generation; ours is as good a guess as
                // theirs, and the next capture re-checks anyway.
                CURRENT.store(fresh, Ordering::Release);
                fresh_ref
            }
        }
    }
}

/// The loader's counters of objects loaded and unloaded so far.
fn loader_generation() -> Option<(u64, u64)> {
    unsafe extern "C" fn first(info: *mut dl_phdr_info, size: size_t, data: *mut c_void) -> c_int {
        if size < std::mem::offset_of!(dl_phdr_info, dlpi_subs) + 8 {
            return 1;
        }
        // SAFETY: dl_iterate_phdr passes a valid info of `size` bytes (checked to include the
        // counters) and our own Option.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Option<(u64, u64)>)) };
        *out = Some((info.dlpi_adds, info.dlpi_subs));
        // Stop after the first object: the counters are the same in every callback.
        1
    }
    let mut out: Option<(u64, u64)> = None;
    // SAFETY: `first` only reads the info it is given and writes our local.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut out as *mut _ as *mut c_void) };
    out
}

/// What the loader says about one object, copied out while its lock is held; only plain values,
/// so the callback never allocates under the loader's lock.
#[derive(Clone, Copy, Default)]
struct Object {
    base: u64,
    /// Actual addresses (in this process) of the executable segments' span.
    text: (u64, u64),
    /// `.eh_frame_hdr` (from PT_GNU_EH_FRAME): actual address and size.
    eh_frame_hdr: (u64, u64),
    /// `.eh_frame` (from the header): actual address, and the size up to the end of its segment
    /// (the header gives no size; framehop only reads the entries the header's table points at,
    /// so the slack after the section is never parsed).
    eh_frame: (u64, u64),
}

struct Collect {
    objects: Vec<Object>,
    /// Objects seen that did not fit in `objects`' capacity (then the walk is redone larger).
    overflow: usize,
    generation: Option<(u64, u64)>,
}

unsafe extern "C" fn collect(info: *mut dl_phdr_info, size: size_t, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our own Collect.
    let (info, c) = unsafe { (&*info, &mut *(data as *mut Collect)) };
    if size >= std::mem::offset_of!(dl_phdr_info, dlpi_subs) + 8 {
        c.generation = Some((info.dlpi_adds, info.dlpi_subs));
    }
    // Objects without usable unwind information are left out: for their addresses framehop
    // falls back to the frame pointer, as it would for a module without CFI.
    if let Some(o) = object(info) {
        if c.objects.len() < c.objects.capacity() {
            c.objects.push(o);
        } else {
            c.overflow += 1;
        }
    }
    0
}

/// Reads one object's program headers and unwind header. Called under the loader's lock, so the
/// object cannot be unloaded while its memory is read.
fn object(info: &dl_phdr_info) -> Option<Object> {
    if info.dlpi_phdr.is_null() {
        return None;
    }
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers while the callback runs.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let base = info.dlpi_addr;
    let segment = |p: &libc::Elf64_Phdr| {
        let start = base.wrapping_add(p.p_vaddr);
        (start, start.wrapping_add(p.p_memsz))
    };
    let loads = || {
        phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(segment)
    };
    let within = |at: u64, len: u64| loads().find(|&(s, e)| at >= s && at.saturating_add(len) <= e);
    let text = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0)
        .map(segment)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))?;
    // framehop keeps addresses relative to the load bias in 32 bits.
    if text.1.checked_sub(base)? > u64::from(u32::MAX) {
        return None;
    }
    let (hdr_start, hdr_end) = segment(phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME)?);
    let hdr_len = hdr_end - hdr_start;
    // The header's fixed part is 4 bytes, then at least a 4-byte pointer.
    if hdr_len < 8 {
        return None;
    }
    within(hdr_start, hdr_len)?;
    // SAFETY: the header lies inside a loaded segment (checked just above) of an object the
    // loader's lock keeps loaded.
    let hdr = unsafe { std::slice::from_raw_parts(hdr_start as *const u8, hdr_len as usize) };
    let parsed = parse_eh_frame_hdr(hdr, hdr_start, base)?;
    // Without the search table framehop would index `.eh_frame` itself when the module is made,
    // reading the object's memory after the loader's lock is gone (and allocating under it if
    // done here); linkers always write the table, so such objects are left to frame pointers.
    if !parsed.has_table {
        return None;
    }
    let (_, eh_segment_end) = within(parsed.eh_frame, 1)?;
    Some(Object {
        base,
        text,
        eh_frame_hdr: (hdr_start, hdr_len),
        eh_frame: (parsed.eh_frame, eh_segment_end - parsed.eh_frame),
    })
}

/// Walks the loaded objects and builds a module list from them.
fn build(hint: usize) -> ModuleList {
    let mut capacity = (hint * 2).max(256);
    let (objects, generation) = loop {
        let mut c = Collect {
            objects: Vec::with_capacity(capacity),
            overflow: 0,
            generation: None,
        };
        // SAFETY: `collect` only reads the loader's data and the objects' unwind headers during
        // the callback, and writes into our Collect without allocating (it stops filling at the
        // reserved capacity).
        unsafe { libc::dl_iterate_phdr(Some(collect), &mut c as *mut Collect as *mut c_void) };
        if c.overflow == 0 {
            break (c.objects, c.generation.unwrap_or((0, 0)));
        }
        capacity = (c.objects.len() + c.overflow) * 2;
    };
    let mut unwinder = UnwinderX86_64::new();
    for o in &objects {
        unwinder.add_module(module(o));
    }
    ModuleList {
        unwinder,
        generation,
        len: objects.len(),
    }
}

/// The framehop module for one object, with its unwind sections as slices of its mapped image.
/// framehop only keeps the slices here; it reads them when it unwinds.
fn module(o: &Object) -> Module<Mapped> {
    // SAFETY: both sections lie inside loaded segments of the object (checked in `object`), which
    // stay mapped while this list is current (see the module docs).
    let (hdr, eh_frame): (Mapped, Mapped) = unsafe {
        (
            std::slice::from_raw_parts(o.eh_frame_hdr.0 as *const u8, o.eh_frame_hdr.1 as usize),
            std::slice::from_raw_parts(o.eh_frame.0 as *const u8, o.eh_frame.1 as usize),
        )
    };
    // Stated addresses (SVMAs) of an ELF object are its actual addresses less its load bias.
    let svma = |(avma, len): (u64, u64)| -> Range<u64> {
        let s = avma.wrapping_sub(o.base);
        s..s.wrapping_add(len)
    };
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(svma((o.text.0, o.text.1 - o.text.0))),
        eh_frame_svma: Some(svma(o.eh_frame)),
        eh_frame: Some(eh_frame),
        eh_frame_hdr_svma: Some(svma(o.eh_frame_hdr)),
        eh_frame_hdr: Some(hdr),
        ..Default::default()
    };
    Module::new(String::new(), o.text.0..o.text.1, o.base, info)
}

struct EhFrameHdr {
    /// Actual address of `.eh_frame`.
    eh_frame: u64,
    /// Whether the header carries the binary search table framehop looks FDEs up in.
    has_table: bool,
}

const DW_EH_PE_OMIT: u8 = 0xff;

/// Reads the version and the `.eh_frame` pointer of an `.eh_frame_hdr` found at `at` in an object
/// loaded with bias `bias`.
fn parse_eh_frame_hdr(hdr: &[u8], at: u64, bias: u64) -> Option<EhFrameHdr> {
    let (&version, rest) = hdr.split_first()?;
    if version != 1 || rest.len() < 3 {
        return None;
    }
    let (ptr_enc, count_enc, table_enc) = (rest[0], rest[1], rest[2]);
    let eh_frame = read_encoded(&hdr[4..], ptr_enc, at + 4, at, bias)?;
    Some(EhFrameHdr {
        eh_frame,
        has_table: count_enc != DW_EH_PE_OMIT && table_enc != DW_EH_PE_OMIT,
    })
}

/// Decodes one DWARF EH pointer (`DW_EH_PE_*`) found at actual address `pc`, with `data` the
/// base of data-relative values (the header's start) and `bias` the object's load bias (an
/// absolute value in this never-relocated header is a stated address).
fn read_encoded(bytes: &[u8], enc: u8, pc: u64, data: u64, bias: u64) -> Option<u64> {
    if enc == DW_EH_PE_OMIT || enc & 0x80 != 0 {
        return None;
    }
    let take = |n: usize| bytes.get(..n);
    let value: u64 = match enc & 0x0f {
        0x00 | 0x04 | 0x0c => u64::from_le_bytes(take(8)?.try_into().ok()?),
        0x03 => u64::from(u32::from_le_bytes(take(4)?.try_into().ok()?)),
        0x0b => i64::from(i32::from_le_bytes(take(4)?.try_into().ok()?)) as u64,
        0x02 => u64::from(u16::from_le_bytes(take(2)?.try_into().ok()?)),
        0x0a => i64::from(i16::from_le_bytes(take(2)?.try_into().ok()?)) as u64,
        _ => return None,
    };
    match enc & 0x70 {
        0x00 => Some(bias.wrapping_add(value)),
        0x10 => Some(pc.wrapping_add(value)),
        0x30 => Some(data.wrapping_add(value)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eh_frame_pointer_decodes_pc_and_data_relative() {
        // version 1, pcrel|sdata4, udata4, datarel|sdata4; eh_frame at -0x40 from the field.
        let mut hdr = vec![1u8, 0x1b, 0x03, 0x3b];
        hdr.extend_from_slice(&(-0x40i32).to_le_bytes());
        hdr.extend_from_slice(&[0; 4]);
        let p = parse_eh_frame_hdr(&hdr, 0x1000, 0).unwrap();
        assert_eq!(p.eh_frame, 0x1004 - 0x40);
        assert!(p.has_table);
        hdr[1] = 0x3b;
        assert_eq!(
            parse_eh_frame_hdr(&hdr, 0x1000, 0).unwrap().eh_frame,
            0x1000 - 0x40
        );
        hdr[2] = DW_EH_PE_OMIT;
        assert!(!parse_eh_frame_hdr(&hdr, 0x1000, 0).unwrap().has_table);
        hdr[1] = DW_EH_PE_OMIT;
        assert!(parse_eh_frame_hdr(&hdr, 0x1000, 0).is_none());
        hdr[0] = 2;
        assert!(parse_eh_frame_hdr(&hdr, 0x1000, 0).is_none());
    }

    /// Counts the loaded objects with code and an `.eh_frame_hdr`, and the loader's counters.
    unsafe extern "C" fn count(info: *mut dl_phdr_info, _: size_t, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our own counter.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut (usize, (u64, u64)))) };
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers while the callback runs.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let code = phdrs
            .iter()
            .any(|p| p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0);
        let hdr = phdrs.iter().any(|p| p.p_type == libc::PT_GNU_EH_FRAME);
        out.0 += usize::from(code && hdr);
        out.1 = (info.dlpi_adds, info.dlpi_subs);
        0
    }

    #[test]
    fn the_list_covers_every_object_with_unwind_information_and_stays_put() {
        // Other tests load and unload libraries meanwhile: look until nothing changed.
        for _ in 0..100 {
            let list = current().expect("a module list");
            let mut seen = (0usize, (0u64, 0u64));
            // SAFETY: `count` only reads the info it is given and writes our local.
            unsafe { libc::dl_iterate_phdr(Some(count), &mut seen as *mut _ as *mut c_void) };
            let again = current().unwrap();
            if !ptr::eq(list, again) || seen.1 != list.generation {
                continue;
            }
            // Every one (the vDSO and libc included) had a header that parsed.
            assert_eq!(list.len, seen.0);
            assert!(list.len >= 3, "{} modules", list.len);
            let max = list.unwinder.max_known_code_address();
            let here = current as *const () as u64;
            let libc_fn = libc::getpid as *const () as u64;
            assert!(here < max && libc_fn < max);
            return;
        }
        panic!("the loaded objects never held still");
    }
}
